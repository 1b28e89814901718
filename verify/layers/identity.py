"""Layer 2: which `apex` this Python sees: none, the unrelated PyPI package, or NVIDIA Apex; its commit,
its legacy APIs, and whether its extension modules come from the same install.

Everything here reads files (find_spec, package metadata, the package directory): importing `apex` is
the import probe's job, in a child process, because the PyPI `apex` fails to import and a broken
NVIDIA build can fail in worse ways.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verify.checks import Check, Status
from verify.domain.commit import is_commit_sha
from verify.layers import module_map
from verify.layers.extensions import ExtensionResult
from verify.layers.manifest import BuildManifest
from verify.runtime import input_files

# Files/directories that only NVIDIA Apex has, and ones that only the 2013 Pyramid toolkit on PyPI has.
_NVIDIA_MARKERS = ("optimizers", "normalization", "multi_tensor_apply", "amp", "parallel")
_PYPI_MARKERS = ("views.py", "forms.py", "scaffolds")
NVIDIA_APEX_URL = "https://github.com/NVIDIA/apex"


def _distribution(package_dir: Path) -> importlib.metadata.Distribution | None:
    """The installed distribution that owns this package directory (not just any 'apex' metadata)."""
    try:
        dists = list(importlib.metadata.distributions(name="apex"))
    except Exception:  # corrupt metadata elsewhere must not stop verify
        return None
    for dist in dists:
        top = (input_files.read_installed_metadata(dist, "top_level.txt") or "").split()
        base = Path(str(dist.locate_file("")))
        if (base / "apex").resolve() == package_dir.resolve() or (
            "apex" in top and base == package_dir.parent
        ):
            return dist
        direct = _direct_url(dist)
        url = (direct or {}).get("url", "")
        if url.startswith("file://") and (direct or {}).get("dir_info", {}).get("editable"):
            if Path(url[7:]).resolve() / "apex" == package_dir.resolve():
                return dist
    return None


def _direct_url(dist: importlib.metadata.Distribution) -> dict[str, Any] | None:
    text = input_files.read_installed_metadata(dist, "direct_url.json")
    try:
        data = input_files.parse_json(text or "null", "direct_url.json", input_files.WHEEL_METADATA)
    except input_files.InputFileError:
        return None
    return data if isinstance(data, dict) else None


def _git_head(directory: Path) -> str | None:
    git = shutil.which("git")
    if not git or not directory.is_dir():
        return None
    try:
        done = subprocess.run(
            [git, "-C", str(directory), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=3,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and is_commit_sha(sha) else None


def locate() -> dict[str, object]:
    """Where `apex` is and what it is, from the file system and package metadata only."""
    try:
        spec = importlib.util.find_spec("apex")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return {"installed": False, "kind": "not_installed", "path": None}
    package_dir = Path(list(spec.submodule_search_locations)[0])
    entries = {p.name for p in package_dir.iterdir()} if package_dir.is_dir() else set()
    dist = _distribution(package_dir)
    summary = (dist.metadata["Summary"] or "") if dist else ""
    if any(m in entries for m in _NVIDIA_MARKERS[:3]) or {"amp", "parallel"} <= entries:
        kind = "nvidia"
    elif "pyramid" in summary.lower() or all(m in entries for m in _PYPI_MARKERS[:2]):
        kind = "pypi_unrelated"
    else:
        kind = "unknown"
    direct = _direct_url(dist) if dist else None
    info: dict[str, Any] = {
        "installed": True,
        "kind": kind,
        "path": str(package_dir),
        "distribution": {
            "name": dist.metadata["Name"],
            "version": dist.version,
            "summary": summary,
            "location": str(dist.locate_file("")),
        }
        if dist
        else None,
        "direct_url": direct,
        # apex.contrib.fmha -> <package>/contrib/fmha: the legacy APIs an older build still carries
        "legacy_apis": {
            api: package_dir.joinpath(*api.split(".")[1:]).exists() for api in module_map.legacy_apis()
        },
    }
    return info


def resolve_commit(
    info: dict[str, Any], manifest: BuildManifest | None
) -> tuple[str | None, str | None, list[str]]:
    """(commit, where it came from, disagreements): manifest, then pip's direct_url.json, then git."""
    candidates: list[tuple[str, str]] = []
    if manifest and manifest.commit:
        candidates.append((manifest.commit, "build manifest"))
    direct = info.get("direct_url") or {}
    vcs = direct.get("vcs_info") or {}
    if vcs.get("commit_id"):
        candidates.append((vcs["commit_id"], "package metadata (direct_url.json vcs_info)"))
    url = direct.get("url", "")
    source_dir = Path(url[7:]) if url.startswith("file://") else None
    if source_dir is None and info.get("path"):
        source_dir = Path(info["path"]).parent  # an in-tree (develop) install
    if source_dir is not None and (source_dir / ".git").exists():
        head = _git_head(source_dir)
        if head:
            candidates.append((head, f"git checkout {source_dir}"))
    if not candidates:
        return None, None, []
    commit, source = candidates[0]
    disagree = [f"{src} says {sha[:12]}" for sha, src in candidates[1:] if not _same_commit(sha, commit)]
    return commit, source, disagree


def _same_commit(a: str, b: str) -> bool:
    n = min(len(a), len(b))
    return a[:n].lower() == b[:n].lower()


@dataclasses.dataclass(frozen=True)
class IdentityLayer:
    apex: dict[str, Any]  # the report's `apex` block: locate()'s findings plus import, commit, mixed_install
    checks: tuple[Check, ...]


def identity_layer(
    info: dict[str, Any],
    apex_import: dict[str, Any] | None,
    manifest: BuildManifest | None,
    extensions: Sequence[ExtensionResult],
) -> IdentityLayer:
    """The identity checks, and locate()'s `info` extended with what they found (a new dict; info stays)."""
    apex = dict(info)
    checks: list[Check] = []
    kind = info["kind"]
    if kind == "not_installed":
        checks.append(
            Check(
                "identity",
                "apex",
                Status.FAIL,
                f"apex is not installed (no 'apex' package on sys.path); install NVIDIA Apex from {NVIDIA_APEX_URL}",
            )
        )
        return IdentityLayer(apex, tuple(checks))
    dist = info.get("distribution") or {}
    label = (
        f"{dist.get('name', 'apex')} {dist.get('version', '?')}"
        if dist
        else "no package metadata: a source tree on sys.path"
    )
    if kind == "pypi_unrelated":
        checks.append(
            Check(
                "identity",
                "apex",
                Status.FAIL,
                f"{info['path']} is the unrelated PyPI package {label} ({dist.get('summary') or 'Pyramid toolkit'}),"
                f" not NVIDIA Apex: pip uninstall -y apex, then build NVIDIA Apex from {NVIDIA_APEX_URL}",
                details={"kind": kind, "path": info["path"]},
            )
        )
    elif kind == "unknown":
        checks.append(
            Check(
                "identity",
                "apex",
                Status.FAIL,
                f"{info['path']} is a package named apex that is not NVIDIA Apex (no apex/optimizers,"
                f" apex/normalization); remove it and install NVIDIA Apex from {NVIDIA_APEX_URL}",
            )
        )
    else:
        checks.append(
            Check(
                "identity",
                "apex",
                Status.PASS,
                f"NVIDIA Apex ({label}) at {info['path']}",
                details={"kind": kind, "path": info["path"]},
            )
        )

    apex["import"] = apex_import
    if apex_import is not None and apex_import.get("status") != "ok":
        error = f"{apex_import.get('exc_type')}: {apex_import.get('message')}"
        status = Status.FAIL if kind == "nvidia" else Status.INFO
        checks.append(Check("identity", "import", status, f"import apex fails: {error}"))
    elif apex_import is not None:
        checks.append(Check("identity", "import", Status.PASS, "import apex succeeds"))

    if kind != "nvidia":
        return IdentityLayer(apex, tuple(checks))
    commit, source, disagree = resolve_commit(info, manifest)
    apex["commit"], apex["commit_source"] = commit, source
    if commit is None:
        checks.append(
            Check(
                "identity",
                "commit",
                Status.WARN,
                f"Apex commit unknown ({'the build manifest records none' if manifest else 'no build manifest'}"
                ", no VCS metadata); the version is always 0.1, so build from a git checkout with"
                " toolchain's apex builder to record it",
            )
        )
    elif disagree:
        checks.append(
            Check(
                "identity",
                "commit",
                Status.WARN,
                f"commit {commit[:12]} from {source}, but {'; '.join(disagree)}: the manifest and the"
                " installed package come from different builds",
            )
        )
    else:
        checks.append(Check("identity", "commit", Status.INFO, f"commit {commit[:12]} (from {source})"))

    legacy = module_map.legacy_apis()
    for api, present in info["legacy_apis"].items():
        checks.append(
            Check(
                "identity",
                f"legacy.{api}",
                Status.INFO,
                f"{api} present (an older Apex): {legacy[api]}"
                if present
                else f"{api} absent: {legacy[api]}",
            )
        )

    elsewhere, check = _mixed_install(info, extensions)
    apex["mixed_install"] = elsewhere
    checks.append(check)
    return IdentityLayer(apex, tuple(checks))


def _mixed_install(
    info: dict[str, Any], extensions: Sequence[ExtensionResult]
) -> tuple[dict[str, str], Check]:
    """Apex's compiled modules install as top-level modules next to the `apex` package directory."""
    home = Path(info["path"]).parent.resolve()
    elsewhere = {
        e.module: e.origin
        for e in extensions
        if e.origin and Path(e.origin).resolve() != home and e.status != "missing"
    }
    if not any(e.origin and e.status != "missing" for e in extensions):
        return elsewhere, Check(
            "identity",
            "mixed_install",
            Status.SKIP,
            "no compiled Apex module found to compare with the package",
        )
    if not elsewhere:
        return elsewhere, Check(
            "identity",
            "mixed_install",
            Status.PASS,
            f"apex and its compiled modules come from one place ({home})",
        )
    listed = ", ".join(f"{m} from {o}" for m, o in sorted(elsewhere.items()))
    return elsewhere, Check(
        "identity",
        "mixed_install",
        Status.WARN,
        f"mixed install: the apex package is in {home}, but {listed}; uninstall the stale copy so"
        " Python code and compiled kernels come from one build",
        details={"elsewhere": elsewhere},
    )
