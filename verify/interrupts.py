"""Signals arrive as exceptions: SIGINT (Ctrl-C), SIGTERM (`kill`, `docker stop`) and SIGHUP (the terminal
went away) raise `Interrupted` in the main thread, so every `finally` runs: an atomic write unlinks its
temp file, child processes are killed, and the CLI exits with one line and exit code 1 (as build.py's
Ctrl-C always has) instead of a traceback, or the 128+N that DESIGN rules out.

`Interrupted` subclasses KeyboardInterrupt, so code that already handles Ctrl-C (build.py's partial
matrix report) handles SIGTERM the same way. Callbacks registered with `on_signal` (child_processes)
run inside the handler, before anything else: children die at once, wherever the main thread is.
Only the first signal raises; later ones repeat the callbacks and let the cleanup in progress finish.
A signal inherited as ignored (nohup, a background job of a non-interactive shell) stays ignored.
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


_state = _State()
_callbacks: list[Callable[[], None]] = []


def on_signal(callback: Callable[[], None]) -> None:
    """Run `callback` (quick, idempotent) in the handler of every signal handled here."""
    if callback not in _callbacks:
        _callbacks.append(callback)


def _run_callbacks() -> None:
    for callback in _callbacks:
        callback()


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
        previous[signum] = signal.signal(signum, _handle)
    global _state
    outer, _state = _state, _State()
    try:
        yield
    finally:
        _state.raising = False
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _state = outer


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
