"""What a published wheel requires besides torch, served on its stack's page, so that `pip install apex
--index-url INDEX/<stack>/simple` (and `apex-verify install`) needs no other index. torch is never served:
it stays the user's, and the wheel's exact torch pin refuses any other.

`build.py index` reads each wheel's Requires-Dist (its METADATA), evaluates the markers for that wheel's
Python on Linux, and for every requirement finds one wheel that satisfies it: one the index already holds
(INDEX/dependencies/), else the newest in a `--dependency-wheels DIR`, else `pip download --only-binary=:all:
--no-deps` (unless `--no-download`). What that wheel requires is followed the same way. Only pure-Python
`py3-none-any` wheels are served: one file fits every Python and platform of every stack. A requirement
nothing supplies stops the run before anything is written (exit 3, one line naming the requirement, the
wheel that needs it and the flag that supplies it): an index that cannot install is not published.

    INDEX/dependencies/<sha256[:16]>/packaging-26.4-py3-none-any.whl, its .metadata (PEP 658)
    INDEX/<stack>/simple/packaging/index.html|.json
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from toolchain.builder import wheel_identity
from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.index import pages, pip_rules
from verify.runtime import input_files
from verify.runtime.messages import printable

FOLDER = "dependencies"  # INDEX/dependencies/: shared by every stack, like INDEX/tools/
NEVER_SERVED = "torch"  # the user's, pinned exactly by the wheel
SERVED_ALREADY = (pages.PROJECT, pages.TOOL_PROJECT)  # the index's own projects
FLAG = "--dependency-wheels DIR"
DOWNLOAD_TIMEOUT_S = 300
_PYTHON_TAG = re.compile(r"(?:cp|py)(\d)(\d+)")


class DependencyUnavailable(EnvironmentUnavailable):
    """A requirement of a wheel that no folder holds and pip could not fetch (exit 3)."""


@dataclasses.dataclass(frozen=True)
class Source:
    """Where wheels of what is not on the index yet come from: `folders` first, then `pip download` when
    `download` (the library's default is not to: only the command line reaches the network)."""

    folders: tuple[Path, ...] = ()
    download: bool = False


@dataclasses.dataclass(frozen=True)
class Need:
    """One requirement of one wheel of one stack."""

    requirement: str  # as in Requires-Dist: packaging>20.6
    stack: str
    wanted_by: str  # the wheel file that requires it
    python: str | None  # 3.12 (its Python tag), for markers and Requires-Python; None: any Python 3
    extras: tuple[str, ...] = ()  # the extras the requirement on `wanted_by` asked for


@dataclasses.dataclass(frozen=True)
class DependencyWheel:
    """A pure-Python wheel served beside Apex's, as the pages link it."""

    name: str  # packaging-26.4-py3-none-any.whl
    project: str  # PEP 503 normalised
    version: str
    sha256: str
    size: int
    metadata: bytes  # its METADATA: the PEP 658 file
    path: Path  # where its bytes are now (the index, a --dependency-wheels folder, pip's download)
    origin: str  # "the index", the folder, or "pip download"

    @property
    def folder(self) -> str:
        return self.sha256[:16]

    @property
    def relpath(self) -> str:  # inside the index
        return f"{FOLDER}/{self.folder}/{self.name}"

    @property
    def href(self) -> str:  # from <stack>/simple/<project>/
        return f"../../../{FOLDER}/{self.folder}/{urllib.parse.quote(self.name)}"

    @property
    def metadata_sha256(self) -> str:
        return hashlib.sha256(self.metadata).hexdigest()

    @property
    def requires_python(self) -> str | None:
        return header(self.metadata, "Requires-Python")

    @property
    def requires(self) -> tuple[str, ...]:
        return requires_dist(self.metadata)


@dataclasses.dataclass(frozen=True)
class Resolution:
    """Per stack, the dependency wheels its pages link; `added`: those the index does not hold yet."""

    served: dict[str, tuple[DependencyWheel, ...]]
    added: tuple[DependencyWheel, ...] = ()
    why: dict[str, str] = dataclasses.field(default_factory=dict)  # wheel name -> the need that brought it


def header(metadata: bytes, name: str) -> str | None:
    for value in headers(metadata, name):
        return value
    return None


def headers(metadata: bytes, name: str) -> list[str]:
    """Every value of a METADATA header (the headers end at the first empty line)."""
    found = []
    for line in metadata.decode("utf-8", "replace").split("\n"):
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            found.append(value.strip())
    return found


def requires_dist(metadata: bytes) -> tuple[str, ...]:
    return tuple(headers(metadata, "Requires-Dist"))


def python_of(wheel_name: str) -> str | None:
    """3.12 for a cp312 wheel (the lowest of its Python tags); None when its tags name no minor (py3)."""
    parts = wheel_name[: -len(".whl")].split("-")
    versions = sorted(
        (int(m.group(1)), int(m.group(2)))
        for tag in (parts[-3].split(".") if len(parts) >= 5 else [])
        if (m := _PYTHON_TAG.fullmatch(tag))
    )
    return f"{versions[0][0]}.{versions[0][1]}" if versions else None


def needs_of(stack: str, wheel_name: str, requires: tuple[str, ...]) -> list[Need]:
    python = python_of(wheel_name)
    return [Need(r, stack, wheel_name, python) for r in requires]


def is_pure(wheel_name: str) -> bool:
    """py3-none-any (or py2.py3-none-any): one file for every Python 3 and platform."""
    parts = wheel_name[: -len(".whl")].split("-")
    if len(parts) < 5:
        return False
    python, abi, platform = parts[-3:]
    return abi == "none" and platform == "any" and "py3" in python.split(".")


def stored(index: Path) -> list[DependencyWheel]:
    """The dependency wheels the index holds; a folder that is not a whole one is left out (said once)."""
    found = []
    for folder in sorted(p for p in (index / FOLDER).glob("*") if p.is_dir() and not p.is_symlink()):
        wheels = sorted(p for p in folder.glob("*.whl") if not p.is_symlink())
        if len(wheels) != 1:
            continue
        try:
            wheel = _read(wheels[0], "the index")
            if wheel.folder != folder.name:
                raise input_files.InputFileError(
                    wheels[0], "bad_shape", "is not the wheel its folder names", ""
                )
            wheel = dataclasses.replace(
                wheel,
                metadata=input_files.read_bytes(
                    folder / f"{wheel.name}.metadata", input_files.WHEEL_METADATA
                ),
            )
        except (input_files.InputFileError, _Unusable) as error:
            print(
                f"build.py index: {printable(folder)} is not a whole dependency wheel ({printable(error)}); "
                "it is left out of the pages and replaced if a stack needs it",
                file=sys.stderr,
            )
            continue
        found.append(wheel)
    return found


class _Unusable(Exception):
    """A wheel that cannot be served (its name, its METADATA): the message says why."""


def _read(path: Path, origin: str) -> DependencyWheel:
    """A dependency wheel read through the bounded reader: its name and METADATA must agree (pip skips a file
    whose METADATA names another project or version)."""
    try:
        dist, version, _ = wheel_identity.parse_name(path.name)
    except ValueError as error:
        raise _Unusable(str(error)) from None
    project = pip_rules.normalised(dist)
    try:
        metadata = wheel_identity.read_dist_info(path, ("METADATA",)).get("METADATA")
    except ValueError as error:  # not one .dist-info folder
        raise _Unusable(str(error)) from None
    if metadata is None:
        raise _Unusable(f"{path.name} holds no METADATA")
    problems = pip_rules.name_problems(project, dist, header(metadata, "Name"))
    problems += pip_rules.version_problems(version)
    if header(metadata, "Version") != version:
        problems.append(f"its METADATA says Version {header(metadata, 'Version')}, its file name {version}")
    if problems:
        raise _Unusable(f"{path.name}: {problems[0]}")
    sha, size = input_files.sha256_file(path, input_files.WHEEL)
    return DependencyWheel(path.name, project, version, sha, size, metadata, path, origin)


def resolve(index: Path, needs: list[Need], source: Source, work: Path) -> Resolution:
    """Every need (and what the wheels it brings require) met by one wheel; DependencyUnavailable (exit 3)
    for the first that cannot be, before anything is written."""
    known = stored(index)
    held = {w.sha256 for w in known}
    served: dict[str, dict[str, DependencyWheel]] = {}
    why: dict[str, str] = {}
    queue, seen = list(needs), set()
    while queue:
        need = queue.pop(0)
        if (need.requirement, need.stack, need.python, need.extras) in seen:
            continue
        seen.add((need.requirement, need.stack, need.python, need.extras))
        requirement = _requirement(need)
        if requirement is None:
            continue
        wheel = _best(requirement, need, known)
        if wheel is None:
            wheel = _supplied(requirement, need, source, work)
            known.append(wheel)
            why.setdefault(wheel.name, f"{need.requirement} of {need.wanted_by}")
        served.setdefault(need.stack, {})[wheel.name] = wheel
        extras = tuple(sorted(requirement.extras))
        queue += [Need(r, need.stack, wheel.name, need.python, extras) for r in wheel.requires]
    added = {w.sha256: w for per in served.values() for w in per.values() if w.sha256 not in held}
    return Resolution(
        {stack: tuple(sorted(per.values(), key=lambda w: w.name)) for stack, per in served.items()},
        tuple(sorted(added.values(), key=lambda w: w.name)),
        why,
    )


def _requirement(need: Need) -> Requirement | None:
    """The requirement, or None when it is torch's or its markers leave it out for this Python on Linux."""
    try:
        requirement = Requirement(need.requirement)
    except InvalidRequirement as error:
        raise UsageError(
            f"build.py index: {printable(need.wanted_by)} requires {printable(need.requirement)!r}, not a PEP "
            f"508 requirement ({printable(error)}); rebuild it with a valid install_requires"
        ) from None
    if pip_rules.normalised(requirement.name) in (NEVER_SERVED, *SERVED_ALREADY):
        return None
    if requirement.marker is not None:
        environment: dict[str, str] = {
            **{k: str(v) for k, v in default_environment().items()},
            "sys_platform": "linux",
            "platform_system": "Linux",
            "os_name": "posix",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            **(
                {"python_version": need.python, "python_full_version": f"{need.python}.0"}
                if need.python
                else {}
            ),
        }
        if not any(requirement.marker.evaluate({**environment, "extra": e}) for e in ("", *need.extras)):
            return None
    return requirement


def _fits(wheel: DependencyWheel, requirement: Requirement, python: str | None) -> bool:
    if wheel.project != pip_rules.normalised(requirement.name):
        return False
    try:
        if not requirement.specifier.contains(Version(wheel.version), prereleases=None):
            return False
        wants = wheel.requires_python
        return python is None or not wants or SpecifierSet(wants).contains(python, prereleases=True)
    except (InvalidVersion, ValueError):  # an unreadable Requires-Python: pip would skip the file too
        return False


def _best(requirement: Requirement, need: Need, wheels: list[DependencyWheel]) -> DependencyWheel | None:
    fitting = [w for w in wheels if _fits(w, requirement, need.python)]
    return max(fitting, key=lambda w: (Version(w.version), w.name), default=None)


def _supplied(requirement: Requirement, need: Need, source: Source, work: Path) -> DependencyWheel:
    """The newest fitting wheel of the folders, else pip download's; DependencyUnavailable when neither."""
    project = pip_rules.normalised(requirement.name)
    candidates: list[tuple[Version, Path]] = []
    other: list[tuple[Version, Path]] = []
    for folder in source.folders:
        for path in sorted(p for p in folder.glob("*.whl") if p.is_file()):
            try:
                dist, version, _ = wheel_identity.parse_name(path.name)
                Version(version)
            except (ValueError, InvalidVersion):
                continue
            if pip_rules.normalised(dist) != project:
                continue
            (candidates if is_pure(path.name) else other).append((Version(version), path))
    for _, path in sorted(candidates, reverse=True):
        try:
            wheel = _read(path, str(path.parent))
        except (input_files.InputFileError, _Unusable) as error:
            raise UsageError(
                f"build.py index: {FLAG} {printable(path)}: {printable(error)}; replace it with the wheel pip "
                f"download gives for {printable(need.requirement)}"
            ) from None
        if _fits(wheel, requirement, need.python):
            return wheel
    looked = _where(source, other)
    if not source.download:
        raise DependencyUnavailable(
            f"build.py index: no wheel for {printable(need.requirement)}, which {printable(need.wanted_by)} "
            f"({need.stack}) requires: {looked}, and --no-download; pass {FLAG} holding a py3-none-any wheel of "
            "it (pip download --only-binary=:all: --no-deps REQUIREMENT), or leave out --no-download"
        )
    return _download(requirement, need, work, looked)


def _where(source: Source, other: list[tuple[Version, Path]]) -> str:
    if other:
        return (
            f"{FLAG} holds only {', '.join(printable(p.name) for _, p in other[:3])}, not pure Python "
            "(py3-none-any), which is all the index serves"
        )
    if source.folders:
        return f"none fits in {', '.join(printable(f) for f in source.folders)}"
    return f"no {FLAG} given"


def _download(requirement: Requirement, need: Need, work: Path, looked: str) -> DependencyWheel:
    work.mkdir(parents=True, exist_ok=True)
    dest = Path(tempfile.mkdtemp(prefix="dependency-", dir=work))
    spec = requirement.name + (f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else "")
    argv = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps", "--quiet"]
    argv += ["--disable-pip-version-check", "--dest", str(dest)]
    argv += [*(["--python-version", need.python] if need.python else []), f"{spec}{requirement.specifier}"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
        said = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        failed = None if done.returncode == 0 else f"exit {done.returncode}: {said}"
    except (OSError, subprocess.TimeoutExpired) as error:
        failed = str(error)
    got = sorted(dest.glob("*.whl"))
    if failed or len(got) != 1:
        raise DependencyUnavailable(
            f"build.py index: no wheel for {printable(need.requirement)}, which {printable(need.wanted_by)} "
            f"({need.stack}) requires: {looked}, and pip download failed ({printable(failed or 'no wheel')}); "
            f"pass {FLAG} holding a py3-none-any wheel of it (offline: download it where PyPI is reachable)"
        )
    if not is_pure(got[0].name):
        raise DependencyUnavailable(
            f"build.py index: {printable(need.requirement)}, which {printable(need.wanted_by)} requires, has no "
            f"pure-Python wheel: pip download gave {printable(got[0].name)}, and the index serves py3-none-any "
            f"wheels only (one file for every Python and platform); pass {FLAG} holding a py3-none-any wheel "
            "of it"
        )
    try:
        return _read(got[0], "pip download")
    except (input_files.InputFileError, _Unusable) as error:
        raise DependencyUnavailable(
            f"build.py index: pip download of {printable(need.requirement)} gave an unusable wheel "
            f"({printable(error)}); pass {FLAG} holding a py3-none-any wheel of it"
        ) from None
