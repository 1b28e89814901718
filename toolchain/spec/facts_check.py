"""`build.py facts check`: compare the compatibility facts with what PyPI publishes.

What PyPI shows, and what is compared:
- torch (`/pypi/torch/json`): every final release. Per minor: a row exists, its pinned patch is the
  newest, and the Python range equals the cpXY tags of the linux x86_64 wheels (free-threaded `t`
  builds aside). The CUDA of the PyPI wheels is in a release's Requires-Dist (`cuda-toolkit[...]==13.2.2`,
  or `nvidia-cuda-runtime-cu12==12.8.90` with a `platform_machine == "x86_64"` marker when the aarch64
  wheel is CPU-only); PyPI's JSON carries it for the newest release and, where served, per version
  (`/pypi/torch/<version>/json`; a 404 means "not visible", never drift). The other CUDA builds live on
  download.pytorch.org, which this check does not read.
- the CUDA toolkit: NVIDIA's nvcc wheels (`nvidia-cuda-nvcc` for 13.x, `nvidia-cuda-nvcc-cu12` for 12.x):
  every released major.minor must have a [[toolkit]] row (nvcc's GCC and arch limits).

Network access goes through a `Fetcher` (url -> body), so the parsing is tested on stored responses.
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable

from toolchain.errors import EnvironmentUnavailable
from toolchain.spec import compat
from toolchain.spec.compat import Compat, minor_of, version_key

DEFAULT_INDEX = "https://pypi.org"
# nvcc wheel name -> the CUDA majors it carries (the -cu13 names are deprecated stubs)
NVCC_PACKAGES = ("nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc")
_FINAL = re.compile(r"^\d+\.\d+\.\d+$")  # no rc/dev/post, no +local
_WHEEL = re.compile(r"^torch-(?P<version>[^-]+)-(?P<py>cp\d+)-(?P<abi>cp\d+t?)-(?P<platform>[^-]+)\.whl$")
# the dependency that names the CUDA of a torch wheel, and its version
_CUDA_DEP = re.compile(r"^(?P<name>cuda-toolkit|nvidia-cuda-runtime(?:-cu\d+)?)\b[^=;]*?\(?==\s*(?P<version>\d+\.\d+)")

Fetcher = Callable[[str], bytes]


class NotPublished(Exception):
    """The index answered: no such document (HTTP 404, or no such file for a file:// mirror)."""


class IndexUnreachable(Exception):
    """No usable answer: no network, a refused connection, a timeout, a server error."""


def urllib_fetcher(timeout_s: float = 30.0) -> Fetcher:
    """The real fetcher: https:// (PyPI or a mirror of its JSON API) and file:// (a stored copy)."""

    def fetch(url: str) -> bytes:
        request = urllib.request.Request(url, headers={"User-Agent": "apex-toolchain facts check",
                                                       "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (our own URLs)
                return response.read()
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise NotPublished(url) from None
            raise IndexUnreachable(f"{url} answered HTTP {err.code}") from None
        except urllib.error.URLError as err:
            if isinstance(err.reason, FileNotFoundError):
                raise NotPublished(url) from None
            raise IndexUnreachable(f"{url}: {err.reason}") from None
        except (TimeoutError, ConnectionError) as err:
            raise IndexUnreachable(f"{url}: {err}") from None

    return fetch


@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str  # "missing": the index has it, the facts do not; "wrong": the facts disagree with the index
    subject: str  # "torch 2.16", "nvcc 13.6"
    problem: str
    fix: str


@dataclasses.dataclass(frozen=True)
class Published:
    """One torch release as PyPI lists it."""

    version: str
    uploaded: str  # date of its first file, YYYY-MM-DD
    pythons: tuple[str, ...]  # from the linux x86_64 wheels' cpXY tags, e.g. ("3.10", ..., "3.14")
    aarch64: bool  # linux aarch64 wheels exist


@dataclasses.dataclass(frozen=True)
class PypiCuda:
    """The CUDA a torch wheel on PyPI is built for, from its Requires-Dist."""

    cuda: str  # "13.2"
    x86_64_only: bool  # the pin carries platform_machine == "x86_64": the aarch64 wheel is CPU-only


@dataclasses.dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]
    checked: tuple[str, ...]  # what was compared, for the summary
    not_visible: tuple[str, ...]  # torch versions whose Requires-Dist the index does not show (not drift)


# --- parsing (pure: tested on stored responses) ----------------------------------------------


def torch_releases(project_json: bytes) -> dict[str, Published]:
    """PyPI's /pypi/torch/json -> final, unyanked releases by version."""
    data = _json(project_json, "torch")
    releases: dict[str, Published] = {}
    for version, files in data.get("releases", {}).items():
        if not _FINAL.match(version) or not files or all(f.get("yanked") for f in files):
            continue
        pythons: set[str] = set()
        aarch64 = False
        for entry in files:
            wheel = _WHEEL.match(entry.get("filename", ""))
            if wheel is None or not wheel["platform"].startswith("manylinux"):
                continue
            if wheel["platform"].endswith("aarch64"):
                aarch64 = True
            elif wheel["platform"].endswith("x86_64") and not wheel["abi"].endswith("t"):
                pythons.add(f"{wheel['py'][2]}.{wheel['py'][3:]}")
        uploaded = min((f.get("upload_time") or "")[:10] for f in files)
        releases[version] = Published(version, uploaded, tuple(sorted(pythons, key=version_key)), aarch64)
    return releases


def latest_requires(project_json: bytes) -> tuple[str, list[str]]:
    """(the newest version, its Requires-Dist) from a project or per-version JSON document."""
    info = _json(project_json, "torch").get("info") or {}
    return str(info.get("version", "")), list(info.get("requires_dist") or [])


def pypi_cuda(requires_dist: Iterable[str]) -> PypiCuda | None:
    """The CUDA pinned by a torch wheel's Requires-Dist; None for a CPU-only wheel."""
    for requirement in requires_dist:
        spec, _, marker = requirement.partition(";")
        match = _CUDA_DEP.match(spec.strip())
        if match:
            return PypiCuda(match["version"], "platform_machine" in marker and "x86_64" in marker)
    return None


def toolkit_minors(project_json: bytes, package: str) -> set[str]:
    """The CUDA major.minor versions an nvcc wheel project has released (final, unyanked)."""
    data = _json(project_json, package)
    return {minor_of(version) for version, files in data.get("releases", {}).items()
            if re.match(r"^\d+\.\d+\.\d+$", version) and files and not all(f.get("yanked") for f in files)}


def _json(body: bytes, what: str) -> dict:
    try:
        data = json.loads(body)
    except ValueError:
        raise IndexUnreachable(f"the index's answer for {what} is not JSON (a proxy or login page?)") from None
    if not isinstance(data, dict):
        raise IndexUnreachable(f"the index's answer for {what} is not a PyPI JSON document")
    return data


# --- the comparison -----------------------------------------------------------------------------


def check(facts: Compat, fetch: Fetcher, index: str = DEFAULT_INDEX) -> Report:
    """Compare the facts with the index; IndexUnreachable propagates (the caller's exit 3)."""
    base = index.rstrip("/")
    findings: list[Finding] = []
    not_visible: list[str] = []
    project = fetch(f"{base}/pypi/torch/json")
    releases = torch_releases(project)
    latest, latest_deps = latest_requires(project)
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
            findings.append(Finding("missing", f"torch {minor}", f"PyPI has torch {newest.version} ({newest.uploaded}, "
                                    f"Python {low}-{high}); the facts have no row for it",
                                    f'add [torch."{minor}"] to toolchain/data/compat.toml: version = "{newest.version}", '
                                    f'python = ["{low}", "{high}"], its CUDA builds, with the source'))
            continue
        findings += _compare_torch(row, newest, releases)
        deps = latest_deps if newest.version == latest else _version_requires(fetch, base, newest.version)
        if deps is None:
            not_visible.append(newest.version)
            continue
        findings += _compare_pypi_cuda(row, newest, pypi_cuda(deps))
    for minor, row in sorted(facts.torch.items(), key=lambda kv: version_key(kv[0])):
        if minor not in by_minor:
            findings.append(Finding("wrong", f"torch {minor}", f"the facts have a row for torch {minor}, PyPI has no "
                                    f"{minor}.x release", f'remove [torch."{minor}"] or fix its version ({row.version})'))

    findings += _compare_toolkits(facts, fetch, base)
    checked = (f"torch {oldest}-{max(by_minor, key=version_key) if by_minor else oldest} ({len(releases)} releases)",
               f"nvcc wheels {', '.join(NVCC_PACKAGES)}")
    return Report(tuple(findings), checked, tuple(not_visible))


def _version_requires(fetch: Fetcher, base: str, version: str) -> list[str] | None:
    try:
        return latest_requires(fetch(f"{base}/pypi/torch/{version}/json"))[1]
    except NotPublished:
        return None


def _compare_torch(row: compat.TorchRelease, newest: Published, releases: dict[str, Published]) -> list[Finding]:
    found: list[Finding] = []
    subject = f"torch {row.minor}"
    if row.version not in releases:
        found.append(Finding("wrong", subject, f"the facts pin {row.version}, which PyPI does not publish",
                             f'set version = "{newest.version}" in [torch."{row.minor}"]'))
    elif version_key(newest.version) > version_key(row.version):
        found.append(Finding("wrong", subject, f"the facts pin {row.version}; PyPI's newest patch is {newest.version} "
                             f"({newest.uploaded})", f'set version = "{newest.version}" in [torch."{row.minor}"]'))
    if newest.pythons and (row.python_min, row.python_max) != (newest.pythons[0], newest.pythons[-1]):
        found.append(Finding("wrong", subject, f"the facts say Python {row.python_min}-{row.python_max}; PyPI's "
                             f"{newest.version} linux x86_64 wheels are cp{newest.pythons[0].replace('.', '')}-"
                             f"cp{newest.pythons[-1].replace('.', '')}",
                             f'set python = ["{newest.pythons[0]}", "{newest.pythons[-1]}"] in [torch."{row.minor}"]'))
    return found


def _compare_pypi_cuda(row: compat.TorchRelease, newest: Published, seen: PypiCuda | None) -> list[Finding]:
    subject = f"torch {row.minor}"
    where = f'in [torch."{row.minor}"]'
    if seen is None:
        if row.pypi_cuda is not None:
            return [Finding("wrong", subject, f"the facts say PyPI's wheels are CUDA {row.pypi_cuda}; PyPI's "
                            f"{newest.version} pins no CUDA runtime (CPU-only)", f"remove pypi_cuda {where}")]
        return []
    found: list[Finding] = []
    if row.pypi_cuda != seen.cuda:
        found.append(Finding("wrong", subject, f"the facts say PyPI's wheels are CUDA {row.pypi_cuda}; PyPI's "
                             f"{newest.version} pins CUDA {seen.cuda}", f'set pypi_cuda = "{seen.cuda}" {where}'))
    if seen.cuda not in row.cuda:
        found.append(Finding("missing", subject, f"PyPI's {newest.version} is a CUDA {seen.cuda} build, not in the "
                             f"facts' builds ({', '.join(row.cuda)})", f'add "{seen.cuda}" to cuda {where}'))
    if newest.aarch64 and not seen.x86_64_only and seen.cuda not in row.aarch64_cuda:
        found.append(Finding("missing", subject, f"PyPI's {newest.version} linux aarch64 wheels are CUDA {seen.cuda} "
                             "builds, not in the facts' aarch64 builds", f'add "{seen.cuda}" to aarch64_cuda {where}'))
    return found


def _compare_toolkits(facts: Compat, fetch: Fetcher, base: str) -> list[Finding]:
    known = {v for row in facts.toolkits for v in row.nvcc}
    found: list[Finding] = []
    for package in NVCC_PACKAGES:
        try:
            minors = toolkit_minors(fetch(f"{base}/pypi/{package}/json"), package)
        except NotPublished:
            raise IndexUnreachable(f"{base} has no {package} project: is it a PyPI mirror?") from None
        for minor in sorted(minors - known, key=version_key):
            found.append(Finding("missing", f"nvcc {minor}", f"NVIDIA publishes nvcc {minor} ({package} on PyPI); "
                                 "the facts have no [[toolkit]] row for it (its newest host GCC and GPU archs)",
                                 f'add nvcc "{minor}" to a [[toolkit]] row of toolchain/data/compat.toml '
                                 "(nvcc --list-gpu-arch; the __GNUC__ guard in crt/host_config.h)"))
    return found


def run(facts: Compat, fetch: Fetcher, index: str = DEFAULT_INDEX) -> Report:
    """check(), with an unreachable index as the environment error (exit 3)."""
    try:
        return check(facts, fetch, index)
    except IndexUnreachable as err:
        raise EnvironmentUnavailable(f"the package index cannot be read ({err}); run `build.py facts check` where "
                                     f"{index} is reachable, or pass --index URL of a mirror") from None
