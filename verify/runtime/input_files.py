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
import hashlib
import http.client
import io
import json
import os
import stat
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, BinaryIO

MiB = 1 << 20
GiB = 1 << 30


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
WHEEL = InputKind(
    "wheel",
    4 * GiB,
    "an Apex wheel for every arch is about 300 MB; torch's own CUDA wheel about 900 MB",
    "pass the .whl file a build wrote (build.py wheel --out DIR)",
)
WHEEL_MEMBER = InputKind(
    "wheel member",
    1 * GiB,
    "the largest module of an Apex wheel built for every arch is about 150 MB inflated",
    "rebuild the wheel with `build.py wheel`; a member that inflates past this is not a build's",
)
WHEEL_METADATA = InputKind(
    "wheel metadata file",
    16 * MiB,
    "METADATA, RECORD, WHEEL and the manifest are each under 100 KB",
    "rebuild the wheel with `build.py wheel`",
)
PUBLISHED = InputKind(
    "published wheel's record",
    16 * MiB,
    "build.py index writes 2-100 KB per file of a wheel's folder",
    "delete that folder under files/ and run build.py index again with the wheel",
)
REGISTRY_ANSWER = InputKind(
    "registry answer",
    16 * MiB,
    "an OCI manifest or index is a few KB, a signature payload under 10 KB",
    "check the registry (--registry) and that the image was published by build.py publish",
)
ARCHIVE_STREAM = InputKind(
    "archive copied out of a container",
    4 * GiB,
    "the largest file copied out is an Apex wheel for every arch (about 300 MB)",
    "check the image: the path it was asked for should hold a wheel or a small file",
)
SHIPPED = InputKind(
    "project data file",
    4 * MiB,
    "the project's own data files (toolchain/data, the Dockerfile) are under 100 KB",
    "restore it from git (git checkout -- PATH)",
)
SYSTEM = InputKind(
    "kernel status file",
    4 * MiB,
    "/proc/meminfo is 1.5 KB, /proc/PID/stat under 1 KB, /proc/cpuinfo 1 KB per core",
    "check that /proc and /sys are mounted",
)
SOURCE_FILE = InputKind(
    "Apex source file",
    16 * MiB,
    "Apex's setup.py is 40 KB",
    "pass the root of an NVIDIA/apex checkout with --apex-src",
)
EXTENSION_MODULE = InputKind(
    "extension module",
    2 * GiB,
    "Apex's largest module built for every arch is about 150 MB; torch's libtorch_cuda.so about 1.5 GB",
    "reinstall the package the module belongs to",
)
CHILD_MESSAGE = InputKind(
    "message from a child process",
    64 * MiB,
    "the import probe's request and a GPU worker's result line are under 100 KB",
    "rerun; if it repeats, the child process is not the project's own",
)
LOG = InputKind(
    "log",
    256 * MiB,
    "a full Apex build log is 1-5 MB; only its tail is read back",
    "look at the log itself",
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
    WHEEL,
    WHEEL_MEMBER,
    WHEEL_METADATA,
    PUBLISHED,
    REGISTRY_ANSWER,
    ARCHIVE_STREAM,
    SHIPPED,
    SYSTEM,
    SOURCE_FILE,
    EXTENSION_MODULE,
    CHILD_MESSAGE,
    LOG,
    APEX_WHEEL,
)
# A wheel with more members than this is not a build's (Apex's holds about 300)
ZIP_MAX_MEMBERS = 100_000
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


def open_binary(path: str | os.PathLike, kind: InputKind) -> BinaryIO:
    """A read-only binary handle of a regular file of at most kind.max_bytes, for readers that seek (an ELF
    file's sections, a zip's directory) or read in pieces: the checks of read_bytes, without reading the
    whole file."""
    fd = _open_regular(path, kind)
    handle = os.fdopen(fd, "rb")
    try:
        info = os.fstat(fd)
        _require_regular(path, info.st_mode, kind)
        _require_size(path, info.st_size, kind)
    except BaseException:
        handle.close()
        raise
    return handle


def sha256_file(path: str | os.PathLike, kind: InputKind) -> tuple[str, int]:
    """(sha256 hex, size) of a regular file of at most kind.max_bytes, read in pieces (a wheel is hashed
    without holding it in memory); a link to /dev/zero or a FIFO is refused before anything is read."""
    with open_binary(path, kind) as handle:
        digest, total = hashlib.sha256(), 0
        try:
            for block in iter(lambda: handle.read(1 * MiB), b""):
                total += len(block)
                _require_size(path, total, kind)  # a file growing while it is read
                digest.update(block)
        except OSError as exc:
            raise InputFileError(
                path,
                "unreadable",
                f"cannot be read ({exc.strerror or exc})",
                "check the file and its filesystem",
            ) from None
    return digest.hexdigest(), total


class ZipInput:
    """A zip archive (a wheel) opened through the bounded reader: the file is a regular one of at most
    kind.max_bytes; each member's inflated size is checked against member_kind from the central directory
    BEFORE it is inflated, and then enforced while it is read (a directory that lies about a member's size
    cannot make it larger: zipfile stops at the size the directory names and checks the CRC). Every fault
    of the archive (not a zip, a cut file, an unknown compression, a bad CRC) is InputFileError('bad_zip').

        with input_files.open_zip(wheel, input_files.WHEEL) as archive:
            data = archive.read("apex-0.1.dist-info/METADATA", input_files.WHEEL_METADATA)
    """

    def __init__(self, path: str | os.PathLike, kind: InputKind, handle: BinaryIO | None = None) -> None:
        """`handle`: an already open seekable file whose bytes are the archive (a wheel read by HTTP range
        requests), named `path` in messages; else `path` is opened as a regular file of at most kind.max_bytes."""
        self.path, self.kind = os.fspath(path), kind
        if handle is None:
            handle = open_binary(path, kind)
        try:
            self._zip = zipfile.ZipFile(handle)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as exc:
            handle.close()
            raise self._bad(f"is not a readable zip archive ({exc})") from None
        self._handle = handle
        if len(self._zip.infolist()) > ZIP_MAX_MEMBERS:
            self.close()
            raise self._bad(f"holds more than {ZIP_MAX_MEMBERS} members")

    def _bad(self, problem: str) -> InputFileError:
        return InputFileError(self.path, "bad_zip", problem, self.kind.fix)

    def infos(self) -> list[zipfile.ZipInfo]:
        return self._zip.infolist()

    def names(self) -> list[str]:
        return self._zip.namelist()

    def read(self, member: str | zipfile.ZipInfo, kind: InputKind) -> bytes:
        """One member's bytes, at most kind.max_bytes inflated, checked before inflating."""
        try:
            info = member if isinstance(member, zipfile.ZipInfo) else self._zip.getinfo(member)
        except KeyError:
            raise self._bad(f"has no member {member!r}") from None
        shown = f"{self.path}!{info.filename}"
        if info.file_size > kind.max_bytes:
            raise InputFileError(
                shown,
                "too_large",
                f"inflates to {info.file_size} bytes, more than {_size(kind.max_bytes)}, the limit for a "
                f"{kind.name} ({kind.why})",
                kind.fix,
            )
        try:
            with self._zip.open(info) as stream:
                data = stream.read(kind.max_bytes + 1)
        except (
            zipfile.BadZipFile,
            zlib.error,
            EOFError,
            OSError,
            ValueError,
            NotImplementedError,
            RuntimeError,
        ) as exc:
            raise InputFileError(shown, "bad_zip", f"cannot be inflated ({exc})", self.kind.fix) from None
        if len(data) > kind.max_bytes:  # unreachable while zipfile honours file_size; kept as the rule
            raise InputFileError(shown, "too_large", f"inflates past {_size(kind.max_bytes)}", kind.fix)
        return data

    def close(self) -> None:
        self._zip.close()
        self._handle.close()

    def __enter__(self) -> ZipInput:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def open_zip(path: str | os.PathLike, kind: InputKind = WHEEL) -> ZipInput:
    """A zip archive through the bounded reader (ZipInput)."""
    return ZipInput(path, kind)


def open_url(request: urllib.request.Request, *, timeout_s: float, context: Any = None) -> Any:
    """urlopen with a deadline for each network step: the one place the project opens a URL. The caller
    reads the answer with read_stream (bounded) or closes it unread (a reachability check); urllib's own
    errors pass through for the caller to word."""
    scheme = urllib.parse.urlsplit(request.full_url).scheme
    if scheme not in URL_SCHEMES:
        raise InputFileError(request.full_url, "bad_url", f"is not an {'/'.join(URL_SCHEMES)} URL", "")
    return urllib.request.urlopen(request, timeout=timeout_s, context=context)  # noqa: S310 (scheme checked)


def read_chunks(chunks: Iterable[bytes], name: str, kind: InputKind) -> bytes:
    """An iterable of byte pieces (a Docker archive stream), joined while at most kind.max_bytes."""
    pieces: list[bytes] = []
    total = 0
    for piece in chunks:
        total += len(piece)
        _require_size(name, total, kind)
        pieces.append(piece)
    return b"".join(pieces)


def read_log_tail(path: str | os.PathLike, *, max_bytes: int = 4 * MiB) -> list[str]:
    """The last lines (at most max_bytes of them) of a log the project wrote, bad bytes replaced; a missing
    log is no lines. A log is written while it is read back, so its start may be cut: the first line is
    dropped when the part does not begin at the file's start."""
    try:
        data, size = read_part(path, LOG, None, max_bytes)
    except InputFileError as error:
        if error.reason == "missing":
            return []
        raise
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1:] if size > len(data) and lines else lines


def read_shipped_text(path: str | os.PathLike) -> str:
    """One of the project's own data files (toolchain/data/*, docker/Dockerfile, verify's package files on
    disk): the named route for the files the project ships, bounded like any other."""
    return read_text(path, SHIPPED)


def read_shipped_json(path: str | os.PathLike) -> Any:
    """read_shipped_text, parsed as JSON."""
    return read_json(path, SHIPPED)


def parse_json(text: str, name: str | os.PathLike, kind: InputKind) -> Any:
    """Text already in hand (a tool's stdout, a protocol line) parsed as read_json parses a file: at most
    kind.max_bytes, every fault an InputFileError naming `name`."""
    if len(text) > kind.max_bytes:
        _require_size(name, len(text), kind)
    return _parse_json(text, name, kind)


def tar_files(data: bytes, name: str, member_kind: InputKind) -> Iterator[tuple[tarfile.TarInfo, bytes]]:
    """(member, bytes) of each regular file in a tar archive already in hand (what Docker's get_archive
    sends, read with read_chunks), each member's size checked from its header before it is read; a damaged
    archive is InputFileError('bad_archive')."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            for member in archive.getmembers():
                if not member.isfile():
                    continue
                _require_size(f"{name}!{member.name}", member.size, member_kind)
                handle = archive.extractfile(member)
                yield member, (handle.read(member_kind.max_bytes + 1) if handle else b"")
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise InputFileError(
            name, "bad_archive", f"is not a readable tar archive ({exc})", member_kind.fix
        ) from None


def read_installed_metadata(dist: Any, name: str) -> str | None:
    """A file of an installed distribution's metadata folder (importlib.metadata's Distribution), through the
    bounded reader; None when it has none or it cannot be used (metadata elsewhere must not stop verify)."""
    folder = getattr(dist, "_path", None)  # PathDistribution: its .dist-info / .egg-info folder
    if folder is None:
        return None
    try:
        return read_text(os.path.join(os.fspath(folder), name), WHEEL_METADATA)
    except InputFileError:
        return None


def read_text_lenient(path: str | os.PathLike, kind: InputKind) -> str:
    """read_bytes, decoded as UTF-8 with a bad byte replaced: for text only searched, never parsed (a
    source file's version line, a log)."""
    return read_bytes(path, kind).decode("utf-8", "replace")


def read_system_text(path: str | os.PathLike) -> str:
    """A kernel status file (/proc/meminfo, /proc/PID/stat, /sys/.../scaling_cur_freq): bounded, UTF-8 with
    bad bytes replaced (a process name is any bytes)."""
    return read_bytes(path, SYSTEM).decode("utf-8", "replace")


def _require_size(path: str | os.PathLike, size: int, kind: InputKind) -> None:
    if size > kind.max_bytes:
        raise InputFileError(
            path,
            "too_large",
            f"is larger than {_size(kind.max_bytes)}, the limit for a {kind.name} ({kind.why})",
            kind.fix,
        )


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
    if n % GiB == 0:
        return f"{n // GiB} GiB"
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n} bytes"
