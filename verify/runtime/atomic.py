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

That table is for a path the user names. Inside a tree the tool owns (the index folder, an --out folder),
`write_in_tree(root, relpath, data)` never follows a link: every folder on the way and the file itself are
opened relative to the one before with O_NOFOLLOW, so a link planted there (`stacks.json -> ../../x`, a
`files/` link that a gh-pages checkout carries) is refused with one line naming it (`LinkInOwnedTree`, exit 2),
and the write is a temp file renamed over the name in that same folder. `open_append_in_tree` (a build log,
a cell's lock in --logs) and `move_in_tree` (a file made in a private temp folder, e.g. the wheel pip built)
keep the same rule; `write_text_in_tree`/`write_json_in_tree` write text and JSON as write_text/write_json do.

Every JSON the project writes (files and stdout) goes through `json_dumps`: a non-finite float (inf,
-inf, nan) becomes null, since JSON has no such numbers (Python's json would write bare `Infinity`/`NaN`,
which strict parsers reject) and null is what the report schema already uses for "no figure".
"""

from __future__ import annotations

import contextlib
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


class LinkInOwnedTree(UnwritableTarget):
    """A symbolic link, or something other than a folder or file, inside a tree the tool owns."""


def write_in_tree(root: str | os.PathLike, relpath: str, data: bytes, *, mode: int = 0o644) -> bool:
    """Write `data` to ROOT/relpath inside a tree the tool owns, without following any link below ROOT (ROOT
    itself is the user's to name and may be one); missing folders are made. Skips the write, and returns
    False, when the file already holds exactly `data` (a page that did not change keeps its time)."""
    with TreeBatch(root) as batch:
        return batch.add(relpath, data, mode=mode)


def write_text_in_tree(root: str | os.PathLike, relpath: str, text: str) -> bool:
    """write_in_tree of a text (lone surrogates shown as \\udcff, as write_text does)."""
    return write_in_tree(root, relpath, text.encode("utf-8", "backslashreplace"))


def write_json_in_tree(root: str | os.PathLike, relpath: str, data: Any) -> bool:
    """write_in_tree of `data` as JSON, as write_json writes it (json_dumps, indent 2, a final newline)."""
    return write_text_in_tree(root, relpath, json_dumps(data, indent=2) + "\n")


class TreeBatch:
    """Files written into a tree the tool owns that land together (the pages of an index): `add` stages each
    one as a fsynced temp file beside its name, by write_in_tree's rules; leaving the `with` block renames
    them all into place, or, on an exception, removes what was staged, so every file stays as it was (a
    full disk while staging changes no page). Renames need no space, so the swap itself does not fail on it."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = root
        self._staged: list[tuple[int, str, str]] = []  # (folder descriptor, temp name, name)

    def add(self, relpath: str, data: bytes, *, mode: int = 0o644) -> bool:
        folder_parts, name = _tree_parts(relpath)
        fd = open_tree_dir(self.root, "/".join(folder_parts), create=True)
        try:
            if _same_bytes(fd, name, data, Path(self.root, relpath)):
                os.close(fd)
                return False
            tmp = f".{name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
            out = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd
            )
        except BaseException:
            os.close(fd)
            raise
        self._staged.append((fd, tmp, name))
        with os.fdopen(out, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        return True

    def __enter__(self) -> TreeBatch:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        try:
            for fd, tmp, name in self._staged:
                if kind is None:
                    # replaces a link itself, never its target
                    os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=fd)
        finally:
            for staged in self._staged:
                os.close(staged[0])
            self._staged = []


def open_tree_dir(root: str | os.PathLike, relpath: str, *, create: bool = False) -> int:
    """A descriptor of the folder ROOT/relpath, every part below ROOT opened with O_NOFOLLOW (made when
    `create`); LinkInOwnedTree naming the first part that is a link or not a folder. The caller closes it."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    where = Path(root)
    try:
        for part in [p for p in relpath.split("/") if p not in ("", ".")]:
            if part == "..":
                raise LinkInOwnedTree(where / part, "leaves the tree; name a path inside it")
            where = where / part
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _not_followed(fd, part, where) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def refuse_links_in_tree(
    root: str | os.PathLike, *, skip: tuple[str, ...] = (".git",), only: tuple[str, ...] | None = None
) -> None:
    """LinkInOwnedTree for the first symbolic link or special file (FIFO, device, socket) anywhere under
    ROOT (folders named in `skip` not entered): the check a command makes before it writes anything into a
    tree it owns, so that a refusal leaves every file of the tree as it was. `only`: check just these names
    directly in ROOT (a user's --out folder, where the tool owns only the files it writes)."""
    if only is not None:
        for name in only:
            _refuse_link_or_special(Path(root), name)
        return
    for folder, dirs, names in os.walk(os.fspath(root), followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in skip)
        for name in sorted([*dirs, *names]):
            _refuse_link_or_special(Path(folder), name)


def _refuse_link_or_special(folder: Path, name: str) -> None:
    where = folder / name
    try:
        info = os.lstat(where)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            raise _not_followed(fd, name, where)
        finally:
            os.close(fd)
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        raise LinkInOwnedTree(
            where, f"{_refusal(info.st_mode).split(';')[0]} inside a folder the tool owns; remove it"
        )


def open_append_in_tree(root: str | os.PathLike, relpath: str) -> int:
    """A descriptor of ROOT/relpath for appending (a build log), made if missing, never truncated, no link
    followed on the way or at the name, a FIFO or device refused (not waited on). The caller closes it."""
    folder_parts, name = _tree_parts(relpath)
    where = Path(root, relpath)
    fd = open_tree_dir(root, "/".join(folder_parts), create=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        try:
            out = os.open(name, flags, 0o644, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _not_followed(fd, name, where) from None
            if exc.errno == errno.ENXIO:  # a FIFO without a reader
                raise LinkInOwnedTree(where, "is a FIFO, not a file; remove it") from None
            raise
    finally:
        os.close(fd)
    mode = os.fstat(out).st_mode
    if not stat.S_ISREG(mode):
        os.close(out)
        raise LinkInOwnedTree(where, f"{_refusal(mode).split(';')[0]}, not a file; remove it")
    return out


def move_in_tree(root: str | os.PathLike, relpath: str, source: str | os.PathLike) -> None:
    """Move the file `source` (made in a private temp folder: a wheel pip built) to ROOT/relpath by
    write_in_tree's rules: no link followed below ROOT, a link or special file at the name refused, naming
    it. A rename when both are on one filesystem (a link planted after the check is replaced, never
    followed), else a copy into a temp file beside the name, fsynced and renamed; `source` is gone after."""
    folder_parts, name = _tree_parts(relpath)
    where = Path(root, relpath)
    fd = open_tree_dir(root, "/".join(folder_parts), create=True)
    try:
        _existing_file(fd, name, where)
        try:
            os.rename(source, name, dst_dir_fd=fd)
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
        tmp = f".{name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
        src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            mode = stat.S_IMODE(os.fstat(src).st_mode)
            out = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd
            )
            try:
                while os.sendfile(out, src, None, 1 << 24):
                    pass
                os.fsync(out)
            finally:
                os.close(out)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
        finally:
            os.close(src)
        os.unlink(source)
    finally:
        os.close(fd)


def open_lock_in_tree(root: str | os.PathLike, name: str) -> int:
    """A descriptor of ROOT/name for flock, made if missing, never truncated, never a link followed (a FIFO
    or device there is refused, not waited on). The caller closes it."""
    where = Path(root, name)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(where, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkInOwnedTree(
                where,
                f"is a symbolic link (to {os.readlink(where)}); remove it, the tool makes its own lock file",
            ) from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader
            raise LinkInOwnedTree(where, "is a FIFO, not a lock file; remove it") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise LinkInOwnedTree(where, f"{_refusal(mode).split(';')[0]}, not a lock file; remove it")
    return fd


def _tree_parts(relpath: str) -> tuple[list[str], str]:
    parts = [p for p in relpath.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise LinkInOwnedTree(relpath, "is not a path inside the tree; name one below it")
    return parts[:-1], parts[-1]


def _not_followed(dir_fd: int, name: str, where: Path) -> LinkInOwnedTree:
    try:
        target = os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return LinkInOwnedTree(where, "is not a folder; remove it, so the tool can make its own")
    return LinkInOwnedTree(
        where,
        f"is a symbolic link (to {target}); the tool never writes through a link inside a folder it owns: "
        "remove the link, or pass another folder",
    )


def _existing_file(dir_fd: int, name: str, where: Path) -> os.stat_result | None:
    """What stands at `name` in the folder: None when nothing; a link or a special file there is
    LinkInOwnedTree (never opened: a FIFO would block, a link would lead out)."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        raise _not_followed(dir_fd, name, where)
    if not stat.S_ISREG(info.st_mode):
        raise LinkInOwnedTree(
            where, f"{_refusal(info.st_mode).split(';')[0]}; remove it, so the tool can write its file"
        )
    return info


def _same_bytes(dir_fd: int, name: str, data: bytes, where: Path) -> bool:
    """Whether `name` in the folder is a regular file holding exactly `data` (_existing_file's refusals)."""
    info = _existing_file(dir_fd, name, where)
    if info is None or info.st_size != len(data):
        return False
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(len(data) + 1) == data


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


def writable_problem(path: str | os.PathLike) -> str | None:
    """Why write_bytes(path) would be refused, checked before a long run instead of after it (nothing is
    made): a directory, a block device or socket, a folder on the way that is a file, a folder this user
    cannot write into; None when the write can be tried (a FIFO's reader, a full disk, are known only then)."""
    target = Path(path)
    if _own_descriptor(target) is not None:
        return None
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        return f"{exc.strerror or exc}; choose a writable path"
    if mode is not None:
        if stat.S_ISDIR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
            return _refusal(mode)
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
            return None
        folder = Path(os.path.realpath(target)).parent  # the temp file is made beside the real file
    else:
        folder = _existing_ancestor(Path(os.path.realpath(target)).parent)
        if not folder.is_dir():
            return f"{folder} is not a folder; choose a path under a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"this user cannot write into {folder}; choose a writable path"
    return None


def _existing_ancestor(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


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
