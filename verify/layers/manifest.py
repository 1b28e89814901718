"""Find, load and validate the build manifest that toolchain's Apex builder writes next to the wheel.

Lookup order: --manifest PATH, else $APEX_BUILD_MANIFEST, else the copy in the installed apex wheel's
.dist-info (the project's wheels carry one), else /opt/apex/build-manifest.json (images).
A path the user named that is missing or malformed is a usage error (exit 2): the run would otherwise
check against the wrong expectations. The default image path being absent just means "no manifest".
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from verify.domain import layout
from verify.runtime import field_types as ft
from verify.runtime import input_files

MANIFEST_VERSION = "1"
ENV_VAR = "APEX_BUILD_MANIFEST"
DEFAULT_PATH = Path(layout.IMAGE.manifest)
DIST_INFO_NAME = (
    layout.MANIFEST_NAME
)  # the copy inside a wheel's .dist-info (toolchain/builder/wheel_identity.py)
INSTALLED_ORIGIN = "the installed wheel"


class ManifestError(Exception):
    """A one-line, user-facing reason why the manifest cannot be used (exit 2)."""


def locate(cli_path: str | None) -> tuple[Path | None, str]:
    """The manifest path to use and where it came from ("--manifest", "$APEX_BUILD_MANIFEST", "the installed
    wheel", "default")."""
    if cli_path:
        return Path(cli_path), "--manifest"
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env), f"${ENV_VAR}"
    installed = installed_manifest()
    if installed is not None:
        return installed, INSTALLED_ORIGIN
    if DEFAULT_PATH.is_file():
        return DEFAULT_PATH, "default"
    return None, "none"


def installed_manifest() -> Path | None:
    """The build manifest in the installed apex distribution's .dist-info (the project's wheels carry it
    there, toolchain/builder/wheel_identity.py), if this Python has one."""
    try:
        dist = importlib.metadata.distribution("apex")
        files = dist.files or []
    except Exception:  # no apex, or corrupt metadata elsewhere: no manifest, never a crash
        return None
    for file in files:
        if file.name == DIST_INFO_NAME and file.parent.name.endswith(".dist-info"):
            path = Path(str(dist.locate_file(file)))
            return path if path.is_file() else None
    return None


class _Part:
    """A part of the manifest: the fields its readers use, typed; every key kept as the builder wrote it
    (`data`, in its place), so to_json(from_json(x)) == x. `updated` gives the part with keys changed."""

    _TYPED: tuple[str, ...] = ()
    data: Mapping[str, object]

    def __post_init__(self) -> None:  # a part made from its fields holds them in `data` too: one equality
        object.__setattr__(self, "data", self.to_json())

    def to_json(self) -> dict[str, object]:
        typed = {
            name: getattr(self, name)
            for name in self._TYPED
            if name in self.data or getattr(self, name) is not None
        }
        return {**self.data, **typed}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Any:
        make: Any = cls  # a subclass's dataclass constructor
        return make(**{k: data[k] for k in cls._TYPED if k in data}, data=dict(data))

    def updated(self, **changes: Any) -> Any:
        return self.from_json({**self.to_json(), **changes})


@dataclasses.dataclass(frozen=True)
class Versions(_Part):
    """What the build ran with (toolchain/builder/build_tools.py); a newer builder's keys (nvcc_source,
    cuda_wheels) ride along in `data`."""

    torch: str | None = None
    torch_cuda: str | None = None
    nvcc: str | None = None
    gcc: str | None = None
    python: str | None = None
    cxx11_abi: bool | None = None
    data: Mapping[str, object] = dataclasses.field(default_factory=dict, repr=False)

    _TYPED = ("torch", "torch_cuda", "nvcc", "gcc", "python", "cxx11_abi")


@dataclasses.dataclass(frozen=True)
class Parallelism(_Part):
    """How the build was sized (toolchain/builder/parallelism.py's Plan, with its unit schedule)."""

    max_jobs: int | None = None
    nvcc_threads: int | None = None
    apex_parallel_build: int | None = None
    reason: str | None = None
    data: Mapping[str, object] = dataclasses.field(default_factory=dict, repr=False)

    _TYPED = ("max_jobs", "nvcc_threads", "apex_parallel_build", "reason")


@dataclasses.dataclass(frozen=True)
class BuildStats(_Part):
    """The build's own record: when, how long, how much memory, which wheel (its sha256: None in the copy
    inside the wheel, which cannot hold its own hash), and the compile timing."""

    started_at: str | None = None
    wall_s: float | None = None
    peak_rss_mb: float | None = None
    host: str | None = None
    cores: int | None = None
    wheel: str | None = None
    wheel_sha256: str | None = None
    wheel_as_built: str | None = None
    timing: Mapping[str, object] | None = None
    data: Mapping[str, object] = dataclasses.field(default_factory=dict, repr=False)

    _TYPED = (
        "started_at",
        "wall_s",
        "peak_rss_mb",
        "host",
        "cores",
        "wheel",
        "wheel_sha256",
        "wheel_as_built",
        "timing",
    )


@dataclasses.dataclass(frozen=True)
class BuildManifest:
    """The build manifest: written by toolchain's apex builder (to_json), read here (from_json after SHAPE).

    Its parts are typed (Versions, Parallelism, BuildStats); fields a reader does not use stay as JSON
    values (flag style, inputs); keys this version does not know (a newer builder's) are not read.
    """

    # in the order the builder writes them
    apex: Mapping[str, str | None] = dataclasses.field(default_factory=dict)  # commit, ref, source, version
    flags: Mapping[str, str] = dataclasses.field(default_factory=dict)
    expected_modules: tuple[str, ...] = ()
    built_modules: tuple[str, ...] = ()
    absent_at_ref: tuple[str, ...] = ()  # the flags' modules this ref's setup.py does not have
    flag_style: Mapping[str, object] | None = None
    skipped_extensions: tuple[Mapping[str, str], ...] = ()  # {"module", "warning"} from the build log
    arch_list: str | None = None
    versions: Versions = Versions()
    parallelism: Parallelism | None = None
    build: BuildStats = BuildStats()
    cell: str | None = None
    inputs: Mapping[str, object] | None = None
    wheel_identity: Mapping[str, str] | None = (
        None  # version, local, torch_requirement, stack (the wheel's name)
    )

    @property
    def commit(self) -> str | None:
        return self.apex.get("commit")

    @property
    def built_for_torch(self) -> str | None:
        return self.versions.torch

    def to_json(self) -> dict[str, object]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data: dict[str, object] = {"manifest_version": MANIFEST_VERSION}
        for name, value in fields.items():
            data[name] = (
                list(value)
                if isinstance(value, tuple)
                else value.to_json()
                if isinstance(value, _Part)
                else value
            )
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BuildManifest:
        """From a dict that passed SHAPE (load() checks it first)."""
        known = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in data.items() if k in known and v is not None}
        for name in ("expected_modules", "built_modules", "absent_at_ref", "skipped_extensions"):
            if name in given:
                given[name] = tuple(given[name])
        for name, part in (("versions", Versions), ("parallelism", Parallelism), ("build", BuildStats)):
            if name in given:
                given[name] = part.from_json(given[name])
        return cls(**given)


_TEXT = ft.Nullable(ft.STR)
# What the apex builder writes (toolchain/builder/apex_builder.py), field by field; keys not listed (a newer
# builder's) are allowed, within the checker's depth and size limits.
SHAPE = ft.Record(
    {
        "manifest_version": ft.STR,
        "apex": ft.Record({"commit": _TEXT, "ref": _TEXT, "source": _TEXT, "version": _TEXT}),
        "flags": ft.MapOf(ft.STR),
        "expected_modules": ft.ListOf(ft.STR),
        "built_modules": ft.ListOf(ft.STR),
        "skipped_extensions": ft.ListOf(ft.Record({"module": ft.STR, "warning": ft.STR})),
        "arch_list": _TEXT,
        "versions": ft.Record(
            {
                "torch": _TEXT,
                "torch_cuda": _TEXT,
                "nvcc": _TEXT,
                "gcc": _TEXT,
                "python": _TEXT,
                "cxx11_abi": ft.Nullable(ft.BOOL),
            }
        ),
        "parallelism": ft.Record(
            {"max_jobs": ft.INT, "nvcc_threads": ft.INT, "apex_parallel_build": ft.INT, "reason": ft.STR}
        ),
        "build": ft.Record(
            {
                "started_at": _TEXT,
                "wall_s": ft.Nullable(ft.FLOAT),
                "peak_rss_mb": ft.Nullable(ft.FLOAT),
                "host": _TEXT,
                "cores": ft.Nullable(ft.INT),
                "wheel": _TEXT,
                "wheel_sha256": _TEXT,
                "wheel_as_built": _TEXT,
                "timing": ft.Nullable(ft.MapOf(ft.ANY)),
            }
        ),
        "cell": _TEXT,
        "inputs": ft.Record(
            {"base_image": _TEXT, "base_image_digest": _TEXT, "torch_wheel_sha256": ft.MapOf(ft.STR)}
        ),
        "wheel_identity": ft.Nullable(
            ft.Record({"version": ft.STR, "local": ft.STR, "torch_requirement": ft.STR, "stack": ft.STR})
        ),
    },
    required=("manifest_version", "expected_modules"),
)


def _invalid(path: Path, problem: str) -> ManifestError:
    return ManifestError(
        f"build manifest {path}: {problem}; pass the build-manifest.json that toolchain's apex builder wrote"
        f" (manifest_version {MANIFEST_VERSION}) or drop --manifest / ${ENV_VAR}"
    )


def load(path: Path, origin: str) -> dict[str, object]:
    """Read (bounded: a regular file, at most input_files.MANIFEST's size) and type-check every field of
    a manifest; raises ManifestError with a one-line message naming each wrong field. The dict as read
    (the report quotes it); BuildManifest.from_json of it is what the layers read."""
    try:
        data = input_files.read_json(path, input_files.MANIFEST)
    except input_files.InputFileError as exc:
        if exc.reason == "missing":
            raise ManifestError(
                f"build manifest {path} (from {origin}) does not exist; fix the path or unset it"
            ) from None
        if exc.reason == "bad_json":
            raise ManifestError(
                f"build manifest {path} {exc.problem}; regenerate it with the apex builder"
            ) from None
        raise ManifestError(
            f"build manifest {path} (from {origin}) is unreadable: it {exc.problem}; {exc.fix}"
        ) from None
    if not isinstance(data, dict):
        raise _invalid(path, "top level is not a JSON object")
    version = data.get("manifest_version")
    if version != MANIFEST_VERSION:  # another version may have another shape: say which, check nothing else
        raise _invalid(path, f"manifest_version is {version!r:.40}, expected {MANIFEST_VERSION!r}")
    problems = ft.check(data, SHAPE, "manifest")
    if problems:
        raise _invalid(path, ft.summary(problems))
    return data


def _minor_and_local(version: str) -> tuple[str, str]:
    release, _, local = version.partition("+")
    return ".".join(release.split(".")[:2]), local


def torch_mismatch(
    manifest: BuildManifest, running_torch: str | None, origin: str | None = None
) -> str | None:
    """A one-line message when the manifest was written for another torch (i.e. another image). The installed
    wheel's own manifest promises what its `torch==X.Y.*` pin does: another patch release is no mismatch,
    another minor or another CUDA build (pip ignores the local label) is."""
    built_for = manifest.built_for_torch
    if not built_for or not running_torch or built_for == running_torch:
        return None
    if origin == INSTALLED_ORIGIN:
        if _minor_and_local(built_for) == _minor_and_local(running_torch):
            return None
        return (
            f"the installed apex wheel was built for torch {built_for}, this Python runs torch {running_torch}; "
            "install the wheel of this torch's stack (INDEX/torchX.Y-cuXYZ/simple) or rebuild Apex against it"
        )
    return (
        f"build manifest is from another image: Apex was built for torch {built_for}, this Python runs torch"
        f" {running_torch}; pass the manifest of this image (--manifest) or rebuild Apex against this torch"
    )
