"""verify.runtime.json_lines_child, the one runner behind the import probe, the GPU workers and the distributed
ranks: real child processes, real pipes, real signals."""

from __future__ import annotations

import os
import queue
import signal
import sys
import time

import pytest

from tests.support import REPO
from verify.runtime import child_processes
from verify.runtime.json_lines_child import TIMEOUT, JsonLinesChild, describe_exit, last_line, verify_env


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_events_then_a_timeout_then_a_kill_described_with_the_stderr_tail() -> None:
    code = (
        "import json, sys, time\n"
        "print('stray text, not protocol', flush=True)\n"
        "print(json.dumps({'no_event_key': 1}), flush=True)\n"
        "print(json.dumps({'event': 'ready', 'n': 1}), flush=True)\n"
        "sys.stderr.write('about to hang\\n'); sys.stderr.flush()\n"
        "time.sleep(60)\n"
    )
    child = JsonLinesChild(_python(code), label="test-hang")
    try:
        assert child.pid in child_processes._live  # registered: a signal to verify kills it too
        assert child.next_event(30) == {"event": "ready", "n": 1}  # stray lines and non-events skipped
        assert child.next_event(0.5) is TIMEOUT
        assert child.running()
    finally:
        child.kill()
    returncode, tail = child.finish()
    assert describe_exit(returncode) == "killed by SIGKILL"
    assert last_line(tail) == "about to hang"
    assert child.pid not in child_processes._live and not child.log_path.exists()
    assert child.finish() == (returncode, tail)  # idempotent


def test_events_on_a_passed_fd_with_stdin_and_the_end_of_stream() -> None:
    code = (
        "import json, os, sys\n"
        "out = os.fdopen(int(sys.argv[1]), 'w')\n"
        "request = sys.stdin.read()\n"
        "print('extension code printing to stdout')\n"
        "out.write(json.dumps({'start': request}) + '\\n'); out.flush()\n"
        "sys.exit(3)\n"
    )
    child = JsonLinesChild(
        _python(code),
        label="test-fd",
        events_on_fd=True,
        stdin_pipe=True,
        is_event=lambda _message: True,
        tail_chars=None,
    )
    child.send_and_close(b"amp_C")
    assert child.next_event(30) == {"start": "amp_C"}
    assert child.next_event(30) is None  # the child exited: its end of the pipe closed
    returncode, log = child.finish()
    assert describe_exit(returncode) == "exit code 3"
    assert "extension code printing to stdout" in log  # stdout goes to the log, not the protocol


def test_a_kill_ends_the_whole_process_group() -> None:
    code = (
        "import json, subprocess, sys, time\n"
        "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(json.dumps({'event': 'ready', 'pid': grandchild.pid}), flush=True)\n"
        "time.sleep(60)\n"
    )
    child = JsonLinesChild(_python(code), label="test-group")
    try:
        event = child.next_event(30)
        assert isinstance(event, dict), event
        grandchild = event["pid"]
        assert _alive(grandchild)
    finally:
        child.kill()
        child.finish()
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)  # reaped by init once its parent is gone
    assert not _alive(grandchild)


def test_children_share_one_queue_tagged_by_rank() -> None:
    events: queue.Queue = queue.Queue()
    code = "import json, os; print(json.dumps({'event': 'ready', 'rank': os.environ['RANK']}), flush=True)"
    ranks = [
        JsonLinesChild(
            _python(code), label=f"test-rank{r}", env={**verify_env(), "RANK": str(r)}, events=events, tag=r
        )
        for r in range(2)
    ]
    seen: dict[int, list] = {0: [], 1: []}
    for _ in range(4):
        tag, event = events.get(timeout=30)
        seen[tag].append(event)
    for rank in ranks:
        rank.finish()
    assert seen == {0: [{"event": "ready", "rank": "0"}, None], 1: [{"event": "ready", "rank": "1"}, None]}
    assert verify_env()["PYTHONPATH"].split(os.pathsep)[0] == str(
        REPO
    )  # the children import this very verify


def test_no_child_starts_once_verify_is_stopping() -> None:
    child_processes.stop_all()
    try:
        with pytest.raises(child_processes.Stopping):  # no child starts while stopping
            JsonLinesChild(_python("pass"), label="test-stopping")
    finally:
        child_processes.allow()


def test_describe_exit_names_the_signal() -> None:
    assert describe_exit(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert describe_exit(-99) == "killed by signal 99" and describe_exit(None) == "still running"
    assert describe_exit(0) == "exit code 0"
