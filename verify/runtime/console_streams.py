"""stdout and stderr that cannot take a CLI down (verify, verify bench, build.py share this).

The rule: console output is a view of the run, never its result, so losing it never changes the exit
code and never prints a traceback.
- a closed pipe (`verify | head -1`): the reader left on purpose; the rest of the output is dropped, silently;
- a closed descriptor (`verify >&-`): that stream goes to /dev/null (so no file opened later lands on
  descriptor 1 or 2), silently;
- any other write error (stdout on /dev/full, on a full disk, EIO): the output is dropped and one line
  on stderr says so;
- text the stream's encoding cannot hold (`LC_ALL=C`, `PYTHONIOENCODING=ascii`) is written with
  backslash escapes (`\\u2014`) instead of raising UnicodeEncodeError.
Once a stream is lost its descriptor points at /dev/null, so buffered text, child processes that
inherited it and the interpreter's final flush all go nowhere quietly (no "Exception ignored" and no
exit code 120 at shutdown).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

_QUIET_ERRNOS = (errno.EPIPE, errno.EBADF)  # the reader left / the user closed it: nothing to say


class TolerantStream:
    """Wraps a text stream: write and flush never raise; every other attribute is the wrapped stream's."""

    def __init__(self, inner: TextIO, name: str, prog: str) -> None:
        self._inner = inner
        self._name = name
        self._prog = prog
        self.lost: BaseException | None = None

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                try:
                    self._inner.write(text)
                except UnicodeEncodeError:
                    self._inner.write(_representable(text, getattr(self._inner, "encoding", None)))
            except (OSError, ValueError) as exc:  # ValueError: the stream was closed under us
                self._lose(exc)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._inner.flush()
            except (OSError, ValueError) as exc:
                self._lose(exc)

    def _lose(self, exc: BaseException) -> None:
        self.lost = exc
        with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
            _point_at_devnull(self._inner.fileno())
        with contextlib.suppress(OSError, ValueError):
            self._inner.flush()  # what is still buffered drains into /dev/null
        code = getattr(exc, "errno", None)
        if self._name == "stdout" and code not in _QUIET_ERRNOS:
            why = getattr(exc, "strerror", None) or str(exc)
            sys.stderr.write(
                f"{self._prog}: cannot write to stdout ({why}); its output is dropped, the exit "
                "code still reports the run\n"
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _representable(text: str, encoding: str | None) -> str:
    encoding = encoding or "ascii"
    return text.encode(encoding, "backslashreplace").decode(encoding, "replace")


def _point_at_devnull(fd: int) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    if devnull == fd:  # fd was closed, and open() handed out the lowest free descriptor: it
        return
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _ensure_descriptors() -> None:
    """A closed 0, 1 or 2 would be handed to the next file opened: give each /dev/null instead."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                _point_at_devnull(fd)


def _stream(current: TextIO | None, fd: int) -> TextIO:
    if current is not None:
        return current
    # the interpreter found the descriptor closed at startup and set sys.stdout/err to None
    return os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False)


@contextlib.contextmanager
def tolerant(prog: str) -> Iterator[None]:
    """sys.stdout and sys.stderr as TolerantStreams for the duration; flushed and restored afterwards."""
    _ensure_descriptors()
    saved = sys.stdout, sys.stderr
    err = TolerantStream(_stream(sys.stderr, 2), "stderr", prog)
    out = TolerantStream(_stream(sys.stdout, 1), "stdout", prog)
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        out.flush()
        err.flush()
        if sys.stdout is out:
            sys.stdout = saved[0]
        if sys.stderr is err:
            sys.stderr = saved[1]
