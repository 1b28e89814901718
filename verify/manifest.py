"""Find, load and validate the build manifest that toolchain's Apex builder writes next to the wheel.

Lookup order: --manifest PATH, else $APEX_BUILD_MANIFEST, else /opt/apex/build-manifest.json (images).
A path the user named that is missing or malformed is a usage error (exit 2): the run would otherwise
check against the wrong expectations. The default image path being absent just means "no manifest".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from verify import field_types as ft
from verify import input_files

MANIFEST_VERSION = "1"
ENV_VAR = "APEX_BUILD_MANIFEST"
DEFAULT_PATH = Path("/opt/apex/build-manifest.json")


class ManifestError(Exception):
    """A one-line, user-facing reason why the manifest cannot be used (exit 2)."""


def locate(cli_path: str | None) -> tuple[Path | None, str]:
    """The manifest path to use and where it came from ("--manifest", "$APEX_BUILD_MANIFEST", "default")."""
    if cli_path:
        return Path(cli_path), "--manifest"
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env), f"${ENV_VAR}"
    if DEFAULT_PATH.is_file():
        return DEFAULT_PATH, "default"
    return None, "none"


_TEXT = ft.Nullable(ft.STR)
# What the apex builder writes (toolchain/apex_builder.py), field by field; keys not listed (a newer
# builder's) are allowed, within the checker's depth and size limits.
SHAPE = ft.Record({
    "manifest_version": ft.STR,
    "apex": ft.Record({"commit": _TEXT, "ref": _TEXT, "source": _TEXT, "version": _TEXT}),
    "flags": ft.MapOf(ft.STR),
    "expected_modules": ft.ListOf(ft.STR),
    "built_modules": ft.ListOf(ft.STR),
    "skipped_extensions": ft.ListOf(ft.Record({"module": ft.STR, "warning": ft.STR})),
    "arch_list": _TEXT,
    "versions": ft.Record({"torch": _TEXT, "torch_cuda": _TEXT, "nvcc": _TEXT, "gcc": _TEXT, "python": _TEXT,
                           "cxx11_abi": ft.Nullable(ft.BOOL)}),
    "parallelism": ft.Record({"max_jobs": ft.INT, "nvcc_threads": ft.INT, "apex_parallel_build": ft.INT,
                              "reason": ft.STR}),
    "build": ft.MapOf(ft.ANY),
    "cell": _TEXT,
    "inputs": ft.Record({"base_image": _TEXT, "base_image_digest": _TEXT, "torch_wheel_sha256": ft.MapOf(ft.STR)}),
}, required=("manifest_version", "expected_modules"))


def _invalid(path: Path, problem: str) -> ManifestError:
    return ManifestError(
        f"build manifest {path}: {problem}; pass the build-manifest.json that toolchain's apex builder wrote"
        f" (manifest_version {MANIFEST_VERSION}) or drop --manifest / ${ENV_VAR}"
    )


def load(path: Path, origin: str) -> dict[str, Any]:
    """Read (bounded: a regular file, at most input_files.MANIFEST's size) and type-check every field of
    a manifest; raises ManifestError with a one-line message naming each wrong field."""
    try:
        data = input_files.read_json(path, input_files.MANIFEST)
    except input_files.InputFileError as exc:
        if exc.reason == "missing":
            raise ManifestError(f"build manifest {path} (from {origin}) does not exist; fix the path or unset it"
                                ) from None
        if exc.reason == "bad_json":
            raise ManifestError(f"build manifest {path} {exc.problem}; regenerate it with the apex builder") from None
        raise ManifestError(f"build manifest {path} (from {origin}) is unreadable: it {exc.problem}; {exc.fix}"
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


def torch_mismatch(manifest: dict[str, Any], running_torch: str | None) -> str | None:
    """A one-line message when the manifest was written for another torch (i.e. another image)."""
    built_for = (manifest.get("versions") or {}).get("torch")
    if not built_for or not running_torch or built_for == running_torch:
        return None
    return (
        f"build manifest is from another image: Apex was built for torch {built_for}, this Python runs torch"
        f" {running_torch}; pass the manifest of this image (--manifest) or rebuild Apex against this torch"
    )
