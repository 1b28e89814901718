"""One child process that speaks JSON lines: started in its own process group, read with timeouts, ended.

The import probe, the GPU check workers and the distributed ranks are all this: `start` the child
(registered in verify.runtime.child_processes, so a signal to verify kills it), read its events (one JSON object
per line, from stdout or from a pipe whose fd number is appended to argv), `kill` it on a timeout, and
`finish` it: reap, keep the tail of its stderr, and say how it ended (`describe_exit`). A thread pumps
the event stream into a queue, so a reader never blocks past its timeout on a silent child.
Standard library only.
"""

from __future__ import annotations

import enum
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Final, Literal

from verify.runtime import child_processes, input_files

STDERR_TAIL_CHARS = 2000


class Timeout(enum.Enum):
    """next_event's answer when no event came in time (None: the stream ended); an enum, so `is` narrows."""

    TIMEOUT = "timeout"


TIMEOUT: Final = Timeout.TIMEOUT
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding verify/


def verify_env() -> dict[str, str]:
    """The environment for a `python -m verify...` child: it must import this very verify, installed or not."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _is_event(obj: dict[str, Any]) -> bool:
    return "event" in obj


class JsonLinesChild:
    """One child; its events go to `events` as (tag, event dict), then (tag, None) at the end of the stream.

    events: a queue shared by several children (the ranks of one group), else one of its own, read
    with next_event. events_on_fd: the events come on a pipe whose fd number is the last argument
    (stdout and stderr then both go to the log), else on stdout. stdin_pipe: keep stdin open for one
    send_and_close (a request, a release); else stdin is /dev/null. is_event: which JSON objects are
    protocol (anything else on the stream is ignored).
    """

    def __init__(
        self,
        argv: list[str],
        *,
        label: str,
        env: dict[str, str] | None = None,
        events: queue.Queue[tuple[Any, dict[str, Any] | None]] | None = None,
        tag: Hashable = None,
        events_on_fd: bool = False,
        stdin_pipe: bool = False,
        is_event: Callable[[dict[str, Any]], bool] = _is_event,
        tail_chars: int | None = STDERR_TAIL_CHARS,
    ) -> None:
        self.tag, self.tail_chars, self._is_event = tag, tail_chars, is_event
        self.events: queue.Queue[tuple[Any, dict[str, Any] | None]] = events or queue.Queue()
        self.returncode: int | None = None
        self.stderr_tail = ""
        self.log = tempfile.NamedTemporaryFile(prefix=f"verify-{label}-", suffix=".log", delete=False)
        self.log_path = Path(self.log.name)
        read_fd = write_fd = None
        try:
            if events_on_fd:
                read_fd, write_fd = os.pipe()
                argv = [*argv, str(write_fd)]
            self.started = time.monotonic()
            # its own session: a kill ends the child and anything it started, and nothing else
            self.proc = child_processes.start(
                argv,
                env=env,
                stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                stdout=self.log if events_on_fd else subprocess.PIPE,
                stderr=subprocess.STDOUT if events_on_fd else self.log,
                pass_fds=(write_fd,) if events_on_fd else (),
            )
        except BaseException:  # verify is stopping (child_processes.Stopping), or Popen failed
            for fd in (read_fd, write_fd):
                if fd is not None:
                    os.close(fd)
            self.log.close()
            self.log_path.unlink(missing_ok=True)
            raise
        if write_fd is not None:
            os.close(write_fd)  # the child holds its end: end of stream comes when the child exits
        stream = os.fdopen(read_fd, "rb") if read_fd is not None else self.proc.stdout
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        with stream:
            # one event a line, each at most CHILD_MESSAGE long (a longer one arrives in pieces, each not JSON)
            for raw in iter(lambda: stream.readline(input_files.CHILD_MESSAGE.max_bytes + 1), b""):
                try:
                    event = input_files.parse_json(
                        raw.decode("utf-8", errors="replace"), "a child's event", input_files.CHILD_MESSAGE
                    )
                except input_files.InputFileError:
                    continue  # not ours: children point stray output at stderr, but be lenient
                if isinstance(event, dict) and self._is_event(event):
                    self.events.put((self.tag, event))
        self.events.put((self.tag, None))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def next_event(self, timeout_s: float) -> dict[str, Any] | None | Literal[Timeout.TIMEOUT]:
        """An event dict, None at end of stream, or TIMEOUT (only for a child with its own queue)."""
        try:
            _tag, event = self.events.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            return TIMEOUT
        return event

    def send_and_close(self, data: bytes) -> None:
        """Write to the child's stdin and close it; a child that already died says so at its end of stream."""
        if self.proc.stdin is None or self.proc.stdin.closed:
            return
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.close()
        except OSError:
            pass

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the child's process group and reap it."""
        child_processes.kill(self.proc)
        child_processes.reap(self.proc)

    def finish(self, grace_s: float = 10.0) -> tuple[int | None, str]:
        """Wait for the exit (kill after grace_s), reap, keep the exit status and the log's tail; idempotent."""
        if not self.log.closed:
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                child_processes.kill(self.proc)
            child_processes.reap(self.proc)
            self.returncode = self.proc.returncode
            self.log.close()
            try:  # the child's stderr, which this process made: its tail, bounded
                data, _ = input_files.read_part(self.log_path, input_files.LOG, None, 4 << 20)
            except input_files.InputFileError:
                data = b""
            self.stderr_tail = (data if self.tail_chars is None else data[-self.tail_chars :]).decode(
                "utf-8", errors="replace"
            )
            self.log_path.unlink(missing_ok=True)
        return self.returncode, self.stderr_tail
