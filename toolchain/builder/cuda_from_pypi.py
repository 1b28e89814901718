"""A CUDA_HOME assembled from NVIDIA's wheels on the package index, matching torch's CUDA exactly.

Apex's setup.py needs `$CUDA_HOME/bin/nvcc` with torch.version.cuda's major.minor (Apex #550, #955, #1761:
no nvcc, or the system's is another CUDA). NVIDIA publishes the compiler and headers as wheels; torch's
CUDA wheels already bring the libraries. This module installs the compiler wheels into a private prefix
(`pip install --target`), links them together with the headers and libraries next to torch into one
CUDA_HOME, and says which wheels at which versions it used (the manifest's `versions.nvcc_source`).
Which wheels and the version rule are data: toolchain/data/cuda_wheels.json.

Standard library only (it runs inside build images on Python 3.10, like the builder that calls it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from toolchain.errors import BuildFailed, EnvironmentUnavailable, UsageError
from verify.runtime import atomic, input_files

# toolchain/data/, also from a stage folder below toolchain/ (the module may move there)
FACTS_PATH = next(
    (
        d / "data" / "cuda_wheels.json"
        for d in Path(__file__).resolve().parents[:2]
        if (d / "data" / "cuda_wheels.json").is_file()
    ),
    Path(__file__).resolve().parent / "data" / "cuda_wheels.json",
)
RECORD_NAME = "wheels.json"


@dataclasses.dataclass(frozen=True)
class CudaWheel:
    name: str
    version: str
    origin: str  # "prefix" (installed here from the index) or "torch" (already next to torch)


@dataclasses.dataclass(frozen=True)
class PypiCuda:
    cuda: str  # MAJOR.MINOR it was assembled for
    home: Path  # CUDA_HOME
    wheels: tuple[CudaWheel, ...]
    reason: str

    def manifest(self) -> dict:
        return {
            "source": "pypi",
            "cuda": self.cuda,
            "cuda_home": str(self.home),
            "reason": self.reason,
            "wheels": {w.name: {"version": w.version, "origin": w.origin} for w in self.wheels},
        }


def facts() -> dict:
    return input_files.read_shipped_json(FACTS_PATH)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def series(cuda: str) -> dict:
    """The wheel set for torch.version.cuda's major; a major without one is a usage error."""
    major = cuda.split(".")[0]
    known = facts()["series"]
    if major not in known:
        raise UsageError(
            f"--cuda-from-pypi: no CUDA wheel set for CUDA {cuda} (known majors: {', '.join(sorted(known))}); "
            "install that CUDA toolkit and set CUDA_HOME instead",
        )
    return known[major]


def torch_site() -> Path:
    """The site-packages holding torch (and the nvidia-* wheels torch's CUDA build pulled in)."""
    import torch

    return Path(torch.__file__).resolve().parents[1]


def installed(site: Path) -> dict[str, importlib.metadata.Distribution]:
    return {_normal(d.metadata["Name"]): d for d in importlib.metadata.distributions(path=[str(site)])}


def toolkit_pins(dists: dict[str, importlib.metadata.Distribution]) -> dict[str, str]:
    """{wheel: 'VERSION'} from the cuda-toolkit meta-package next to torch (torch >= 2.9 cu13 pulls it in)."""
    meta = dists.get(_normal(facts()["toolkit_meta_package"]))
    pins: dict[str, str] = {}
    for req in (meta.requires or []) if meta else []:
        found = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([0-9][0-9.]*?)(?:\.\*)?\s*(?:;|$)", req)
        if found:
            pins[_normal(found.group(1))] = found.group(2)
    return pins


def recorded_pin(major_minor: str, name: str) -> str:
    """The version the newest cuda-toolkit release of MAJOR.MINOR pins for this wheel (toolkit_pins, read
    from PyPI's metadata), never one made from the toolkit's number: from CUDA 13.3 on, nvidia-cuda-cccl
    is versioned 13.3.x whatever the toolkit (cuda-toolkit 13.5.0 pins nvidia-cuda-cccl 13.3.5.0.6)."""
    row = facts().get("toolkit_pins", {}).get(major_minor)
    if row is None or name not in row["compiler"]:
        raise UsageError(
            f"--cuda-from-pypi: toolchain/data/cuda_wheels.json records no cuda-toolkit pin of {name} for "
            f"CUDA {major_minor}; add the Requires-Dist pins of cuda-toolkit {major_minor}.x to its "
            "toolkit_pins (`build.py facts check` names the release), or install the CUDA toolkit and set CUDA_HOME"
        )
    return str(row["compiler"][name])


def plan(cuda: str, site: Path) -> list[tuple[str, str, str]]:
    """[(wheel, pip requirement or installed version, origin)]: compiler wheels go into the prefix;
    library wheels are used where torch has them (their headers match what torch loads)."""
    major_minor = ".".join(cuda.split(".")[:2])
    wheels = series(major_minor)
    dists = installed(site)
    pins = toolkit_pins(dists)
    rows = []
    for base in wheels["compiler"] + wheels["libraries"]:
        name = _normal(base + wheels["suffix"])
        compiler = base in wheels["compiler"]
        if name in dists and not compiler:
            rows.append((name, dists[name].version, "torch"))
        elif name in dists:
            rows.append((name, f"{name}=={dists[name].version}", "prefix"))
        elif name in pins:
            rows.append((name, f"{name}=={pins[name]}.*", "prefix"))
        elif compiler:
            rows.append((name, f"{name}=={recorded_pin(major_minor, name)}.*", "prefix"))
        else:
            raise EnvironmentUnavailable(
                f"--cuda-from-pypi: torch's environment ({site}) has no {name} wheel, so its headers cannot match "
                f"what torch loads; install torch's CUDA {major_minor} build from the package index (it brings {name})",
            )
    return rows


def default_prefix() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "apex-toolchain" / "cuda-from-pypi"


def reason_needed(nvcc_release: str | None, nvcc_path: str | None, torch_cuda: str) -> str | None:
    """Why the system nvcc cannot build against this torch, or None when it can."""
    if nvcc_release is None:
        return f"no nvcc found ({nvcc_path}); using CUDA {torch_cuda} from the package index"
    if nvcc_release != torch_cuda:
        return (
            f"nvcc {nvcc_release} ({nvcc_path}) does not match torch's CUDA {torch_cuda}; "
            f"using CUDA {torch_cuda} from the package index instead"
        )
    return None


def assemble(cuda: str, prefix: Path, reason: str, say=print) -> PypiCuda:
    """Install (or reuse) the compiler wheels under PREFIX/<cuda>-<hash>/ and link a CUDA_HOME there."""
    major_minor = ".".join(cuda.split(".")[:2])
    site = torch_site()
    rows = plan(major_minor, site)
    to_install = sorted(req for _, req, origin in rows if origin == "prefix")
    root = prefix_root(prefix, major_minor, site)
    if installed_requirements(root) != to_install:  # none yet, or another wheel set: replaced in place
        _install(root, to_install, say)
    versions = installed(root / "site")
    wheels = []
    for name, what, origin in rows:
        version = what if origin == "torch" else versions[name].version if name in versions else None
        if version is None:
            raise BuildFailed(
                f"--cuda-from-pypi: {name} is missing from {root / 'site'} after pip install; remove {root} and retry"
            )
        wheels.append(CudaWheel(name, version, origin))
    home = root / "cuda"
    if not (home / "bin" / "nvcc").exists():
        _link_home(
            home, [root / "site"], site, [w.name for w in wheels if w.origin == "torch"], installed(site)
        )
    say(
        f"CUDA from the package index: CUDA_HOME={home} ("
        + ", ".join(f"{w.name} {w.version}{' (torch)' if w.origin == 'torch' else ''}" for w in wheels)
        + ")"
    )
    return PypiCuda(major_minor, home, tuple(wheels), reason)


def prefix_root(prefix: Path, major_minor: str, site: Path) -> Path:
    """PREFIX/<cuda>-<key of machine and torch's site>: one folder per venv, whatever wheel set it holds, so the
    compile commands (-I paths into it) stay the same and ccache keeps hitting when the set changes (adding
    nvidia-cuda-profiler-api under a key that hashed the set made 29 of 37 units miss, 2026-12-01)."""
    key = hashlib.sha256("\n".join([platform.machine(), str(site)]).encode()).hexdigest()[:12]
    return prefix.expanduser().absolute() / f"{major_minor}-{key}"


def installed_requirements(root: Path) -> list[str] | None:
    """The requirements the prefix at ROOT was installed from (its record), None when there is none."""
    try:
        return input_files.read_json(root / RECORD_NAME, input_files.MANIFEST)["requirements"]
    except (input_files.InputFileError, KeyError, TypeError):
        return None


def _install(root: Path, requirements: list[str], say) -> None:
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--target",
            str(staging / "site"),
            *requirements,
        ]
        say("installing CUDA wheels: " + " ".join(requirements))
        # pip's own temporary folders (unpacked wheels: ~300 MB) inside the staging folder, which this
        # `finally` removes: a pip killed by a signal cannot leave them in /tmp
        (staging / "tmp").mkdir()
        env = {**os.environ, "TMPDIR": str(staging / "tmp")}
        done = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env)
        if done.returncode != 0:
            tail = " | ".join(
                line
                for line in done.stderr.splitlines()
                if line.strip() and not line.startswith("WARNING: Location")
            )[-600:]
            raise EnvironmentUnavailable(
                f"--cuda-from-pypi: pip could not install {' '.join(requirements)} (exit {done.returncode}: {tail}); "
                "reach a package index that has NVIDIA's CUDA wheels (PIP_INDEX_URL) or install the CUDA toolkit and set CUDA_HOME",
            )
        shutil.rmtree(staging / "tmp", ignore_errors=True)
        atomic.write_text(staging / RECORD_NAME, json.dumps({"requirements": requirements}, indent=1) + "\n")
        if root.exists():
            shutil.rmtree(root)  # a half-made prefix (no record) from an interrupted run
        os.replace(staging, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _component_roots(
    site: Path, dists: dict[str, importlib.metadata.Distribution], names: list[str]
) -> list[Path]:
    """nvidia/<component> folders the named wheels install into (cu13: one shared nvidia/cu13)."""
    roots: list[Path] = []
    for name in names:
        for file in dists[name].files or []:
            parts = Path(str(file)).parts
            if len(parts) > 2 and parts[0] == "nvidia" and (site / parts[0] / parts[1]) not in roots:
                roots.append(site / parts[0] / parts[1])
    return roots


def _link_home(
    home: Path,
    prefix_sites: list[Path],
    site: Path,
    torch_names: list[str],
    torch_dists: dict[str, importlib.metadata.Distribution],
) -> None:
    """One CUDA_HOME of symlinks: the prefix's components first, then torch's; lib -> lib64 (where
    cpp_extension looks) with unversioned .so links for the linker (the wheels ship libcudart.so.13 only)."""
    staging = home.with_name(home.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    sources = [c for s in prefix_sites for c in sorted((s / "nvidia").iterdir()) if c.is_dir()]
    sources += _component_roots(site, torch_dists, torch_names)
    for component in sources:
        for part in facts()["home_parts"]:
            if (component / part).is_dir():
                target = staging / ("lib64" if part == "lib" else part)
                target.mkdir(exist_ok=True)  # a real folder: links added below never land in a wheel's folder
                for entry in (component / part).iterdir():
                    _merge(entry, target / entry.name)
    lib64 = staging / "lib64"
    if lib64.is_dir():
        for lib in list(lib64.iterdir()):
            unversioned = re.match(r"^(lib.+\.so)\.\d+$", lib.name)
            if unversioned and not (lib64 / unversioned.group(1)).exists():
                (lib64 / unversioned.group(1)).symlink_to(lib.resolve())
        (staging / "lib").symlink_to("lib64")
    shutil.rmtree(home, ignore_errors=True)
    os.replace(staging, home)


def _merge(source: Path, target: Path) -> None:
    """Link SOURCE's entries into TARGET; where both hold a folder, merge inside it (first one wins a file)."""
    if not target.exists() and not target.is_symlink():
        target.symlink_to(source.resolve())
        return
    if target.is_symlink():  # an earlier component's folder: make it a real folder of links, then add ours
        earlier = target.resolve()
        if not earlier.is_dir() or not source.is_dir():
            return
        target.unlink()
        target.mkdir()
        for entry in earlier.iterdir():
            (target / entry.name).symlink_to(entry.resolve())
    if target.is_dir() and source.is_dir():
        for entry in source.iterdir():
            _merge(entry, target / entry.name)
