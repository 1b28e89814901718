"""The one write path for every report and generated file (verify's --json/--markdown, `verify bench`,
`build.py bake -o`, `build.py report`, the matrix run's results, the builder's manifest).

What happens depends on what the path is now, never destroying what it points to:

| the path is                                  | what is written                                         |
|----------------------------------------------|---------------------------------------------------------|
| a new path, or a regular file                | a temp file beside it, fsynced, renamed over it (atomic) |
| a symlink (any chain of them)                | the link's final target, by the rules of this table; the link stays |
| `/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N` | this process's open descriptor N, in place (output stays in order with the rest) |
| a character device (`/dev/null`, a tty)      | the device, opened and written in place, never replaced |
| a FIFO                                       | in place, once a reader has it open; no reader within FIFO_READER_WAIT_S: an error, never a hang |
| a directory, block device, socket            | nothing: `UnwritableTarget` (an OSError), which the CLIs turn into one line and exit 2 |

Every JSON the project writes (files and stdout) goes through `json_dumps`: a non-finite float (inf,
-inf, nan) becomes null, since JSON has no such numbers (Python's json would write bare `Infinity`/`NaN`,
which strict parsers reject) and null is what the report schema already uses for "no figure".
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# How long a write to a FIFO waits for a reader to open the other end (a reader started just after the
# writer, as in `verify --json fifo & cat fifo`, is normal); after that it fails instead of hanging.
FIFO_READER_WAIT_S = 5.0
_FIFO_POLL_S = 0.05
_MAX_LINK_HOPS = 40  # the kernel's own limit (ELOOP)
# paths that name one of this process's open descriptors (the shell's /dev/stdout convention)
_FD_LINK = re.compile(r"^/(?:proc/(?:self|thread-self|(?P<pid>\d+))/fd|dev/fd)/(?P<fd>\d+)$")
_STD_NAMES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


class UnwritableTarget(OSError):
    """The path exists but is not something a report may be written to: a directory, a block device,
    a socket, a FIFO nobody reads. `strerror` is the one-line reason with its fix; `filename` the path."""

    def __init__(self, path: str | os.PathLike, problem: str, code: int = errno.EINVAL) -> None:
        super().__init__(code, problem, os.fspath(path))


def json_dumps(data: Any, *, indent: int | None = 2, default: Callable[[Any], Any] | None = None) -> str:
    """`json.dumps` for everything the project writes: non-finite floats become null, never bare Infinity/NaN."""
    return json.dumps(_finite(data), indent=indent, allow_nan=False, default=default)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_bytes(path: str | os.PathLike, data: bytes, *, mode: int = 0o644) -> Path:
    """Write `data` to `path` by the rules in the module docstring; returns the path written. `mode`:
    a replaced file's permissions (0o755 for the verify zipapp)."""
    target = Path(path)
    fd_number = _own_descriptor(target)
    if fd_number is not None:
        _write_descriptor(target, fd_number, data)
        return target
    try:
        kind = os.stat(target).st_mode  # follows every symlink to what is really there
    except FileNotFoundError:  # a new file, or a dangling link's target
        _replace(Path(os.path.realpath(target)), data, mode)
        return target
    if stat.S_ISREG(kind):
        _replace(Path(os.path.realpath(target)), data, mode)
        return target
    if stat.S_ISCHR(kind) or stat.S_ISFIFO(kind):
        _write_in_place(target, data, fifo=stat.S_ISFIFO(kind))
        return target
    raise UnwritableTarget(target, _refusal(kind), errno.EISDIR if stat.S_ISDIR(kind) else errno.EINVAL)


def write_text(path: str | os.PathLike, text: str) -> Path:
    # a path or message read from a non-UTF-8 file name carries lone surrogates: shown as \udcff, never a crash
    return write_bytes(path, text.encode("utf-8", "backslashreplace"))


def write_json(path: str | os.PathLike, data: Any) -> Path:
    return write_text(path, json_dumps(data, indent=2) + "\n")


def _refusal(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "is a directory, not a file; name a file (e.g. DIR/report.json)"
    if stat.S_ISBLK(mode):
        return "is a block device: writing a report there would overwrite its data; name a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, which cannot be opened as a file; name a regular file"
    return "is neither a file nor a device a report can be written to; name a regular file"


def _replace(target: Path, data: bytes, mode: int = 0o644) -> None:
    """A temp file in the target's directory, fsynced, then renamed over the target."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _own_descriptor(path: Path) -> int | None:
    """N when `path`, or a symlink on the way to what it names, is /dev/stdout, /dev/fd/N or
    /proc/self/fd/N: those name an open descriptor of this process, not a file to reopen or replace."""
    current = os.path.abspath(path)
    for _ in range(_MAX_LINK_HOPS):
        if current in _STD_NAMES:
            return _STD_NAMES[current]
        match = _FD_LINK.match(current)
        if match and (match["pid"] is None or int(match["pid"]) == os.getpid()):
            return int(match["fd"])
        try:
            link = os.readlink(current)
        except OSError:  # not a link (or not there): a plain path
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), link))
    return None


def _write_descriptor(path: Path, fd_number: int, data: bytes) -> None:
    try:
        os.fstat(fd_number)
    except OSError:
        raise UnwritableTarget(
            path,
            f"names file descriptor {fd_number}, which is not open in this process; name a file instead",
            errno.EBADF,
        ) from None
    for stream in (sys.stdout, sys.stderr):  # what was printed before the report stays before it
        if stream is not None and _fileno(stream) == fd_number:
            stream.flush()
    _write_all(fd_number, data)


def _fileno(stream: Any) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _write_in_place(path: Path, data: bytes, *, fifo: bool) -> None:
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC
    if fifo:
        fd = _open_fifo(path, flags)
    else:
        fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # swapped for something else since the stat
            raise UnwritableTarget(path, "changed while it was being opened; retry")
        _write_all(fd, data)
    finally:
        os.close(fd)


def _open_fifo(path: Path, flags: int) -> int:
    """Open a FIFO for writing without blocking forever: O_NONBLOCK fails (ENXIO) while no reader has it
    open, so poll until one does or FIFO_READER_WAIT_S passes; then writes block as usual."""
    deadline = time.monotonic() + FIFO_READER_WAIT_S
    while True:
        try:
            fd = os.open(path, flags | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            if time.monotonic() >= deadline:
                raise UnwritableTarget(
                    path,
                    f"is a FIFO (named pipe) that no process opened for reading within {FIFO_READER_WAIT_S:g} s;"
                    " start its reader first (e.g. `cat FIFO &`) or name a regular file",
                    errno.ENXIO,
                ) from None
            time.sleep(_FIFO_POLL_S)
            continue
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
