"""The one reader for files a user hands the project (the matrix TOML, the build manifest, the results
and reports `build.py report` reads, the builder's --wheel-hashes, the package index answers `build.py
facts check` reads, an Apex index's stacks.json): regular files only, at most a documented size per kind
of input, UTF-8 with the position of a bad byte; `read_stream` bounds a socket's answer the same way and
`read_url` fetches one (http, https, file) with a timeout. Standard library only.

    text = input_files.read_text(path, input_files.MATRIX)
    data = input_files.read_json(path, input_files.MANIFEST)

A FIFO, a device (/dev/zero), a directory or a socket is refused before anything is read (opening a
FIFO would wait for a writer, /dev/zero never ends). Each refusal raises InputFileError, whose str()
is one line naming the path, the problem and the fix; the CLIs turn it into exit 2. `reason` says
which check failed, for callers that word a case their own way.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import stat
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, BinaryIO

MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class InputKind:
    name: str  # what the file is, in messages
    max_bytes: int
    why: str  # where the limit comes from
    fix: str  # what to do when the file cannot be used


MATRIX = InputKind(
    "matrix file",
    1 * MiB,
    "the shipped matrix.toml is 2 KB; a hundred cells are under 50 KB",
    "pass the matrix TOML file itself with --matrix PATH (e.g. ./matrix.toml)",
)
FACTS = InputKind(
    "compatibility facts file",
    1 * MiB,
    "toolchain/data/compat.toml is 5 KB",
    "restore toolchain/data/compat.toml (git checkout toolchain/data/compat.toml)",
)
MANIFEST = InputKind(
    "build manifest",
    4 * MiB,
    "the apex builder writes 3-5 KB",
    "pass the build-manifest.json the apex builder wrote, or regenerate it with the apex builder",
)
CELL_RESULT = InputKind(
    "cell result",
    16 * MiB,
    "a result is the cell, its build record and 40 log lines: ~10 KB",
    "rebuild that cell (build.py matrix --cell NAME) or delete the file",
)
MATRIX_REPORT = InputKind(
    "matrix report",
    64 * MiB,
    "one result per cell of every run: ~10 KB a cell",
    "delete it: build.py report rebuilds the table from out/cells/*/result.json",
)
VERIFY_REPORT = InputKind(
    "verify report",
    16 * MiB,
    "python -m verify writes 20-100 KB",
    "run verify again to rewrite it (build.py verify IMAGE)",
)
WHEEL_HASHES = InputKind(
    "wheel hash list",
    1 * MiB,
    "one `sha256sum` line (~100 bytes) per wheel",
    "pass the output of `sha256sum *.whl`",
)
INDEX_ANSWER = InputKind(
    "package index answer",
    64 * MiB,
    "PyPI's JSON for torch (every release's files) is under 2 MB, a wheel's METADATA under 100 KB",
    "point --index at PyPI or a mirror of its JSON API",
)
INDEX_STACKS = InputKind(
    "Apex index stack list",
    4 * MiB,
    "build.py index writes ~300 bytes a stack",
    "pass the root of an index `build.py index` wrote (the folder with stacks.json) as --index URL",
)
APEX_WHEEL = InputKind(
    "Apex wheel from an index",
    2048 * MiB,
    "the core build for five archs is ~150 MB, one arch ~43 MB",
    "pass the root of an index `build.py index` wrote as --apex-index URL",
)
KINDS = (
    MATRIX,
    FACTS,
    MANIFEST,
    CELL_RESULT,
    MATRIX_REPORT,
    VERIFY_REPORT,
    WHEEL_HASHES,
    INDEX_ANSWER,
    INDEX_STACKS,
    APEX_WHEEL,
)
URL_SCHEMES = ("http", "https", "file")


class InputFileError(Exception):
    """A file that cannot be used as input; str() is the one-line message."""

    def __init__(self, path: str | os.PathLike, reason: str, problem: str, fix: str) -> None:
        self.path, self.reason, self.problem, self.fix = os.fspath(path), reason, problem, fix
        super().__init__(f"{self.path}: {problem}; {fix}")


def _open_regular(path: str | os.PathLike, kind: InputKind) -> int:
    """A read-only descriptor of `path` once it is a regular file (checked again on the descriptor by the
    caller); a missing or unopenable file is an InputFileError."""
    try:
        _require_regular(path, os.stat(path).st_mode, kind)
        # O_NONBLOCK: a FIFO swapped in after the stat must not block the open; harmless for a file
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputFileError(path, "missing", "does not exist", f"check the path; {kind.fix}") from None
    except OSError as exc:
        raise InputFileError(
            path,
            "unreadable",
            f"cannot be read ({exc.strerror or exc})",
            "check the path and its permissions",
        ) from None


def read_bytes(path: str | os.PathLike, kind: InputKind) -> bytes:
    """The file's bytes, if it is a regular file of at most kind.max_bytes; else InputFileError."""
    fd = _open_regular(path, kind)
    with os.fdopen(fd, "rb") as handle:
        _require_regular(path, os.fstat(fd).st_mode, kind)
        try:
            data = handle.read(kind.max_bytes + 1)
        except OSError as exc:
            raise InputFileError(
                path,
                "unreadable",
                f"cannot be read ({exc.strerror or exc})",
                "check the file and its filesystem",
            ) from None
    if len(data) > kind.max_bytes:
        raise InputFileError(
            path,
            "too_large",
            f"is larger than {_size(kind.max_bytes)}, the limit for a {kind.name} ({kind.why})",
            kind.fix,
        )
    return data


def read_part(path: str | os.PathLike, kind: InputKind, start: int | None, length: int) -> tuple[bytes, int]:
    """`length` bytes from `start` (None: the last `length`) of a regular file, and the file's size; the
    checks of read_bytes, the size limit applying to the part (a stored mirror's wheel is read in parts)."""
    if length > kind.max_bytes:
        raise InputFileError(
            path,
            "too_large",
            f"a part of {length} bytes is larger than {_size(kind.max_bytes)}, "
            f"the limit for a {kind.name} ({kind.why})",
            kind.fix,
        )
    fd = _open_regular(path, kind)
    try:
        info = os.fstat(fd)
        _require_regular(path, info.st_mode, kind)
        offset = max(0, info.st_size - length) if start is None else start
        return os.pread(fd, length, offset), info.st_size
    except OSError as exc:
        raise InputFileError(
            path, "unreadable", f"cannot be read ({exc.strerror or exc})", "check the file and its filesystem"
        ) from None
    finally:
        os.close(fd)


def read_stream(stream: BinaryIO, name: str, kind: InputKind) -> bytes:
    """At most kind.max_bytes of an open stream (a socket's answer), read in pieces: an endless or huge
    answer costs the limit, not its size; a longer one is InputFileError('too_large')."""
    pieces: list[bytes] = []
    total = 0
    while total <= kind.max_bytes:
        piece = stream.read(min(1 * MiB, kind.max_bytes + 1 - total))
        if not piece:
            break
        pieces.append(piece)
        total += len(piece)
    if total > kind.max_bytes:
        raise InputFileError(
            name,
            "too_large",
            f"is larger than {_size(kind.max_bytes)}, the limit for a {kind.name} ({kind.why})",
            kind.fix,
        )
    return b"".join(pieces)


def read_url(url: str, kind: InputKind, *, timeout_s: float) -> bytes:
    """An http(s) or file URL's bytes, at most kind.max_bytes, within timeout_s a network step. Refusals
    are InputFileError with reason `bad_url` (not a URL of URL_SCHEMES: the caller's usage error),
    `unreachable` (no answer, refused, timed out), `http_error` (an answer other than 200) or one of
    read_bytes' reasons (a file URL, too large)."""
    bad = InputFileError(
        url, "bad_url", f"is not an {'/'.join(URL_SCHEMES)} URL", "pass one such as https://HOST/apex/"
    )
    try:
        parts = urllib.parse.urlsplit(url)
        path = urllib.request.url2pathname(parts.path)
    except ValueError:  # an unclosed IPv6 bracket, say
        raise bad from None
    if parts.scheme not in URL_SCHEMES or (parts.scheme != "file" and not parts.hostname) or "\0" in path:
        raise bad
    if parts.scheme == "file":
        return read_bytes(path, kind)
    request = urllib.request.Request(url, headers={"Accept": "application/json, */*;q=0.1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 (scheme checked)
            return read_stream(answer, url, kind)
    except urllib.error.HTTPError as exc:
        raise InputFileError(url, "http_error", f"answered HTTP {exc.code} {exc.reason}", kind.fix) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise InputFileError(
            url,
            "unreachable",
            f"cannot be fetched ({why or type(exc).__name__})",
            f"check the URL, the network and that the index is served; {kind.fix}",
        ) from None


def read_text(path: str | os.PathLike, kind: InputKind) -> str:
    """read_bytes, decoded as UTF-8; a bad byte is named with its line, column and offset."""
    return decode_text(read_bytes(path, kind), path, kind)


def decode_text(data: bytes, path: str | os.PathLike, kind: InputKind) -> str:
    """Bytes already in hand (copied out of a container), checked as read_text checks a file's: at most
    kind.max_bytes, UTF-8; `path` names them in the message."""
    if len(data) > kind.max_bytes:
        raise InputFileError(
            path,
            "too_large",
            f"is larger than {_size(kind.max_bytes)}, the limit for a {kind.name} ({kind.why})",
            kind.fix,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputFileError(
            path,
            "not_utf8",
            f"is not UTF-8 text (unreadable byte 0x{data[exc.start]:02x} at line {line}, column"
            f" {column}, byte offset {exc.start})",
            "save it as UTF-8",
        ) from None


def read_json(path: str | os.PathLike, kind: InputKind) -> Any:
    """read_text, parsed as JSON (bare NaN/Infinity, which Python's own writer used to emit, still read)."""
    return _parse_json(read_text(path, kind), path, kind)


def decode_json(data: bytes, path: str | os.PathLike, kind: InputKind) -> Any:
    """decode_text, parsed as read_json parses a file."""
    return _parse_json(decode_text(data, path, kind), path, kind)


def _parse_json(text: str, path: str | os.PathLike, kind: InputKind) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(
            path,
            "bad_json",
            f"is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            kind.fix,
        ) from None
    except ValueError as exc:  # valid syntax Python cannot convert: an integer beyond the 4300-digit limit
        why = str(exc).split(":")[0][:200]
        raise InputFileError(
            path, "bad_json", f"is not valid JSON here (a value cannot be read: {why})", kind.fix
        ) from None
    except RecursionError:
        raise InputFileError(
            path,
            "too_deep",
            f"is nested too deeply to read (over {sys.getrecursionlimit()} levels of lists or objects)",
            kind.fix,
        ) from None


def _require_regular(path: str | os.PathLike, mode: int, kind: InputKind) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        problem = "is a directory, not a file"
    elif stat.S_ISFIFO(mode):
        problem = "is a FIFO (named pipe), not a regular file: reading it would wait for a writer"
    elif stat.S_ISCHR(mode):
        problem = "is a character device (like /dev/zero or a terminal), not a regular file"
    elif stat.S_ISSOCK(mode):
        problem = "is a socket, not a regular file"
    elif stat.S_ISBLK(mode):
        problem = "is a block device, not a regular file"
    else:
        problem = "is not a regular file"
    raise InputFileError(path, "not_regular", problem, kind.fix)


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n} bytes"
