"""Whether a built wheel may go into the index: the checks `build.py index` makes before it publishes one.

A wheel is refused (every reason at once, each naming what to do) when it is not the project's builder's
stamped wheel (no manifest or no stack identity in its .dist-info), when its name, METADATA or modules
disagree with its manifest, when a manifest beside it names another sha256, when its static gate did not
PASS (or never ran), when one of its extension modules links a shared library beyond glibc, the GCC
runtime and what torch's own wheels provide (toolchain/data/wheel_libraries.toml), or when its platform tag
claims an older glibc than its modules need (toolchain/index/portability.py). A wheel tagged linux_x86_64
(what setup.py writes) is published retagged manylinux_2_X for the glibc its modules really need.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import sys
import tempfile
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the build extra's backport (toolchain/index/ may not import spec's toml_loader)
    import tomli as tomllib

from toolchain.builder import build_outputs, wheel_identity
from toolchain.builder.provenance import sha256_of
from toolchain.index import dependencies, pages, pip_rules, portability
from verify.layers import fatbin
from verify.layers import manifest as manifest_mod
from verify.runtime import field_types as ft
from verify.runtime import input_files

LIBRARIES = Path(__file__).resolve().parents[1] / "data" / "wheel_libraries.toml"
REBUILD = "rebuild it with `build.py wheel --install` (or `build.py image`), which stamps and gates it"


@dataclasses.dataclass(frozen=True)
class CheckedWheel:
    """A wheel that passed every check, with what the index writes about it."""

    path: Path
    name: str
    sha256: str
    version: str
    stack: str  # torch2.11-cu130
    metadata: bytes  # the wheel's METADATA (PEP 658's .metadata file)
    manifest: dict[str, Any]  # the manifest as published: the wheel's own, with its final sha256
    verify_json: bytes
    verify_md: bytes | None
    libraries: dict[str, list[str]]  # module file -> its DT_NEEDED entries (what the check found)
    requires_python: str | None
    portability: portability.Portability | None = None  # the glibc its modules need, the tag that follows
    retagged_from: dict[str, str] | None = None  # the wheel as built ({"wheel", "sha256"}) when retagged

    @property
    def built_at(self) -> str:
        return str(self.manifest.get("build", {}).get("started_at") or "")

    @property
    def requires(self) -> tuple[str, ...]:
        """Its METADATA's Requires-Dist lines (torch's pin among them)."""
        return dependencies.requires_dist(self.metadata)

    def check_record(self) -> dict[str, Any]:
        return {
            "wheel": self.name,
            "sha256": self.sha256,
            "version": self.version,
            "stack": self.stack,
            "needed_libraries": self.libraries,
            "allowed_from": str(LIBRARIES.name),
            "gate": input_files.decode_json(self.verify_json, self.name, input_files.VERIFY_REPORT).get(
                "verdict"
            ),
            **(self.portability.to_json() if self.portability else {}),
            "retagged_from": self.retagged_from,
        }


@dataclasses.dataclass(frozen=True)
class Refusal:
    wheel: Path
    reasons: tuple[str, ...]

    def message(self) -> str:
        return f"{self.wheel}: " + "; ".join(self.reasons)


def allowed_libraries(
    path: Path = LIBRARIES, parts: tuple[str, ...] = ("system", "driver", "torch")
) -> tuple[str, ...]:
    data = tomllib.loads(input_files.read_shipped_text(path))
    return tuple(name for part in parts for name in data[part]["names"])


def excluded_libraries(path: Path = LIBRARIES) -> tuple[str, ...]:
    """The libraries whose symbol versions do not decide the manylinux tag: torch's wheels and the driver
    bring them (the anchors' auditwheel runs exclude them the same way)."""
    return allowed_libraries(path, ("driver", "torch"))


def check(
    wheel: Path, allowed: tuple[str, ...] | None = None, work: Path | None = None
) -> CheckedWheel | Refusal:
    """Every check on one wheel file; a Refusal lists every reason found. A linux_x86_64 wheel that passes is
    retagged into `work` (a new temporary folder when None, left to the caller)."""
    allowed = allowed if allowed is not None else allowed_libraries()
    try:
        return _check(wheel, allowed, work)
    except _Refused as refused:
        return Refusal(wheel, tuple(refused.reasons))
    except input_files.InputFileError as error:  # the wheel, or a member of it, the bounded reader refused
        return Refusal(wheel, (f"not a usable wheel ({error.problem})",))


class _Refused(Exception):
    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons


def _check(wheel: Path, allowed: tuple[str, ...], work: Path | None) -> CheckedWheel:
    try:
        dist, file_version, tags = wheel_identity.parse_name(wheel.name)
        files = wheel_identity.read_dist_info(wheel)
    except (ValueError, OSError) as error:
        raise _Refused([f"not a readable wheel ({error})"]) from None
    _pip_would_take(wheel, dist, file_version, files.get("METADATA", b""))
    if wheel_identity.MANIFEST_FILE not in files:
        raise _Refused(
            [
                f"its .dist-info holds no {wheel_identity.MANIFEST_FILE}: setup.py's plain wheel, not one "
                f"this project's builder stamped; {REBUILD}"
            ]
        )
    manifest = _manifest(files[wheel_identity.MANIFEST_FILE])
    reasons: list[str] = []
    ident = manifest.get("wheel_identity") or {}
    if not ident:
        raise _Refused(
            [f"its manifest has no wheel_identity (built before wheels named their stack); {REBUILD}"]
        )
    if not wheel_identity.is_stack_name(ident.get("stack")):
        raise _Refused(
            [
                f"its manifest's stack {ident.get('stack')!r} is not a stack name (torch2.11-cu130, ASCII); {REBUILD}"
            ]
        )
    reasons += _identity_problems(wheel.name, file_version, ident, manifest, files.get("METADATA", b""))
    reasons += _module_problems(wheel, manifest)
    sha = sha256_of(wheel)
    reasons += _beside_problems(wheel, sha, manifest)
    verify_json = files.get("verify-static.json")
    reasons += _gate_problems(verify_json, file_version)
    libraries, foreign = _libraries(wheel, allowed)
    if foreign:
        named = "; ".join(f"{m} needs {', '.join(libs)}" for m, libs in foreign.items())
        reasons.append(
            "its extension modules link libraries that neither glibc, the GCC runtime nor torch's wheels "
            f"provide: {named}; build "
            f"against torch's own CUDA wheels (no system CUDA library on the link line), or add the "
            f"library to {LIBRARIES.name} with its source if torch's wheels do bring it"
        )
    found = portability.wheel_portability(wheel, excluded_libraries())
    problem, platform = _platform_problem(wheel.name, tags.rsplit("-", 1)[-1], found)
    reasons += [problem] if problem else []
    if reasons:
        raise _Refused(reasons)
    retagged_from = None
    if platform:  # linux_x86_64: published under the manylinux tag its modules satisfy
        folder = Path(tempfile.mkdtemp(prefix="apex-index-retag-", dir=work))
        as_built, as_built_sha = wheel, sha
        wheel = portability.retag(wheel, folder, platform, file_version, str(ident["torch_requirement"]))
        sha, files = sha256_of(wheel), wheel_identity.read_dist_info(wheel)
        retagged_from = {"wheel": as_built.name, "sha256": as_built_sha}
    build = {**manifest.get("build", {}), "wheel": wheel.name, "wheel_sha256": sha}
    return CheckedWheel(
        path=wheel,
        name=wheel.name,
        sha256=sha,
        version=file_version,
        stack=ident["stack"],
        metadata=files["METADATA"],
        manifest={**manifest, "build": build},
        verify_json=verify_json or b"",
        verify_md=files.get("verify-static.md"),
        libraries=libraries,
        requires_python=_header(files["METADATA"], "Requires-Python"),
        portability=found,
        retagged_from=retagged_from,
    )


def _pip_would_take(wheel: Path, dist: str, file_version: str, metadata: bytes) -> None:
    """The rules pip applies before it lists or installs a file (toolchain/index/pip_rules.py): refused with
    every problem at once, before any other check reads the wheel's members as a build's."""
    problems = pip_rules.name_problems(pages.PROJECT, dist, _header(metadata, "Name"))
    problems += pip_rules.version_problems(file_version)
    meta_version = _header(metadata, "Version")
    if meta_version is not None and meta_version != file_version:
        problems += pip_rules.version_problems(meta_version)
    with input_files.open_zip(wheel) as archive:
        problems += pip_rules.member_problems(archive, wheel_identity.dist_info_dir(archive))
    if problems:
        raise _Refused(problems)


def _platform_problem(
    name: str, platform: str, found: portability.Portability
) -> tuple[str | None, str | None]:
    """(why the platform tag is refused, or None; the manylinux tag to publish a linux_* wheel under, or None)."""
    claims = portability.claimed(platform)
    if found.tag is None:
        return (
            f"no manylinux tag fits its modules ({'; '.join(found.problems)}); highest versions found: "
            f"{found.found()}; {portability.FIX}",
            None,
        )
    wrong_arch = [c for c in claims if c and c[1] != found.arch]
    too_old = [c for c in claims if c and found.glibc and c[0] < found.glibc]
    if (
        wrong_arch
        or too_old
        or any(part.startswith("linux_") and part != f"linux_{found.arch}" for part in platform.split("."))
    ):
        return (
            f"its platform tag {platform} claims what its modules do not satisfy: they are {found.arch} code "
            f"that needs glibc {found.glibc_text} ({found.found()}), so pip would install it where it fails "
            f"at import; {portability.FIX}, or tag it linux_{found.arch} and `build.py index` publishes it as "
            f"{found.tag}",
            None,
        )
    if all(c is None for c in claims):
        return None, found.tag
    return None, None  # an honest manylinux tag: published as it is


def _manifest(raw: bytes) -> dict[str, Any]:
    try:
        data = input_files.decode_json(raw, wheel_identity.MANIFEST_FILE, input_files.MANIFEST)
    except input_files.InputFileError as error:
        raise _Refused([f"its {error.path} {error.problem}; {REBUILD}"]) from None
    if not isinstance(data, dict) or data.get("manifest_version") != manifest_mod.MANIFEST_VERSION:
        raise _Refused(
            [
                f"its {wheel_identity.MANIFEST_FILE} is not a manifest_version "
                f"{manifest_mod.MANIFEST_VERSION} build manifest; {REBUILD}"
            ]
        )
    problems = ft.check(data, manifest_mod.SHAPE, "manifest")
    if problems:
        raise _Refused(
            [f"its {wheel_identity.MANIFEST_FILE} is malformed ({ft.summary(problems)}); {REBUILD}"]
        )
    return data


def _header(metadata: bytes, name: str) -> str | None:
    for line in metadata.decode("utf-8", "replace").split("\n"):
        if not line:
            break
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


def _identity_problems(
    name: str, file_version: str, ident: dict, manifest: dict, metadata: bytes
) -> list[str]:
    problems = []
    versions, apex = manifest.get("versions") or {}, manifest.get("apex") or {}
    try:
        expected = wheel_identity.identity(
            apex.get("version") or "0.1",
            apex.get("commit"),
            apex.get("ref"),
            str(versions.get("torch") or ""),
            versions.get("torch_cuda"),
        )
    except ValueError as error:
        return [f"its manifest cannot name a stack ({error}); {REBUILD}"]
    if expected.to_json() != dict(ident):
        problems.append(
            f"its manifest's wheel_identity {ident} is not what its versions say ({expected.to_json()})"
        )
    if file_version != expected.version:
        problems.append(
            f"its file name says version {file_version}, its manifest {expected.version} (torch "
            f"{versions.get('torch')}, CUDA {versions.get('torch_cuda')}): a renamed wheel"
        )
    if (manifest.get("build") or {}).get("wheel") != name:
        problems.append(
            f"its manifest names the wheel {(manifest.get('build') or {}).get('wheel')!r}, not {name!r}"
        )
    meta_version = _header(metadata, "Version")
    if meta_version != file_version:
        problems.append(f"its METADATA says Version {meta_version}, its file name {file_version}")
    pins = [
        line.partition(":")[2].strip()
        for line in metadata.decode("utf-8", "replace").split("\n")
        if line.lower().startswith("requires-dist:") and line.partition(":")[2].strip().startswith("torch")
    ]
    if pins != [expected.torch_requirement]:
        problems.append(
            f"its METADATA requires {pins or 'no torch'}, not exactly {expected.torch_requirement}: pip "
            "would install it on another torch minor"
        )
    return problems


def _module_problems(wheel: Path, manifest: dict) -> list[str]:
    built = build_outputs.extension_modules(wheel)
    problems = []
    if sorted(built) != sorted(manifest.get("built_modules") or []):
        problems.append(
            f"it holds the modules {built}, its manifest lists {sorted(manifest.get('built_modules') or [])}"
        )
    if not built or not manifest.get("expected_modules"):
        problems.append(
            "it holds no compiled extension its build expected (a Python-only build: FusedAdam and the "
            "other fused modules would fail at first use); build it with the core flags "
            "(APEX_CPP_EXT, APEX_CUDA_EXT)"
        )
    missing = sorted(set(manifest.get("expected_modules") or []) - set(built))
    if missing:
        problems.append(
            f"expected modules missing from it: {', '.join(missing)} (the silent Python-only fallback)"
        )
    return problems


def _beside_problems(wheel: Path, sha: str, inside: dict) -> list[str]:
    """A build-manifest.json in the wheel's folder that names this wheel must agree with it and the copy inside."""
    beside = wheel.parent / build_outputs.MANIFEST_NAME
    if not beside.is_symlink() and not beside.exists():
        return []  # none beside it: the one inside is the manifest
    try:  # the bounded reader: a FIFO, a device, a huge or cut file beside the wheel is named, never skipped
        data = input_files.read_json(beside, input_files.MANIFEST)
    except input_files.InputFileError as error:
        return [f"the manifest beside it is unusable: {error}"]
    if not isinstance(data, dict) or not isinstance(data.get("build"), dict):
        return [f'the manifest beside it ({beside}) is not a build manifest (no "build" object); {REBUILD}']
    if data["build"].get("wheel") != wheel.name:
        return []  # another build's manifest in the same folder: the one inside is this wheel's
    problems = []
    if data["build"].get("wheel_sha256") != sha:
        problems.append(
            f"the manifest beside it ({beside}) records sha256 {data['build'].get('wheel_sha256')}, the "
            f"file has {sha}: the wheel was changed or replaced after its build"
        )
    strip = lambda m: {**m, "build": {k: v for k, v in (m.get("build") or {}).items() if k != "wheel_sha256"}}  # noqa: E731
    if strip(data) != strip(inside):
        keys = sorted(k for k in set(data) | set(inside) if strip(data).get(k) != strip(inside).get(k))
        problems.append(f"the manifest beside it ({beside}) and the one inside disagree on {', '.join(keys)}")
    return problems


def _gate_problems(raw: bytes | None, version: str) -> list[str]:
    if raw is None:
        return [
            "its static gate never ran (no verify-static.json in its .dist-info): built without --install or "
            f"with --no-gate; {REBUILD}"
        ]
    try:
        report = input_files.decode_json(raw, "verify-static.json", input_files.VERIFY_REPORT)
    except input_files.InputFileError as error:
        return [f"its verify-static.json {error.problem}; {REBUILD}"]
    if not isinstance(report, dict):
        return ["its verify-static.json is not a verify report; " + REBUILD]
    problems = []
    if report.get("verdict") != "PASS" or report.get("exit_code") != 0:
        failed = [
            f"{c.get('id')}"
            for c in report.get("checks") or []
            if isinstance(c, dict) and c.get("status") == "FAIL"
        ]
        problems.append(
            f"its static gate failed (verdict {report.get('verdict')}, exit {report.get('exit_code')}"
            f"{': FAIL ' + ', '.join(failed[:8]) if failed else ''}); fix the build and rebuild"
        )
    dist = (report.get("apex") or {}).get("distribution") or {}
    if dist.get("version") != version:
        problems.append(f"its verify report checked apex {dist.get('version')}, not this wheel's {version}")
    return problems


def _libraries(wheel: Path, allowed: tuple[str, ...]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(module file -> DT_NEEDED, module file -> the entries not allowed); a library the wheel itself holds is allowed."""
    found: dict[str, list[str]] = {}
    own: frozenset[str] = frozenset()  # a wheel without shared objects holds none
    for member, data, held in portability.shared_objects(wheel):
        own = held
        try:
            found[member] = fatbin.needed_libraries(data, member)
        except fatbin.FatbinError as error:
            found[member] = [f"unreadable ELF: {error}"]
    foreign = {
        m: [lib for lib in libs if lib not in own and not any(fnmatch.fnmatchcase(lib, p) for p in allowed)]
        for m, libs in found.items()
    }
    return found, {m: libs for m, libs in foreign.items() if libs}
