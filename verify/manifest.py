"""Find, load and validate the build manifest that toolchain's Apex builder writes next to the wheel.

Lookup order: --manifest PATH, else $APEX_BUILD_MANIFEST, else /opt/apex/build-manifest.json (images).
A path the user named that is missing or malformed is a usage error (exit 2): the run would otherwise
check against the wrong expectations. The default image path being absent just means "no manifest".
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

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


def _require(cond: bool, path: Path, problem: str) -> None:
    if not cond:
        raise ManifestError(
            f"build manifest {path}: {problem}; pass the build-manifest.json that toolchain's apex builder wrote"
            f" (manifest_version {MANIFEST_VERSION}) or drop --manifest / ${ENV_VAR}"
        )


def load(path: Path, origin: str) -> dict[str, Any]:
    """Read and validate a manifest; raises ManifestError with a one-line message."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(
            f"build manifest {path} (from {origin}) does not exist; fix the path or unset it"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ManifestError(f"build manifest {path} (from {origin}) is unreadable: {reason}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"build manifest {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg});"
            " regenerate it with the apex builder"
        ) from None
    _require(isinstance(data, dict), path, "top level is not a JSON object")
    version = data.get("manifest_version")
    _require(version == MANIFEST_VERSION, path, f"manifest_version is {version!r}, expected {MANIFEST_VERSION!r}")
    expected = data.get("expected_modules")
    _require(
        isinstance(expected, list) and all(isinstance(m, str) for m in expected),
        path,
        "expected_modules is missing or not a list of module names",
    )
    for key in ("apex", "versions", "flags"):
        _require(isinstance(data.get(key, {}), dict), path, f"{key} is not an object")
    built = data.get("built_modules", [])
    _require(isinstance(built, list), path, "built_modules is not a list")
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
