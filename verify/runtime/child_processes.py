"""The child processes verify starts (the import probe, the GPU check workers), and how they end.

Each child gets a session and process group of its own: a Ctrl-C typed at the terminal reaches verify
alone (no child prints its own KeyboardInterrupt), and verify then ends them on purpose, the whole
group at once, so whatever a child started dies with it. Every live child is in one registry: a
signal (verify.runtime.interrupts runs `stop_all` inside its handler), a timeout, or the end of a CLI run
(verify.runtime.entry_point) kills them with SIGKILL, and once stopping no new child is started.
A SIGKILL of verify itself cannot be caught: its children then end at their own timeouts only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import Any

from verify.runtime import interrupts

_live: dict[int, subprocess.Popen] = {}
_lock = threading.RLock()  # re-entrant: the signal handler runs in the main thread, perhaps inside start()
_stopping = threading.Event()


class Stopping(RuntimeError):
    """Raised instead of starting a child once this process is stopping."""


def start(argv: list[str], **popen_kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen in a new session, registered so that it is killed with this process."""
    with interrupts.deferred(), _lock:  # a signal between Popen and the registry would orphan the child
        if _stopping.is_set():
            raise Stopping(f"not starting {os.path.basename(argv[0])}: this process is stopping")
        proc = subprocess.Popen(argv, start_new_session=True, **popen_kwargs)
        _live[proc.pid] = proc
    return proc


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the child's process group. Only while the child is unreaped: until then its pid, and so
    its group id, cannot belong to anyone else."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def reap(proc: subprocess.Popen) -> int:
    """Wait for a child that has ended (or was killed) and drop it from the registry."""
    try:
        return proc.wait()
    finally:
        with _lock:
            _live.pop(proc.pid, None)


def kill_all() -> None:
    with _lock:
        live = list(_live.values())
    for proc in live:
        kill(proc)


def stop_all() -> None:
    """Kill every live child and refuse new ones (until `allow`)."""
    _stopping.set()
    kill_all()


def allow() -> None:
    """A new CLI run in this process (tests call main() many times) may start children again."""
    _stopping.clear()


def stopping() -> bool:
    return _stopping.is_set()


interrupts.on_signal(stop_all)
