"""`build.py facts check`: compare the compatibility facts with what PyPI publishes.

What is read, and what is compared:
- torch (`/pypi/torch/json`, PyPI's JSON API): every final, unyanked release. Per minor: a row exists,
  its pinned patch is the newest, its `patches` are exactly PyPI's patch releases, and the Python range
  equals the cpXY tags of the linux x86_64 wheels (free-threaded `t` builds aside).
- the CUDA of each minor's newest release, per machine (x86_64, aarch64): from that wheel's own METADATA,
  the PEP 658 `<wheel url>.metadata` file (kilobytes, never the wheel), its Requires-Dist parsed with
  `packaging` and its markers evaluated for linux on that machine (`cuda-toolkit[...]==13.2.2`, or
  `nvidia-cuda-runtime-cu12==12.8.90` on x86_64 only, when the aarch64 wheel is CPU-only). An index that
  serves neither `.metadata` nor ranges leaves that wheel "not visible" (said, never drift). The other CUDA
  builds live on download.pytorch.org, which this check does not read.
- the CUDA toolkit: NVIDIA's nvcc wheels (`nvidia-cuda-nvcc` for 13.x, `nvidia-cuda-nvcc-cu12` for 12.x):
  every released major.minor must have a [[toolkit]] row (nvcc's GCC and arch limits).

Every answer goes through verify's bounded reader (`input_files.read_stream` / `read_bytes`: a FIFO, an
endless or a huge answer costs the limit, not its size) and a declared shape (`verify.runtime.field_types`)
before it is read: an answer that is not what PyPI serves is BadAnswer (exit 3, the index is unusable),
never drift. An index without `.metadata` files (a caching mirror) is read by HTTP range requests of
the wheel's zip directory and its METADATA member (a few hundred KB of a 500 MB wheel; a server that
ignores Range is never read on). Network access goes through a `Fetcher`, whose file:// side reads a
stored copy the same way, so the parsing is tested on stored answers (tests/fixtures/pypi-2026-12-01).
"""

from __future__ import annotations

import dataclasses
import email.parser
import http.client
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from typing import BinaryIO, Protocol, cast

from toolchain.builder import cuda_from_pypi
from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.spec import compat
from toolchain.spec.compat import Compat, minor_of, version_key
from verify.runtime import field_types as ft
from verify.runtime import input_files
from verify.runtime.messages import shown

try:
    from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
except ModuleNotFoundError:  # declared in the build and dev extras; run() says so
    Requirement = None  # type: ignore[assignment,misc]  # the marker run() reads to say so

DEFAULT_INDEX = "https://pypi.org"
INDEX_SCHEMES = ("https", "http", "file")
# nvcc wheel name -> the CUDA majors it carries (the -cu13 names are deprecated stubs)
NVCC_PACKAGES = ("nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc")
MACHINES = ("x86_64", "aarch64")  # the linux wheels whose METADATA is read
METADATA_MAX = 1 << 20  # torch's METADATA is ~40 KB
RANGE_CHUNK = 256 << 10  # one range request; a torch wheel's zip directory is ~1.5 MB
_METADATA_MEMBER = input_files.InputKind(
    "torch wheel's METADATA", METADATA_MAX, "torch's METADATA is ~40 KB", "check the index's wheel"
)
RANGE_BUDGET = 32 << 20  # bytes one wheel's range reads may cost in all
_FINAL = re.compile(r"^\d+\.\d+\.\d+$")  # no rc/dev/post, no +local
_FINAL_TOOLKIT = re.compile(r"^\d+\.\d+\.\d+(?:\.\d+)?$")  # cuda-toolkit 13.0.3 was uploaded as 13.0.3.0
_WHEEL = re.compile(
    r"^torch-(?P<version>[^-]+)(?:-(?P<build>\d+)[^-]*)?-(?P<py>cp\d+)-(?P<abi>cp\d+t?)-"
    r"(?P<platform>[^-]+)\.whl$"
)
_CUDA_RUNTIME = re.compile(r"^(cuda-toolkit|nvidia-cuda-runtime(-cu\d+)?)$")  # canonical names


class NotPublished(Exception):
    """The index answered: no such document (HTTP 404, or no such file for a file:// mirror)."""


class IndexUnreachable(Exception):
    """No usable answer: no network, a refused connection, a timeout, a server error."""


class BadAnswer(IndexUnreachable):
    """The index answered, but not with what PyPI serves there (a proxy's page, a malformed document)."""


# --- the index: its URL and its answers, bounded ----------------------------------------------


def index_base(text: str, option: str = "--index", fix: str | None = None) -> str:
    """--index (or another source's option) checked before anything is fetched: https:// or http:// with a
    host, or file:// of an existing folder; else UsageError (exit 2) naming the value and the fix."""
    fix = fix or (
        "pass https://pypi.org, a mirror of PyPI's JSON API (https://HOST/PATH) or file:///FOLDER (a stored copy)"
    )
    label = f"{option} {shown(text)}" if text else f"{option} ''"
    if not text.strip():
        raise UsageError(f"{label}: empty; {fix}")
    if not text.isascii() or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in text):
        raise UsageError(
            f"{label}: has spaces, control or non-ASCII characters; percent-encode them or {fix}"
        )
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as err:
        raise UsageError(f"{label}: not a URL ({err}); {fix}") from None
    if parts.scheme not in INDEX_SCHEMES:
        what = (
            "has no scheme"
            if not parts.scheme
            else f"has the scheme {parts.scheme}:, which facts check cannot read"
        )
        raise UsageError(f"{label}: {what}; {fix}")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise UsageError(f"{label}: a file:// URL on another host ({parts.netloc}); {fix}")
        folder = urllib.request.url2pathname(parts.path)
        if not os.path.isdir(folder):
            raise UsageError(f"{label}: {folder or '(no path)'} is not a folder; {fix}")
    elif not parts.hostname:
        raise UsageError(f"{label}: names no host; {fix}")
    return text.rstrip("/")


class Fetcher(Protocol):
    """Where answers come from: the network (UrllibFetcher) or, in tests, the same over file://."""

    def get(self, url: str) -> bytes: ...

    def get_range(self, url: str, start: int | None, length: int) -> tuple[bytes, int]:
        """`length` bytes from `start` (None: the last `length`) and the document's size; NotPublished
        when there is no such document or the server does not answer range requests."""
        ...


class UrllibFetcher:
    """https:// and http:// (PyPI or a mirror of its JSON API) and file:// (a stored copy), every answer
    through verify's bounded reader."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s

    def get(self, url: str) -> bytes:
        if urllib.parse.urlsplit(url).scheme == "file":
            return _file_call(url, lambda path: input_files.read_bytes(path, input_files.INDEX_ANSWER))
        with self._open(url, {}) as response:
            return self._bounded(lambda: input_files.read_stream(response, url, input_files.INDEX_ANSWER))

    def get_range(self, url: str, start: int | None, length: int) -> tuple[bytes, int]:
        if urllib.parse.urlsplit(url).scheme == "file":
            return _file_call(
                url, lambda path: input_files.read_part(path, input_files.INDEX_ANSWER, start, length)
            )
        wanted = f"bytes=-{length}" if start is None else f"bytes={start}-{start + length - 1}"
        with self._open(url, {"Range": wanted}) as response:
            if response.status != 206:  # the whole wheel would follow: never read it
                raise NotPublished(f"{url}: the server does not answer range requests")
            match = re.fullmatch(
                r"bytes (\d+)-(\d+)/(\d+)", response.headers.get("Content-Range", "").strip()
            )
            if match is None:
                raise BadAnswer(f"{url}: a range answer without a usable Content-Range")
            body = self._bounded(lambda: response.read(length + 1))
        if len(body) > length:
            raise BadAnswer(f"{url}: a range answer longer than the {length} bytes asked for")
        return body, int(match[3])

    def _open(self, url: str, headers: dict[str, str]):  # noqa: ANN202 (an http.client response)
        request = urllib.request.Request(
            url, headers={"User-Agent": "apex-toolchain facts check", "Accept": "application/json", **headers}
        )
        try:
            return input_files.open_url(request, timeout_s=self.timeout_s)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise NotPublished(url) from None
            raise IndexUnreachable(f"{url} answered HTTP {err.code}") from None
        except urllib.error.URLError as err:
            raise IndexUnreachable(f"{url}: {err.reason}") from None
        except (OSError, http.client.HTTPException, ValueError) as err:  # timeouts, resets, a bad host name
            raise IndexUnreachable(f"{url}: {type(err).__name__}: {err}") from None

    @staticmethod
    def _bounded(read):  # noqa: ANN001, ANN205
        try:
            return read()
        except input_files.InputFileError as err:
            raise BadAnswer(str(err)) from None
        except (OSError, http.client.HTTPException) as err:  # a reset or a timeout in the middle
            raise IndexUnreachable(f"{type(err).__name__}: {err}") from None


def urllib_fetcher(timeout_s: float = 30.0) -> UrllibFetcher:
    return UrllibFetcher(timeout_s)


def _file_call(url: str, read):  # noqa: ANN001, ANN202
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    try:
        return read(path)
    except input_files.InputFileError as err:
        if err.reason == "missing":
            raise NotPublished(url) from None
        raise BadAnswer(str(err)) from None


class _RemoteZip:
    """A wheel as a seekable file whose bytes come by range requests, for zipfile: its directory at the
    end, then the one member asked for; at most RANGE_BUDGET bytes in all."""

    def __init__(self, fetcher: Fetcher, url: str) -> None:
        self.fetcher, self.url = fetcher, url
        tail, self.size = fetcher.get_range(url, None, RANGE_CHUNK)
        self.buffer_start, self.buffer, self.spent, self.pos = self.size - len(tail), tail, len(tail), 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = max(0, (0, self.pos, self.size)[whence] + offset)
        return self.pos

    def close(self) -> None:  # nothing held open: each range is its own request
        return None

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        end = self.pos + n
        if not (self.buffer_start <= self.pos and end <= self.buffer_start + len(self.buffer)):
            length = min(max(n, RANGE_CHUNK), self.size - self.pos)
            self.spent += length
            if self.spent > RANGE_BUDGET:
                raise BadAnswer(
                    f"{self.url}: its zip directory and METADATA need more than {RANGE_BUDGET >> 20} MiB "
                    "of range reads"
                )
            self.buffer, _ = self.fetcher.get_range(self.url, self.pos, length)
            self.buffer_start = self.pos
        data = self.buffer[self.pos - self.buffer_start : end - self.buffer_start]
        self.pos += len(data)
        return data


def _zip_metadata(fetcher: Fetcher, url: str, filename: str) -> bytes:
    """A wheel's METADATA by HTTP range reads of its zip directory and that one member (never the wheel)."""
    try:
        remote = cast(BinaryIO, _RemoteZip(fetcher, url))
        with input_files.ZipInput(filename, input_files.WHEEL, remote) as wheel:
            names = [n for n in wheel.names() if re.fullmatch(r"torch-[^/]+\.dist-info/METADATA", n)]
            if len(names) != 1:
                raise BadAnswer(f"{filename}: {len(names)} torch-*.dist-info/METADATA members, not one")
            return wheel.read(names[0], _METADATA_MEMBER)
    except input_files.InputFileError as err:
        if err.reason == "too_large":  # checked from the zip directory, before inflating
            raise BadAnswer(
                f"{filename}: its METADATA inflates past {METADATA_MAX} bytes, not a METADATA file"
            ) from None
        raise BadAnswer(f"{filename}: not a readable wheel (zip) by range reads ({err.problem})") from None


@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str  # "missing": the index has it, the facts do not; "wrong": the facts disagree with the index
    subject: str  # "torch 2.16", "nvcc 13.6"
    problem: str
    fix: str


@dataclasses.dataclass(frozen=True)
class Wheel:
    """One linux wheel of a release, as the index lists it."""

    filename: str
    url: str  # as the index wrote it: absolute, or relative to the document that listed it
    machine: str  # "x86_64" | "aarch64"
    python: str  # "3.12"
    build: int  # the wheel's build tag (torch-2.10.0-3-cp312-...: 3); 0 without one


@dataclasses.dataclass(frozen=True)
class Published:
    """One torch release as PyPI lists it."""

    version: str
    uploaded: str  # date of its first file, YYYY-MM-DD
    pythons: tuple[str, ...]  # from the linux x86_64 wheels' cpXY tags, e.g. ("3.10", ..., "3.14")
    aarch64: bool  # linux aarch64 wheels exist
    wheels: tuple[Wheel, ...] = ()  # its linux wheels, newest Python (and build tag) first

    def wheels_for(self, machine: str) -> tuple[Wheel, ...]:
        return tuple(w for w in self.wheels if w.machine == machine)


@dataclasses.dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]
    checked: tuple[str, ...]  # what was compared, for the summary
    not_visible: tuple[str, ...]  # "2.4.1 aarch64": no wheel's METADATA served there (not drift)


# --- parsing (pure: tested on stored answers) ---------------------------------------------------

_FILE = ft.Record(
    {
        "filename": ft.Str(max_len=512),
        "upload_time": ft.Nullable(ft.Str(max_len=64)),
        "yanked": ft.BOOL,
        "url": ft.Str(max_len=4096),
        "requires_python": ft.Nullable(ft.Str(max_len=512)),
    },
    required=("filename",),
)
_PROJECT = ft.Record(
    {
        "info": ft.Record(
            {"version": ft.Str(max_len=128), "requires_dist": ft.Nullable(ft.ListOf(ft.Str(max_len=4096)))}
        ),
        "releases": ft.MapOf(ft.ListOf(_FILE), max_items=100_000),
    },
    required=("releases",),
)


def torch_releases(project_json: bytes) -> dict[str, Published]:
    """PyPI's /pypi/torch/json -> final, unyanked releases by version."""
    data = _json(project_json, "torch")
    releases: dict[str, Published] = {}
    for version, files in data["releases"].items():
        if not _FINAL.match(version) or not files or all(f.get("yanked") for f in files):
            continue
        pythons: set[str] = set()
        wheels: list[Wheel] = []
        for entry in files:
            wheel = _WHEEL.match(entry["filename"])
            if wheel is None or not wheel["platform"].startswith("manylinux") or entry.get("yanked"):
                continue
            machine = next((m for m in MACHINES if wheel["platform"].endswith(m)), None)
            python = f"{wheel['py'][2]}.{wheel['py'][3:]}"
            if machine is None or wheel["abi"].endswith("t"):
                continue
            if machine == "x86_64":
                pythons.add(python)
            wheels.append(
                Wheel(entry["filename"], entry.get("url") or "", machine, python, int(wheel["build"] or 0))
            )
        wheels.sort(key=lambda w: (version_key(w.python), w.build), reverse=True)
        uploaded = min((f.get("upload_time") or "")[:10] for f in files)
        releases[version] = Published(
            version,
            uploaded,
            tuple(sorted(pythons, key=version_key)),
            any(w.machine == "aarch64" for w in wheels),
            tuple(wheels),
        )
    return releases


def metadata_requires(body: bytes, what: str) -> list[Requirement]:
    """A wheel's METADATA (core metadata, RFC 822 headers) -> its Requires-Dist, parsed; BadAnswer when
    the answer is not a torch METADATA or a requirement does not parse."""
    if len(body) > METADATA_MAX:
        raise BadAnswer(f"{what}: {len(body)} bytes, not a METADATA file (at most {METADATA_MAX})")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadAnswer(f"{what}: not UTF-8 text (byte offset {err.start}): not a METADATA file") from None
    headers = email.parser.HeaderParser().parsestr(text)
    if "Metadata-Version" not in headers or str(headers.get("Name", "")).lower() != "torch":
        raise BadAnswer(f"{what}: not torch's METADATA (no Metadata-Version, or Name is not torch)")
    found = []
    for line in headers.get_all("Requires-Dist") or ():
        try:
            found.append(Requirement(str(line)))
        except InvalidRequirement as err:
            why = (
                str(err).splitlines()[0] if str(err) else type(err).__name__
            )  # packaging draws a caret below
            raise BadAnswer(f"{what}: Requires-Dist {shown(str(line))} does not parse ({why})") from None
    return found


def wheel_cuda(requirements: Iterable[Requirement], machine: str, python: str = "3.12") -> str | None:
    """The CUDA major.minor a torch wheel pins for linux on `machine`; None for a CPU-only wheel."""
    env = {
        "platform_machine": machine,
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }
    for requirement in requirements:
        try:
            if requirement.marker is not None and not requirement.marker.evaluate(env):
                continue
        except (UndefinedComparison, UndefinedEnvironmentName, ValueError) as err:
            raise BadAnswer(
                f"Requires-Dist {shown(str(requirement))}: its marker cannot be evaluated ({err})"
            ) from None
        if not _CUDA_RUNTIME.match(canonicalize_name(requirement.name)):
            continue
        pins = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
        if len(pins) != 1 or not re.match(r"^\d+\.\d+", pins[0]):
            raise BadAnswer(f"Requires-Dist {shown(str(requirement))} does not pin one CUDA version")
        return minor_of(pins[0])
    return None


_TOOLKIT_PROJECT = ft.Record(
    {"releases": ft.MapOf(ft.ListOf(ft.Record({"yanked": ft.BOOL})), max_items=100_000)},
    required=("releases",),
)


def toolkit_minors(project_json: bytes, package: str) -> set[str]:
    """The CUDA major.minor versions an nvcc wheel project has released (final, unyanked)."""
    data = _json(project_json, package, _TOOLKIT_PROJECT)
    return {
        minor_of(version)
        for version, files in data["releases"].items()
        if _FINAL.match(version) and files and not all(f.get("yanked") for f in files)
    }


def _json(body: bytes, what: str, shape: ft.Shape = _PROJECT) -> dict:
    try:
        data = input_files.decode_json(body, what, input_files.INDEX_ANSWER)
    except input_files.InputFileError:
        raise BadAnswer(f"the index's answer for {what} is not JSON (a proxy or login page?)") from None
    if not isinstance(data, dict):
        raise BadAnswer(f"the index's answer for {what} is not a PyPI JSON document")
    problems = ft.check(data, shape, what)
    if problems:
        raise BadAnswer(f"the index's answer for {what} is not PyPI's JSON ({ft.summary(problems, 3)})")
    return data


# --- the comparison -----------------------------------------------------------------------------


def check(facts: Compat, fetch: Fetcher, index: str = DEFAULT_INDEX) -> Report:
    """Compare the facts with the index; IndexUnreachable propagates (the caller's exit 3)."""
    base = index.rstrip("/")
    project_url = f"{base}/pypi/torch/json"
    try:
        project = fetch.get(project_url)
    except NotPublished:
        raise IndexUnreachable(
            f"{base} has no torch project ({project_url}): is it PyPI or a mirror of its JSON API?"
        ) from None
    releases = torch_releases(project)
    findings: list[Finding] = []
    not_visible: list[str] = []
    oldest = min(facts.torch, key=version_key)
    by_minor: dict[str, list[Published]] = {}
    for release in releases.values():
        if version_key(minor_of(release.version)) >= version_key(oldest):
            by_minor.setdefault(minor_of(release.version), []).append(release)

    for minor in sorted(by_minor, key=version_key):
        newest = max(by_minor[minor], key=lambda r: version_key(r.version))
        row = facts.torch.get(minor)
        if row is None:
            low, high = (newest.pythons[0], newest.pythons[-1]) if newest.pythons else ("?", "?")
            findings.append(
                Finding(
                    "missing",
                    f"torch {minor}",
                    f"PyPI has torch {newest.version} ({newest.uploaded}, "
                    f"Python {low}-{high}); the facts have no row for it",
                    f'add [torch."{minor}"] to toolchain/data/compat.toml: version = "{newest.version}", '
                    f'python = ["{low}", "{high}"], its CUDA builds, with the source',
                )
            )
            continue
        findings += _compare_torch(row, newest, releases)
        findings += _compare_patches(row, by_minor[minor])
        for machine in MACHINES:
            wheels = newest.wheels_for(machine)
            read = _first_metadata(fetch, project_url, wheels)
            if read is None:
                not_visible += [f"{newest.version} {machine}"] if wheels else []
                continue
            wheel, requires = read
            findings += _compare_wheel_cuda(row, newest, machine, wheel_cuda(requires, machine, wheel.python))
    for minor, row in sorted(facts.torch.items(), key=lambda kv: version_key(kv[0])):
        if minor not in by_minor:
            findings.append(
                Finding(
                    "wrong",
                    f"torch {minor}",
                    f"the facts have a row for torch {minor}, PyPI has no {minor}.x release",
                    f'remove [torch."{minor}"] or fix its version ({row.version})',
                )
            )

    findings += _compare_toolkits(facts, fetch, base)
    findings += _compare_toolkit_pins(fetch, base)
    checked = (
        f"torch {oldest}-{max(by_minor, key=version_key) if by_minor else oldest} ({len(releases)} releases, "
        "the newest patch's x86_64 and aarch64 METADATA)",
        f"nvcc wheels {', '.join(NVCC_PACKAGES)}",
        "cuda-toolkit pins of the CUDA wheels' builder",
    )
    return Report(tuple(findings), checked, tuple(not_visible))


def _first_metadata(
    fetch: Fetcher, project_url: str, wheels: Iterable[Wheel]
) -> tuple[Wheel, list[Requirement]] | None:
    """The first of these wheels (one release, one machine: the same Requires-Dist) whose METADATA the
    index serves; None when it serves none (a caching mirror serves only what it has fetched)."""
    wheels = tuple(wheels)
    for wheel in wheels:
        try:
            return wheel, metadata_requires(
                fetch.get(_wheel_url(project_url, wheel) + ".metadata"), f"{wheel.filename}.metadata"
            )
        except NotPublished:
            continue
    for wheel in wheels[:1]:  # no PEP 658 file: read it from the wheel's zip directory, by ranges
        try:
            return wheel, metadata_requires(
                _zip_metadata(fetch, _wheel_url(project_url, wheel), wheel.filename),
                f"{wheel.filename}'s METADATA",
            )
        except NotPublished:
            continue
    return None


def _wheel_url(project_url: str, wheel: Wheel) -> str:
    """The wheel's URL, resolved against the document that listed it (PyPI's mirrors write relative
    URLs); a URL of another kind than the index's own is refused."""
    url = urllib.parse.urljoin(project_url, wheel.url) if wheel.url else ""
    index_is_file = urllib.parse.urlsplit(project_url).scheme == "file"
    scheme = urllib.parse.urlsplit(url).scheme
    if not url or (scheme == "file") != index_is_file or scheme not in INDEX_SCHEMES:
        raise BadAnswer(
            f"the index lists {wheel.filename} at {shown(wheel.url) if wheel.url else 'no URL'}, "
            f"not a {'file' if index_is_file else 'http(s)'} URL like the index's own"
        )
    return url


def _compare_torch(
    row: compat.TorchRelease, newest: Published, releases: dict[str, Published]
) -> list[Finding]:
    found: list[Finding] = []
    subject = f"torch {row.minor}"
    if row.version not in releases:
        found.append(
            Finding(
                "wrong",
                subject,
                f"the facts pin {row.version}, which PyPI does not publish",
                f'set version = "{newest.version}" in [torch."{row.minor}"]',
            )
        )
    elif version_key(newest.version) > version_key(row.version):
        found.append(
            Finding(
                "wrong",
                subject,
                f"the facts pin {row.version}; PyPI's newest patch is {newest.version} ({newest.uploaded})",
                f'set version = "{newest.version}" in [torch."{row.minor}"]',
            )
        )
    if newest.pythons and (row.python_min, row.python_max) != (newest.pythons[0], newest.pythons[-1]):
        found.append(
            Finding(
                "wrong",
                subject,
                f"the facts say Python {row.python_min}-{row.python_max}; PyPI's "
                f"{newest.version} linux x86_64 wheels are cp{newest.pythons[0].replace('.', '')}-"
                f"cp{newest.pythons[-1].replace('.', '')}",
                f'set python = ["{newest.pythons[0]}", "{newest.pythons[-1]}"] in [torch."{row.minor}"]',
            )
        )
    return found


def _compare_patches(row: compat.TorchRelease, published: list[Published]) -> list[Finding]:
    """The facts' `patches` against PyPI's final releases of that minor (a listed patch a cell may name)."""
    subject, where = f"torch {row.minor}", f'in [torch."{row.minor}"]'
    on_pypi = {r.version: r for r in published}
    found = [
        Finding(
            "missing",
            subject,
            f"PyPI publishes torch {version} ({on_pypi[version].uploaded}); the facts' "
            f"patches ({', '.join(row.patches)}) lack it, so a cell naming it is refused",
            f'add "{version}" to patches {where}',
        )
        for version in sorted(set(on_pypi) - set(row.patches), key=version_key)
    ]
    found += [
        Finding(
            "wrong",
            subject,
            f"the facts' patches list {version}, which PyPI does not publish (or yanked)",
            f'remove "{version}" from patches {where}',
        )
        for version in sorted(set(row.patches) - set(on_pypi), key=version_key)
        if version != row.version
    ]
    return found


def _compare_wheel_cuda(
    row: compat.TorchRelease, newest: Published, machine: str, seen: str | None
) -> list[Finding]:
    subject, where = f"torch {row.minor}", f'in [torch."{row.minor}"]'
    if (
        machine == "aarch64"
    ):  # a CPU-only aarch64 wheel says nothing: the aarch64 CUDA builds are on download.pytorch.org
        if seen is not None and seen not in row.aarch64_cuda:
            return [
                Finding(
                    "missing",
                    subject,
                    f"PyPI's {newest.version} linux aarch64 wheels are CUDA {seen} builds, "
                    f"not in the facts' aarch64 builds ({', '.join(row.aarch64_cuda) or 'none'})",
                    f'add "{seen}" to aarch64_cuda {where}',
                )
            ]
        return []
    if seen is None:
        if row.pypi_cuda is not None:
            return [
                Finding(
                    "wrong",
                    subject,
                    f"the facts say PyPI's wheels are CUDA {row.pypi_cuda}; PyPI's "
                    f"{newest.version} linux x86_64 wheel pins no CUDA runtime (CPU-only)",
                    f"remove pypi_cuda {where}",
                )
            ]
        return []
    found: list[Finding] = []
    if row.pypi_cuda != seen:
        found.append(
            Finding(
                "wrong",
                subject,
                f"the facts say PyPI's wheels are CUDA {row.pypi_cuda}; PyPI's "
                f"{newest.version} pins CUDA {seen}",
                f'set pypi_cuda = "{seen}" {where}',
            )
        )
    if seen not in row.cuda:
        found.append(
            Finding(
                "missing",
                subject,
                f"PyPI's {newest.version} is a CUDA {seen} build, not in the "
                f"facts' builds ({', '.join(row.cuda)})",
                f'add "{seen}" to cuda {where}',
            )
        )
    return found


def _compare_toolkits(facts: Compat, fetch: Fetcher, base: str) -> list[Finding]:
    known = {v for row in facts.toolkits for v in row.nvcc}
    found: list[Finding] = []
    for package in NVCC_PACKAGES:
        try:
            minors = toolkit_minors(fetch.get(f"{base}/pypi/{package}/json"), package)
        except NotPublished:
            raise IndexUnreachable(f"{base} has no {package} project: is it a PyPI mirror?") from None
        for minor in sorted(minors - known, key=version_key):
            found.append(
                Finding(
                    "missing",
                    f"nvcc {minor}",
                    f"NVIDIA publishes nvcc {minor} ({package} on PyPI); "
                    "the facts have no [[toolkit]] row for it (its newest host GCC and GPU archs)",
                    f'add nvcc "{minor}" to a [[toolkit]] row of toolchain/data/compat.toml '
                    "(nvcc --list-gpu-arch; the __GNUC__ guard in crt/host_config.h)",
                )
            )
    return found


def _compare_toolkit_pins(fetch: Fetcher, base: str) -> list[Finding]:
    """The builder's recorded cuda-toolkit pins (toolchain/data/cuda_wheels.json toolkit_pins): one row per
    MAJOR.MINOR of a wheel series, at the newest release PyPI has of it."""
    pins = cuda_from_pypi.facts()
    recorded = pins.get("toolkit_pins", {})
    package = pins["toolkit_meta_package"]
    try:
        data = _json(fetch.get(f"{base}/pypi/{package}/json"), package, _TOOLKIT_PROJECT)
    except NotPublished:
        raise IndexUnreachable(f"{base} has no {package} project: is it a PyPI mirror?") from None
    newest: dict[str, str] = {}
    for version, files in data["releases"].items():
        if not _FINAL_TOOLKIT.match(version) or not files or all(f.get("yanked") for f in files):
            continue
        minor = minor_of(version)
        if minor.split(".")[0] in pins["series"] and version_key(version) > version_key(
            newest.get(minor, "0")
        ):
            newest[minor] = version
    found = []
    where = f"toolkit_pins in {cuda_from_pypi.FACTS_PATH.relative_to(cuda_from_pypi.FACTS_PATH.parents[2])}"
    for minor, version in sorted(newest.items(), key=lambda kv: version_key(kv[0])):
        row = recorded.get(minor)
        if row is None or version_key(row["toolkit"]) < version_key(version):
            had = f"records {row['toolkit']}" if row else "has no row for it"
            found.append(
                Finding(
                    "missing" if row is None else "wrong",
                    f"cuda-toolkit {minor}",
                    f"PyPI's newest {package} {minor} is {version}; {where} {had}",
                    f'set "{minor}" in {where} to {version}\'s Requires-Dist pins of the compiler wheels',
                )
            )
    return found


def run(facts: Compat, fetch: Fetcher, index: str = DEFAULT_INDEX) -> Report:
    """check(), with an unreachable or unusable index as the environment error (exit 3)."""
    if Requirement is None:
        raise EnvironmentUnavailable(
            "facts check reads requirements with the `packaging` library, which is not "
            "installed; pip install packaging (it is in the build and dev extras)"
        )
    try:
        return check(facts, fetch, index)
    except IndexUnreachable as err:
        raise EnvironmentUnavailable(
            f"the package index cannot be read ({err}); run `build.py facts check` where "
            f"{index} is reachable, or pass --index URL of a mirror"
        ) from None
