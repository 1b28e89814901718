"""Signals arrive as exceptions: SIGINT (Ctrl-C), SIGTERM (`kill`, `docker stop`) and SIGHUP (the terminal
went away) raise `Interrupted` in the main thread, so every `finally` runs: an atomic write unlinks its
temp file, child processes are killed, and the CLI exits with one line and exit code 1 (as build.py's
Ctrl-C always has) instead of a traceback, or the 128+N that DESIGN rules out.

`Interrupted` subclasses KeyboardInterrupt, so code that already handles Ctrl-C (build.py's partial
matrix report) handles SIGTERM the same way. Callbacks registered with `on_signal` (child_processes)
run inside the handler, before anything else: children die at once, wherever the main thread is.
Only the first signal raises; later ones repeat the callbacks and let the cleanup in progress finish.
A signal inherited as ignored (nohup, a background job of a non-interactive shell) stays ignored.

One path from the first instruction to the last (before it, a SIGTERM while torch imported was lost,
or ended in C++ `terminate`, exit 134; a second Ctrl-C after the first exited 130):
- `early()` (the first statement of `python -m verify`, the zipapp and build.py) holds a signal that
  arrives before the CLI's handlers exist; `raise_if_received()` raises it as soon as they do; once
  its run is over (children killed, result printed) such a process ignores them until it exits, so a
  signal during the interpreter's shutdown (torch's teardown) cannot turn the exit code printed into 130;
- `deferred()` around code a Python exception must not cut (`import torch`: its C++ initialisers turn
  an exception raised inside them into another error, or abort): the callbacks still run at once,
  the Interrupted comes when the section ends;
- a signal the run swallowed anyway (a broad `except Exception` around a library) is not lost:
  `raise_if_received()` at the run's checkpoints (before any report is written) raises it again;
- a CLI whose run a signal stopped calls `hold_until_exit()` before its handlers are restored: until
  the process exits, a second Ctrl-C runs the callbacks only and cannot change the exit code.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

HANDLED = ("SIGINT", "SIGTERM", "SIGHUP")


class Interrupted(KeyboardInterrupt):
    """A signal that asks this process to stop."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        super().__init__(self.signal_name)


class _State:
    def __init__(self) -> None:
        self.received: int | None = None  # the first signal of this run
        self.raising = True  # False once the run's result is known: a late signal no longer raises
        self.deferred = 0  # depth of `deferred()` sections in the main thread
        self.pending: int | None = None  # a signal that arrived inside one, raised when it ends
        self.hold = False  # hold_until_exit(): leaving raising() keeps the callbacks-only handlers


_state = _State()
_callbacks: list[Callable[[], None]] = []
_early: int | None = None  # a signal held by early(), before raising() installed the real handlers
_cli = False  # early() was called: this process is a CLI, whose handlers stay ours until it exits


def on_signal(callback: Callable[[], None]) -> None:
    """Run `callback` (quick, idempotent) in the handler of every signal handled here."""
    if callback not in _callbacks:
        _callbacks.append(callback)


def _run_callbacks() -> None:
    for callback in _callbacks:
        callback()


def _hold_early(signum: int, _frame: object) -> None:
    global _early
    _early = _early or signum


def early() -> None:
    """Hold SIGINT/SIGTERM/SIGHUP from here until raising() installs the handlers, and after the run
    until the process exits (main thread only; a CLI's first statement, never a library's)."""
    global _cli
    if threading.current_thread() is not threading.main_thread():
        return
    _cli = True
    for name in HANDLED:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _hold_early)


def received() -> int | None:
    """The first signal of this run (or one held by early()); None when none arrived."""
    return _state.received or _early


def raise_if_received() -> None:
    """Raise Interrupted for a signal that arrived but did not stop the run (held, or swallowed)."""
    signum = received()
    if signum is not None and _state.raising and not _state.deferred:
        _state.received = signum
        raise Interrupted(signum)


def _late(signum: int, _frame: object) -> None:
    """After the run was stopped: children die again, nothing raises, the exit code stays."""
    _run_callbacks()


def hold_until_exit() -> None:
    """A CLI whose run a signal stopped is about to exit: from here every further signal only runs the
    callbacks, so none reaches Python's default handler (a second Ctrl-C would make the exit 130)."""
    if threading.current_thread() is not threading.main_thread():
        return
    _state.hold = True
    for name in HANDLED:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _late)


def _handle(signum: int, _frame: object) -> None:
    _run_callbacks()
    if _state.received is not None or not _state.raising:
        _state.received = _state.received or signum
        return
    _state.received = signum
    if _state.deferred:
        _state.pending = signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """Install the handlers for the duration (main thread only; elsewhere a no-op), then restore them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for name in HANDLED:
        signum = getattr(signal, name, None)
        if signum is None or signal.getsignal(signum) is signal.SIG_IGN:
            continue
        handler = signal.signal(signum, _handle)
        previous[signum] = (
            signal.default_int_handler
            if handler is _hold_early and signum == signal.SIGINT
            else (signal.SIG_DFL if handler is _hold_early else handler)
        )
    global _state
    outer, _state = _state, _State()
    try:
        yield
    finally:
        global _early
        _state.raising = False
        for signum, handler in previous.items():
            # a CLI's run is over and its children are gone: ignored, not Python's handler, since the
            # interpreter's shutdown (torch's teardown: seconds) resets a Python handler to the default
            signal.signal(signum, signal.SIG_IGN if _cli else _late if _state.hold else handler)
        _state, _early = outer, None


def stop_raising() -> None:
    """The run's result is known: from here on a signal only runs the callbacks."""
    _state.raising = False


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A few statements a signal must not cut in two (start a child and register it): a signal that
    arrives inside is raised when the section ends. Sections in other threads need nothing: Python
    runs signal handlers in the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state.deferred += 1
    try:
        yield
    finally:
        _state.deferred -= 1
        if not _state.deferred and _state.pending is not None:
            signum, _state.pending = _state.pending, None
            _run_callbacks()
            raise Interrupted(signum)
