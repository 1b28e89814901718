"""The one code path that turns an Apex source tree into a wheel and a build manifest.

The Dockerfile's apex-build stage runs it, and so does a bare-metal host without Docker:

    python -m toolchain.builder.apex_builder --apex-src ~/apex --out dist --archs 9.0 [--install]
    python build.py wheel ...            (the same `main`, behind the project's CLI)

Steps: check the inputs and the toolchain (nvcc == torch's CUDA, arch list nvcc can compile), read
how SRC/setup.py takes its switches (toolchain.builder.apex_setup: APEX_* variables from tag 25.09, argv
switches before), size parallelism from cores and memory, `pip wheel --no-build-isolation` with the
flags passed that way, then list the extensions really in the wheel, write OUT/build-manifest.json and
gate: an expected module missing fails (exit 1) instead of shipping Apex's silent Python-only fallback.
Standard library only (plus torch, which the build needs anyway): it runs inside the build image.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import errno
import hashlib
import importlib.util
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from toolchain.builder import apex_setup, build_outputs, cuda_from_pypi, ninja_log, parallelism
from toolchain.builder.process_tree import PeakSampler
from toolchain.errors import BuildFailed, EnvironmentUnavailable, ToolchainError, UsageError
from verify import entry_point, exit_codes, input_files, module_map, workflow_commands
from verify.atomic import write_json
from verify.manifest import BuildManifest
from verify.messages import bounded, did_you_mean, shown
from verify.out_dirs import OutputDirs

MANIFEST_NAME = "build-manifest.json"
LOG_NAME = "apex-build.log"
# Copies of toolchain/data/compat.toml's apex.core_flags and pytorch.index_url: the builder runs inside
# the build image, where Python 3.10 has no tomllib (tomli is a build-host extra). A unit test keeps
# them equal to compat.toml.
DEFAULT_FLAGS = {"APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1"}
TORCH_INDEX_URL = "https://download.pytorch.org/whl/{cuda_tag}"
# TORCH_CUDA_ARCH_LIST entries: 9.0, 9.0+PTX, 9.0a, 10.0f (arch-specific / family suffixes)
_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$", re.ASCII)  # ASCII digits: nvcc reads no others
_REPO_ROOT = Path(__file__).resolve().parents[2]  # holds toolchain/ and verify/


def _say(message: str) -> None:
    print(f"[apex-builder] {message}", flush=True)


# ---------------------------------------------------------------- inputs


def parse_flags(text: str | None, extras: str | None) -> dict[str, str]:
    """`--flags "APEX_CPP_EXT=1,APEX_CUDA_EXT=1"` (comma or space separated, `=1` optional, `none`
    for a Python-only build) plus `--extras xentropy,fast_layer_norm` (contrib flags)."""
    known = module_map.known_flags()
    flags: dict[str, str] = {}
    if text is None:
        flags.update(DEFAULT_FLAGS)
    elif text.strip().lower() not in ("none", ""):
        for item in re.split(r"[,\s]+", text.strip()):
            key, _, value = item.partition("=")
            value = value or "1"
            if value not in ("0", "1"):
                raise UsageError(f"--flags: {shown(item)} must be KEY=1 or KEY=0")
            flags[_known_flag(key, known, "--flags")] = value
    for item in re.split(r"[,\s]+", (extras or "").strip()):
        if item:
            name = item if item.upper().startswith("APEX_") else "APEX_" + item
            flags[_known_flag(name.upper(), known, "--extras")] = "1"
    return {k: v for k, v in flags.items() if v == "1"}


def _known_flag(key: str, known: tuple[str, ...], option: str) -> str:
    if key in known:
        return key
    hint = did_you_mean(key, known) or f"known flags: {', '.join(known)}"
    raise UsageError(f"{option}: unknown Apex flag {shown(key)}; {hint}")


def parse_archs(text: str) -> list[str]:
    """`9.0`, `8.0;9.0`, `8.0 9.0+PTX`, `8.0,9.0` -> ["8.0", "9.0+PTX"]; bad entries exit 2."""
    archs = [a for a in re.split(r"[;,\s]+", text.strip()) if a]
    if not archs:
        raise UsageError(
            "--archs is empty; give compute capabilities such as --archs 9.0 or --archs '8.0;9.0'",
        )
    for arch in archs:
        if not _ARCH.match(arch):
            raise UsageError(
                f"--archs: {shown(arch)} is not a compute capability; use MAJOR.MINOR with optional +PTX, e.g. 9.0 or 9.0+PTX",
            )
    return archs


def check_apex_source(src: Path) -> None:
    if not src.is_dir():
        raise UsageError(
            f"--apex-src {src}: no such directory; clone https://github.com/NVIDIA/apex and pass its path",
        )
    if not (src / "setup.py").is_file() or not (src / "apex" / "__init__.py").is_file():
        raise UsageError(
            f"--apex-src {src}: not an Apex source tree (needs setup.py and apex/__init__.py); pass the root of an NVIDIA/apex checkout",
        )


# ---------------------------------------------------------------- toolchain probes


def _run(cmd: list[str], **kwargs) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs).stdout


def find_nvcc(env: dict[str, str]) -> tuple[Path | None, str]:
    """nvcc the way torch.utils.cpp_extension finds CUDA_HOME: $CUDA_HOME/$CUDA_PATH, then nvcc on
    PATH, then /usr/local/cuda. Returns (path or None, where it looked)."""
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if home:
        return (
            Path(home) / "bin" / "nvcc" if (Path(home) / "bin" / "nvcc").exists() else None
        ), f"CUDA_HOME={home}"
    on_path = shutil.which("nvcc", path=env.get("PATH"))
    if on_path:
        return Path(on_path), "PATH"
    default = Path("/usr/local/cuda/bin/nvcc")
    return (default if default.exists() else None), "PATH and /usr/local/cuda"


def nvcc_version(nvcc: Path) -> tuple[str, str]:
    """('13.0', '13.0.88') from `nvcc --version`."""
    try:
        out = _run([str(nvcc), "--version"])
    except (subprocess.CalledProcessError, OSError) as error:
        raise EnvironmentUnavailable(f"{nvcc} --version failed ({error}); check the CUDA toolkit install") from None
    release = re.search(r"release (\d+\.\d+)", out)
    full = re.search(r"V(\d+\.\d+\.\d+)", out)
    if not release:
        raise EnvironmentUnavailable(f"{nvcc} --version printed no 'release X.Y'; is it a real nvcc?")
    return release.group(1), full.group(1) if full else release.group(1)


def nvcc_archs(nvcc: Path) -> set[str]:
    """Compute capabilities nvcc can compile, from `nvcc --list-gpu-arch` (compute_90 -> 9.0)."""
    try:
        out = _run([str(nvcc), "--list-gpu-arch"])
    except (subprocess.CalledProcessError, OSError):
        return set()  # nvcc older than 11.0 has no --list-gpu-arch: let nvcc itself judge
    return {f"{m[:-1]}.{m[-1]}" for m in re.findall(r"compute_(\d+)", out)}


def torch_info() -> dict:
    try:
        import torch  # the build compiles against the installed torch (--no-build-isolation)
    except ImportError as error:
        raise EnvironmentUnavailable(
            f"torch is not importable by {sys.executable} ({error}); install the torch the build targets first",
        ) from None
    import torch.utils.cpp_extension  # noqa: F401  (what setup.py imports; fails loudly if torch is broken)

    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cxx11_abi": getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None),
    }


def compiler_version(env: dict[str, str]) -> str | None:
    cxx = env.get("CXX", "c++")
    try:
        return _run([cxx, "-dumpfullversion", "-dumpversion"], env=env).strip()
    except (subprocess.CalledProcessError, OSError):
        return None


def check_build_tools(env: dict[str, str], archs: list[str] | None, cuda_home: str | None = None) -> dict:
    """Everything setup.py needs, checked up front so the user reads one clear line, not setup.py's
    traceback. Returns the versions for the manifest. `cuda_home`: one assembled from the index."""
    info = torch_info()
    nvcc, looked = find_nvcc(env)
    if info["torch_cuda"] is not None:
        import torch.utils.cpp_extension as cpp_extension  # setup.py compiles with exactly this CUDA_HOME

        home = cuda_home or cpp_extension.CUDA_HOME
        nvcc = Path(home) / "bin" / "nvcc" if home and (Path(home) / "bin" / "nvcc").exists() else None
        looked = f"torch's CUDA_HOME={home}"
    if nvcc is None:
        # Apex's setup.py runs `$CUDA_HOME/bin/nvcc -V` at import time, even for a Python-only build.
        raise EnvironmentUnavailable(
            f"nvcc not found (looked at {looked}); Apex's setup.py needs the CUDA toolkit even for a Python-only "
            f"build: install the CUDA {info['torch_cuda'] or ''} toolkit (cuda-nvcc) or set CUDA_HOME to it".replace(
                "  ", " "
            ),
        )
    release, full = nvcc_version(nvcc)
    if info["torch_cuda"] is None:
        raise EnvironmentUnavailable(
            f"torch {info['torch']} is a CPU-only build (torch.version.cuda is None), so torch.utils.cpp_extension has "
            f"no CUDA_HOME and Apex's setup.py cannot run; install a CUDA {release} build of torch "
            f"(e.g. --index-url {TORCH_INDEX_URL.format(cuda_tag='cu' + release.replace('.', ''))})",
        )
    torch_cuda = ".".join(info["torch_cuda"].split(".")[:2])
    if torch_cuda != release:
        raise EnvironmentUnavailable(
            f"nvcc {release} ({nvcc}) does not match torch {info['torch']}'s CUDA {torch_cuda}; Apex's setup.py requires "
            f"the same major.minor: put the CUDA {torch_cuda} toolkit first (CUDA_HOME) or install torch built for CUDA {release}",
        )
    if archs:
        supported = nvcc_archs(nvcc)
        bad = [a for a in archs if supported and a.split("+")[0].rstrip("af") not in supported]
        if bad:
            ordered = sorted(supported, key=lambda a: tuple(map(int, a.split("."))))
            raise UsageError(
                f"--archs: nvcc {release} cannot compile for {', '.join(bad)}; it supports {', '.join(ordered)}",
            )
    # --no-build-isolation fetches nothing: setup.py's imports and a bdist_wheel command must be here
    for module, package in (("setuptools", "setuptools"), ("packaging", "packaging"), ("wheel", "wheel")):
        if module == "wheel" and importlib.util.find_spec("setuptools.command.bdist_wheel"):
            continue  # setuptools >= 70.1 carries bdist_wheel itself
        if importlib.util.find_spec(module) is None:
            raise EnvironmentUnavailable(
                f"{module} is not installed in {sys.executable}; pip install {package}",
            )
    return {
        "torch": info["torch"],
        "torch_cuda": info["torch_cuda"],
        "nvcc": full,
        "nvcc_path": str(nvcc),
        "gcc": compiler_version(env),
        "python": platform.python_version(),
        "cxx11_abi": info["cxx11_abi"],
    }


# ---------------------------------------------------------------- ccache


def ccache_env(
    mode: str, env: dict[str, str], src: Path, nvcc: str, workdir: Path
) -> tuple[dict[str, str], dict]:
    """Route the C++ and CUDA compiles through ccache. Recent torch's cpp_extension (2.13) prepends ccache
    itself when it is on PATH (`_wrap_compiler`); older torch honours PYTORCH_NVCC for nvcc (ninja
    builds) and finds c++ through PATH, so a masquerade directory of ccache symlinks goes first."""
    if mode == "off":
        return {"TORCH_NO_COMPILER_WRAPPER": "1"}, {"used": False, "reason": "--no-ccache"}
    ccache = shutil.which("ccache", path=env.get("PATH"))
    if ccache is None:
        if mode == "on":
            raise EnvironmentUnavailable(
                "--ccache: ccache is not on PATH; apt-get install ccache (or drop --ccache)",
            )
        return {}, {"used": False, "reason": "ccache not on PATH"}
    import torch.utils.cpp_extension as cpp_extension

    extra = {
        "CCACHE_DIR": env.get("CCACHE_DIR", str(Path.home() / ".cache" / "ccache")),
        # hash paths relative to the source tree, so another checkout of the same commit hits the cache
        "CCACHE_BASEDIR": str(src.resolve()),
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_COMPILERCHECK": env.get("CCACHE_COMPILERCHECK", "content"),
    }
    if hasattr(cpp_extension, "_wrap_compiler"):
        method = "torch cpp_extension prepends ccache found on PATH (_wrap_compiler)"
    else:
        shims = workdir / "ccache-bin"
        shims.mkdir(exist_ok=True)
        for name in ("c++", "g++", "cc", "gcc"):
            link = shims / name
            if not link.exists():
                link.symlink_to(ccache)
        path = f"{shims}{os.pathsep}{env.get('PATH', '')}"
        method = "PATH masquerade for c++/gcc and PYTORCH_NVCC='ccache nvcc'"
        cxx = env.get("CXX", "")
        if os.path.isabs(cxx):
            # An absolute CXX (the H200 host sets /opt/gcc/bin/g++) bypasses the PATH shims, which left
            # every .cpp (torch/extension.h, ~30 s each) uncached: point CXX at a shim of the same name
            # and put the real compiler's directory right behind the shims so ccache finds it.
            shim = shims / os.path.basename(cxx)
            if not shim.exists():
                shim.symlink_to(ccache)
            extra["CXX"] = str(shim)
            path = f"{shims}{os.pathsep}{os.path.dirname(cxx)}{os.pathsep}{env.get('PATH', '')}"
            method += f"; CXX={cxx} through its shim"
        extra["PATH"] = path
        extra["PYTORCH_NVCC"] = f"{ccache} {nvcc}"
    return extra, {"used": True, "method": method, "dir": extra["CCACHE_DIR"], "binary": ccache}


def ccache_stats(env: dict[str, str]) -> dict[str, int]:
    """Hits and misses from `ccache --print-stats` (ccache >= 4.4); {} when unavailable."""
    try:
        out = _run(["ccache", "--print-stats"], env=env)
    except (subprocess.CalledProcessError, OSError):
        return {}
    stats = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    keys = ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")
    return {k: int(stats[k]) for k in keys if stats.get(k, "").isdigit()}


# ---------------------------------------------------------------- build


def run_logged(
    cmd: list[str], env: dict[str, str], log_path: Path, cwd: Path | None = None
) -> tuple[int, float, float, float]:
    """Run `cmd`, streaming its output to stdout and `log_path`. Returns (exit code, wall seconds,
    peak summed RSS of the process tree in MiB, largest single child's RSS in MiB)."""
    start = time.monotonic()
    with open(log_path, "a", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,  # own group: Ctrl-C stops the whole tree
        )
        try:
            with PeakSampler(proc.pid) as sampler:
                assert proc.stdout is not None
                for line in proc.stdout:
                    sys.stdout.write(workflow_commands.inert(line))  # a compiler's line is no CI command
                    log.write(line)
                code = proc.wait()
        except BaseException:  # Ctrl-C, SIGTERM (verify.interrupts): stop the whole tree
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
            raise
    single = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    return code, time.monotonic() - start, sampler.peak_bytes / 2**20, single


def pip_wheel_command(src: Path, staging: Path, options: list[str]) -> list[str]:
    """`pip wheel --no-build-isolation --no-deps -v SRC -w STAGING` plus the flag style's options."""
    return [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v", *options, str(src),
            "-w", str(staging)]


def build_wheel(
    src: Path, out: Path, env: dict[str, str], log_path: Path, options: list[str] | None = None,
    setup: apex_setup.SetupPy | None = None,
) -> tuple[Path, dict]:
    """`pip wheel --no-build-isolation --no-deps -v SRC` into a fresh directory (so a stale wheel in
    OUT is never picked up), then moved into OUT."""
    staging = Path(tempfile.mkdtemp(prefix=".wheel-", dir=out))
    try:
        cmd = pip_wheel_command(src, staging, options or [])
        cpu_before, started_epoch = _children_cpu_s(), time.time()
        code, wall, peak_tree, peak_single = run_logged(cmd, env, log_path)
        stats = {
            "wall_s": round(wall, 1),
            "started_epoch_s": round(started_epoch, 3),
            # every compiler, linker and pip process the build waited for (RUSAGE_CHILDREN is cumulative)
            "cpu_s": round(_children_cpu_s() - cpu_before, 1),
            "peak_rss_mb": round(peak_tree, 1),
            "peak_rss_single_process_mb": round(peak_single, 1),
        }
        if code != 0:
            raise BuildFailed(_failure_summary(log_path, code, setup))
        wheels = sorted(staging.glob("*.whl"))
        if len(wheels) != 1:
            raise BuildFailed(
                f"pip wheel finished but left {len(wheels)} wheels in {staging}; see {log_path}",
            )
        target = out / wheels[0].name
        os.replace(wheels[0], target)
        return target, stats
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compile_timing(build_dir: Path, stats: dict, cores: int, threads: int) -> dict:
    """Per-unit times from each extension's .ninja_log, the links, the lower bound and what memory one
    unit took at its peak, for the manifest. {} with a reason when no ninja log is there."""
    try:
        by_ext = ninja_log.read_build_dir(build_dir)
        links = ninja_log.link_seconds(by_ext, ninja_log.library_mtimes(build_dir))
    except (OSError, ninja_log.NinjaLogError) as error:
        return {"units": [], "note": f"ninja logs unreadable: {error}"}
    units = sorted((u for found in by_ext.values() for u in found), key=lambda u: -u.wall_s)
    if not units:
        return {"units": [], "note": f"no .ninja_log under {build_dir} (no ninja, or nothing compiled)"}
    origin = min(u.start_s for u in units)
    bound = ninja_log.lower_bound(units, links, cores, stats.get("cpu_s"))
    peak_units, mean_units = ninja_log.in_flight(units)
    per_unit = stats["peak_rss_mb"] / 1024 / max(1, peak_units)
    return {
        "units": [dict(u.to_json(), start_s=round(u.start_s - origin, 3), end_s=round(u.end_s - origin, 3))
                  for u in units],  # seconds since the first unit started, slowest first
        "links_s": {ext: round(v, 2) for ext, v in sorted(links.items())},
        "unit_seconds": round(sum(u.wall_s for u in units), 1),
        # serial phases no unit schedule can shorten: pip and setup.py before the first unit (metadata, torch
        # import), and linking the last extension and packing the wheel after the last unit
        "before_first_unit_s": round(origin - stats["started_epoch_s"], 1) if "started_epoch_s" in stats else None,
        "after_last_unit_s": round(stats["started_epoch_s"] + stats["wall_s"] - max(u.end_s for u in units), 1)
        if "started_epoch_s" in stats else None,
        "lower_bound": bound.to_json(stats["wall_s"]),
        "in_flight": {"peak_units": peak_units, "mean_units": round(mean_units, 2)},
        "memory": {
            "gib_per_unit_at_peak": round(per_unit, 2),
            # what the parallelism model's device part would have been, given its host part
            "gib_per_nvcc_thread": round(max(0.25, (per_unit - parallelism.GIB_PER_UNIT_HOST) / max(1, threads)), 2),
            "method": "peak summed RSS / most units in flight at once; per thread: minus the model's host part, "
                      "divided by nvcc --threads (at least 0.25)",
        },
    }


def measured_gib_per_thread(manifest_path: Path) -> tuple[float | None, str]:
    """The per-thread memory a previous cold build in the same --out measured, with 25% headroom; a warm
    (ccache) build compiled little, so its figure says nothing."""
    try:
        build = json.loads(manifest_path.read_text()).get("build", {})
        value = float(build["timing"]["memory"]["gib_per_nvcc_thread"])
        stats = build.get("ccache", {}).get("stats", {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, ""
    hits = stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0)
    if hits > stats.get("cache_miss", 0) or not 0.1 <= value <= 64:
        return None, ""
    return round(value * 1.25, 2), f"per-thread memory {value} GiB measured by the cold build in {manifest_path} (+25%)"


def _failure_summary(log_path: Path, code: int, setup: apex_setup.SetupPy | None = None) -> str:
    """One paragraph: what failed and where the log says why. The log's lines were already streamed to
    stdout, so they are not repeated here."""
    lines = log_path.read_text(errors="replace").splitlines()
    text = "\n".join(lines)
    if "No space left on device" in text:
        raise EnvironmentUnavailable(
            f"the build ran out of disk space (No space left on device); free space and retry; see {log_path}",
        )
    hint = ""
    if re.search(r"Killed signal terminated program|out of memory|std::bad_alloc", text):
        hint = " The compiler was killed or ran out of memory: lower --jobs / --nvcc-threads."
    unsupported = re.search(r"Unsupported gpu architecture '(compute_(\d+))'", text)
    if unsupported:
        number = unsupported.group(2)
        arch = f"{number[:-1]}.{number[-1]}"
        where_set = next(
            (f"setup.py line {line} hard-codes it for {block.switches[0]}" for block in (setup.blocks if setup else ())
             for a, line in block.hardcoded_archs if a == arch),
            "it is not in your --archs",
        )
        hint += (f" nvcc rejects {unsupported.group(1)}: {where_set}; this Apex ref cannot be built with this CUDA"
                 " toolkit: use an older toolkit (and a torch built for it) or a newer Apex ref.")
    # a compiler's `error:` first (not setup.py's "this is not an error." banner), else any error/fatal word
    first_error = next((i for pattern in (r"\b(?:fatal )?error\b\s*(?:\[[^]]*\]\s*)?:", r"\berror\b|\bfatal\b")
                        for i, line in enumerate(lines, 1) if re.search(pattern, line, re.I)), None)
    where = (f"first error at log line {first_error}: {lines[first_error - 1].strip()[:300]}"
             if first_error else "no line says 'error'")
    return f"pip wheel failed (exit {code}); {where} (log {log_path}).{hint}"


def timing_line(build: dict) -> str:
    """`wall 250.1 s / lower bound 231.0 s = 1.08 (...)`, printed after every build."""
    timing = build.get("timing", {})
    bound = timing.get("lower_bound")
    if not bound:
        return f"wall {build['wall_s']} s; lower bound unknown: {timing.get('note', 'no timing')}"
    return (f"wall {build['wall_s']} s / lower bound {bound['lower_bound_s']} s = {bound['wall_over_bound']} "
            f"(chain {bound['chain_s']} s: {bound['chain_unit']} + link; work {bound['work_s']} s: "
            f"{bound['work_from']}; {len(timing['units'])} units, at most {timing['in_flight']['peak_units']} "
            f"in flight, {timing['in_flight']['mean_units']} on average)")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def apex_identity(src: Path, ref: str | None, source: str | None, commit: str | None) -> dict:
    if commit is None and (src / ".git").exists() and shutil.which("git"):
        try:
            commit = _run(["git", "-C", str(src), "rev-parse", "HEAD"]).strip()
        except subprocess.CalledProcessError:
            commit = None
    version = re.search(r"""version\s*=\s*["']([^"']+)""", (src / "setup.py").read_text(errors="replace"))
    return {
        "commit": commit,
        "ref": ref,
        "source": source or f"dir:{src.resolve()}",
        "version": version.group(1) if version else None,
    }


def wheel_hashes(paths: list[str]) -> dict[str, str]:
    """{wheel file name: sha256} from `sha256sum *.whl` output: the torch stage hashes the exact
    wheels it installed (provenance)."""
    hashes: dict[str, str] = {}
    for path in paths:
        try:
            lines = input_files.read_text(path, input_files.WHEEL_HASHES).splitlines()
        except input_files.InputFileError as error:
            raise UsageError(f"--wheel-hashes {error}") from None
        for line in lines:
            digest, _, name = line.strip().partition("  ")
            if not re.fullmatch(r"[0-9a-f]{64}", digest) or not name:
                raise UsageError(f"--wheel-hashes {path}: {line!r} is not a `sha256sum` line (HASH  FILE)")
            hashes[Path(name.lstrip("*")).name] = digest
    return hashes


# ---------------------------------------------------------------- gate and install


def gate_required(expected_modules: list[str]) -> str:
    """`verify --require` for the static gate: the default required features this build promises (every
    module of the feature is expected), comma-joined; '' when none. verify's default would demand
    FusedAdam/FusedLayerNorm/FusedRMSNorm even of a Python-only or APEX_CPP_EXT-only build."""
    expected = set(expected_modules)
    return ",".join(
        feature
        for feature in module_map.default_required_features()
        if (needs := module_map.modules_for_feature(feature)) and set(needs) <= expected
    )


def install_and_verify(wheel: Path, manifest: Path, out: Path, env: dict[str, str]) -> int:
    """Install the wheel, then let `verify --static` (imports, archs, expectations) be the gate: the
    manifest's expected_modules plus the default features those modules provide."""
    log = out / LOG_NAME
    code, *_ = run_logged(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall", str(wheel)], env, log
    )
    if code != 0:
        raise BuildFailed(f"pip install {wheel.name} failed (exit {code}); see {log}")
    verify_env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")])))
    cmd = [
        sys.executable,
        "-m",
        "verify",
        "--static",
        "--manifest",
        str(manifest),
        f"--require={gate_required(json.loads(manifest.read_text())['expected_modules'])}",
        "--json",
        str(out / "verify-static.json"),
        "--markdown",
        str(out / "verify-static.md"),
    ]
    # cwd=OUT: run from the Apex source tree and `import apex` would find the uninstalled sources
    code, *_ = run_logged(cmd, verify_env, log, cwd=out)
    if code != 0:
        _say(f"static gate: verify --static exited {code}; see {out / 'verify-static.md'}")
    return code


# ---------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="build.py wheel", description=__doc__.split("\n\n")[0])
    p.add_argument("--apex-src", required=True, type=Path, help="root of an NVIDIA/apex checkout")
    p.add_argument(
        "--out", required=True, type=Path, help="directory for the wheel, build-manifest.json and the log"
    )
    p.add_argument(
        "--archs", help="TORCH_CUDA_ARCH_LIST, e.g. 9.0 or '8.0;9.0+PTX' (required for CUDA flags)"
    )
    p.add_argument(
        "--flags", help="APEX_* flags, e.g. APEX_CPP_EXT=1,APEX_CUDA_EXT=1 (default); 'none' = Python-only; "
        "passed as setup.py's argv switches (--cpp_ext ...) to Apex trees before tag 25.09"
    )
    p.add_argument("--extras", help="contrib extensions to add, e.g. xentropy,fast_layer_norm")
    p.add_argument("--jobs", type=int, help="concurrent compiles in total (default: from cores and memory)")
    p.add_argument(
        "--nvcc-threads", type=int, help="nvcc --threads per file (default: one per arch, at most 4)"
    )
    p.add_argument(
        "--memory-gib", type=float, help="size for at most this much memory (emulates a smaller host; with "
        "taskset -c 0-3 for 4 cores)"
    )
    cc = p.add_mutually_exclusive_group()
    cc.add_argument("--ccache", dest="ccache", action="store_const", const="on", help="require ccache")
    cc.add_argument("--no-ccache", dest="ccache", action="store_const", const="off", help="never use ccache")
    p.set_defaults(ccache="auto")
    pypi = p.add_mutually_exclusive_group()
    pypi.add_argument(
        "--cuda-from-pypi", dest="cuda_from_pypi", action="store_const", const="always",
        help="assemble CUDA_HOME from NVIDIA's wheels for torch's CUDA (default: only when nvcc is missing or "
        "not torch's CUDA)",
    )
    pypi.add_argument(
        "--no-cuda-from-pypi", dest="cuda_from_pypi", action="store_const", const="never",
        help="never: a missing or mismatched nvcc stops the build (exit 3)",
    )
    p.set_defaults(cuda_from_pypi="auto", cuda_from_pypi_record=None)
    p.add_argument(
        "--cuda-prefix", type=Path,
        help="where the index CUDA goes (default: $XDG_CACHE_HOME/apex-toolchain/cuda-from-pypi)",
    )
    p.add_argument("--no-gate", action="store_true", help="report missing modules but exit 0")
    p.add_argument(
        "--ignore-hardcoded-archs", action="store_true",
        help="build even when setup.py hard-codes a GPU arch this nvcc dropped (to see the compiler's own error)",
    )
    p.add_argument(
        "--install", action="store_true", help="pip install the wheel and gate with verify --static"
    )
    p.add_argument(
        "--naive", action="store_true", help="the guides' recipe for comparison: MAX_JOBS=4, no arch list"
    )
    p.add_argument(
        "--keep-build-dir", action="store_true", help="keep SRC/build (default: removed for a clean build)"
    )
    p.add_argument("--cell", help="matrix cell id, recorded in the manifest")
    p.add_argument("--apex-ref", help="the ref that was asked for (provenance)")
    p.add_argument(
        "--apex-source", help="where the source came from, e.g. git+https://github.com/NVIDIA/apex@SHA"
    )
    p.add_argument("--apex-commit", help="the commit, when SRC has no .git")
    p.add_argument("--base-image", help="base image reference (provenance)")
    p.add_argument("--base-image-digest", help="base image digest (provenance)")
    p.add_argument(
        "--wheel-hashes", action="append", default=[], help="`sha256sum` output of the installed wheels (provenance)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # --out is removed again if the build fails before writing to it
    return OutputDirs([args.out.expanduser()]).run(lambda: _main_reporting(args))


def _main_reporting(args: argparse.Namespace) -> int:
    try:
        return _main(args)
    except ToolchainError as err:
        print(f"[apex-builder] error: {bounded(str(err))}", file=sys.stderr, flush=True)
        return err.exit_code
    except OSError as err:  # writing OUT (or reading a file it names) failed: one line, not a traceback
        print(f"[apex-builder] error: {_os_error_message(err, args.out)}", file=sys.stderr, flush=True)
        return exit_codes.ENVIRONMENT if err.errno in (errno.ENOSPC, errno.EDQUOT) else exit_codes.USAGE
    except KeyboardInterrupt:
        print("[apex-builder] interrupted; no manifest written", file=sys.stderr)
        return exit_codes.FAILED


def _os_error_message(err: OSError, out: Path) -> str:
    path = err.filename or out
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on device writing {path}; free space, or pass --out on another filesystem"
    name = str(err.filename or "")
    if name and not (name.startswith(str(out)) or str(out).startswith(name)):  # not OUT, inside or above it
        return f"{path}: {err.strerror or err}; check that it exists and this user can read and write it"
    return (f"--out {out}: cannot write {path} ({err.strerror or err}); pass a directory you can create "
            "and write, e.g. --out ./dist")


def _main(args: argparse.Namespace) -> int:
    started = dt.datetime.now(dt.timezone.utc)
    # absolute: these paths reach pip's and verify's command lines, where one that starts with "-" is an option
    src, out = args.apex_src.expanduser().absolute(), args.out.expanduser().absolute()
    check_apex_source(src)
    setup = apex_setup.read(src)
    apex_setup.check_style(setup, src)
    flags = parse_flags(args.flags, args.extras)
    apex_setup.check_flags(setup, flags, src)
    expected, _ = expected_modules(setup, flags)
    needs_cuda = any(module_map.module(m).cuda for m in expected)
    for name, value in (("--jobs", args.jobs), ("--nvcc-threads", args.nvcc_threads), ("--memory-gib", args.memory_gib)):
        if value is not None and not value >= 1:
            raise UsageError(f"{name} {value}: must be 1 or more")
    arch_text = args.archs or os.environ.get("TORCH_CUDA_ARCH_LIST")
    if args.naive:
        archs = None
    elif arch_text:
        archs = parse_archs(arch_text)
    elif needs_cuda:
        raise UsageError(
            "--archs is required for CUDA extensions (setup.py would guess 7+ archs); e.g. --archs 9.0",
        )
    else:
        archs = None

    out.mkdir(parents=True, exist_ok=True)  # an unwritable --out fails now, not after the checks
    env = dict(os.environ)
    # the venv's bin (ninja from pip) must be on PATH even when the venv is not activated
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    pypi = pypi_cuda(args, env)
    versions = check_build_tools(env, archs, str(pypi.home) if pypi else None)
    versions["nvcc_source"] = "pypi" if pypi else "system"
    if pypi:
        versions["cuda_wheels"] = {w.name: w.version for w in pypi.wheels}
        args.cuda_from_pypi_record = pypi.manifest()
    if setup.style == apex_setup.ARGV:
        check_argv_passing()
    if not args.ignore_hardcoded_archs:
        apex_setup.check_archs(setup, apex_setup.flag_switches(setup, flags),
                               nvcc_archs(Path(versions["nvcc_path"])), versions["nvcc"].rsplit(".", 1)[0], src)
    return build_and_gate(args, src, out, flags, archs, env, versions, started, setup)


def expected_modules(setup: apex_setup.SetupPy, flags: dict[str, str]) -> tuple[list[str], list[str]]:
    """(modules the flags build at this ref, modules of those flags that this setup.py does not have):
    older tags lack some core modules (fused_rotary_positional_embedding is there from 24.02)."""
    expected, absent = [], []
    for name in module_map.modules_for_flags(flags):
        (expected if name in setup.modules(module_map.module(name).switch) else absent).append(name)
    return expected, absent


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def pypi_cuda(args: argparse.Namespace, env: dict[str, str]) -> cuda_from_pypi.PypiCuda | None:
    """A CUDA_HOME from the package index when asked (--cuda-from-pypi) or when torch is a CUDA build and
    the system nvcc is missing or another CUDA (said on stdout); sets env's CUDA_HOME to it."""
    if args.cuda_from_pypi == "never":
        return None
    info = torch_info()
    if info["torch_cuda"] is None:
        return None  # a CPU torch: check_build_tools says what to install
    torch_cuda = ".".join(info["torch_cuda"].split(".")[:2])
    if args.cuda_from_pypi == "always":
        reason = f"--cuda-from-pypi: using CUDA {torch_cuda} from the package index"
    else:
        import torch.utils.cpp_extension as cpp_extension

        home = cpp_extension.CUDA_HOME
        nvcc = Path(home) / "bin" / "nvcc" if home and (Path(home) / "bin" / "nvcc").exists() else None
        try:
            release = nvcc_version(nvcc)[0] if nvcc else None
        except EnvironmentUnavailable:
            release = None
        reason = cuda_from_pypi.reason_needed(release, str(nvcc) if nvcc else f"CUDA_HOME={home}", torch_cuda)
        if reason is None:
            return None
    _say(reason)
    made = cuda_from_pypi.assemble(torch_cuda, args.cuda_prefix or cuda_from_pypi.default_prefix(), reason, _say)
    env["CUDA_HOME"] = str(made.home)
    env["PATH"] = os.pathsep.join([str(made.home / "bin"), env.get("PATH", "")])
    return made


def check_argv_passing() -> None:
    """The argv style needs pip >= 23.1 (repeated --config-settings keys kept as a list; older pips keep the
    last) and setuptools >= 64 (forwards --build-option settings to setup.py bdist_wheel)."""
    import importlib.metadata

    for package, minimum, why in (
        ("pip", (23, 1), "keeps only the last of repeated --config-settings keys"),
        ("setuptools", (64, 0), "does not forward --config-settings --build-option to setup.py"),
    ):
        try:
            have = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue  # check_build_tools already required setuptools; pip runs as `python -m pip`
        if _version_tuple(have) < minimum:
            raise EnvironmentUnavailable(
                f"{package} {have} in {sys.executable} {why}, so an Apex tree that reads argv switches would build "
                f"without them; {sys.executable} -m pip install '{package}>={'.'.join(map(str, minimum))}'",
            )


def build_and_gate(
    args: argparse.Namespace,
    src: Path,
    out: Path,
    flags: dict[str, str],
    archs: list[str] | None,
    env: dict[str, str],
    versions: dict,
    started: dt.datetime,
    setup: apex_setup.SetupPy | None = None,
) -> int:
    """After the checks: size, build, list, write the manifest, gate (and install + verify)."""
    setup = setup or apex_setup.read(src)
    expected, absent = expected_modules(setup, flags)
    switches = apex_setup.flag_switches(setup, flags)
    # only the flags asked for, and only where setup.py reads them: a stray APEX_* in the shell must not leak in
    for flag in module_map.known_flags():
        env.pop(flag, None)
    if setup.style == apex_setup.ENV:
        env.update(flags)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / LOG_NAME
    log_path.write_text("")

    if archs:
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(archs)
    else:
        env.pop("TORCH_CUDA_ARCH_LIST", None)
    if args.naive:
        for knob in ("APEX_PARALLEL_BUILD", "NVCC_APPEND_FLAGS"):
            env.pop(knob, None)
        env["MAX_JOBS"] = "4"
        par = {
            "max_jobs": 4,
            "nvcc_threads": 1,
            "apex_parallel_build": 1,
            "reason": "--naive: the published guides' MAX_JOBS=4, no arch list",
        }
    else:
        resources = parallelism.host_resources()
        if args.memory_gib is not None and args.memory_gib < resources.mem_available_gib:
            resources = dataclasses.replace(resources, mem_available_gib=args.memory_gib, mem_source="--memory-gib")
        gib_per_thread, gib_from = measured_gib_per_thread(out / MANIFEST_NAME)
        try:
            plan = parallelism.plan(
                resources,
                n_archs=len(archs or [1]),
                # a setup.py without --parallel / APEX_PARALLEL_BUILD builds one extension at a time
                n_extensions=len(expected) if setup.parallel != "none" else 1,
                jobs=args.jobs,
                nvcc_threads=args.nvcc_threads,
                env=env,
                gib_per_thread=gib_per_thread,
                gib_from=gib_from,
            )
        except ValueError as error:
            raise UsageError(str(error)) from None
        env.update(plan.env(env))
        par = plan.to_json()
        if setup.parallel == "none":
            par["reason"] += "; setup.py at this ref has no --parallel: one extension at a time"
        elif setup.parallel == apex_setup.ARGV and int(par["apex_parallel_build"]) > 1:
            par["reason"] += f"; extensions at once passed as setup.py's --parallel {par['apex_parallel_build']}"
    _say(f"parallelism: {par['reason']}")
    options = apex_setup.pip_options(setup, switches, int(par["apex_parallel_build"]))
    if setup.style == apex_setup.ARGV:
        passed = (f"{' '.join(switches) or 'no switch'} as pip --config-settings=--build-option=..., one setting per switch"
                  if switches else "no switch (Python-only)")
    else:
        passed = f"{' '.join(f'{f}=1' for f in flags) or 'no APEX_* variable'} in pip's environment"
    if not shutil.which("ninja", path=env["PATH"]):
        _say("WARNING: ninja not found: torch compiles one file at a time without it (pip install ninja)")

    with tempfile.TemporaryDirectory(prefix="apex-builder-") as work:
        cc_env, ccache = ccache_env(args.ccache, env, src, versions["nvcc_path"], Path(work))
        env.update(cc_env)
        before = ccache_stats(env) if ccache["used"] else {}
        if not args.keep_build_dir:
            shutil.rmtree(
                src / "build", ignore_errors=True
            )  # a clean build: no stale objects from another config
        _say(
            f"building {src} flags={' '.join(flags) or 'none (Python-only)'} TORCH_CUDA_ARCH_LIST={env.get('TORCH_CUDA_ARCH_LIST', '(unset)')}"
        )
        _say(f"flag style: {setup.style} ({setup.evidence}); passing {passed}")
        wheel, stats = build_wheel(src, out, env, log_path, options, setup)
        if ccache["used"]:
            after = ccache_stats(env)
            ccache["stats"] = {k: after[k] - before.get(k, 0) for k in after}

    log_lines = log_path.read_text(errors="replace").splitlines()
    built = build_outputs.extension_modules(wheel)
    manifest = BuildManifest(
        apex=apex_identity(src, args.apex_ref, args.apex_source, args.apex_commit),
        flags=flags,
        expected_modules=tuple(expected),
        built_modules=tuple(built),
        # the flags' modules this ref's setup.py does not have (older tags lack some), so not expected
        absent_at_ref=tuple(absent),
        flag_style={"style": setup.style, "evidence": setup.evidence, "passed": passed, "pip_options": options},
        skipped_extensions=tuple(build_outputs.skipped_extensions(log_lines)),
        # a build with no CUDA module compiles for no arch, whatever the environment says
        arch_list=env.get("TORCH_CUDA_ARCH_LIST") if any(module_map.module(m).cuda for m in expected) else None,
        versions={k: v for k, v in versions.items() if k != "nvcc_path"},
        parallelism=par,
        build={
            "started_at": started.isoformat(timespec="seconds"),
            **stats,
            "peak_rss_method": "summed RSS of the pip process tree sampled from /proc every 0.5 s "
            "(peak_rss_single_process_mb: getrusage ru_maxrss of the largest child)",
            "host": socket.gethostname(),
            "cores": len(os.sched_getaffinity(0)),
            "wheel": wheel.name,
            "wheel_sha256": sha256_of(wheel),
            "log": LOG_NAME,
            "ccache": ccache,
            "naive_recipe": bool(args.naive),
            "cuda_from_pypi": getattr(args, "cuda_from_pypi_record", None),
            "timing": compile_timing(src / "build", stats, len(os.sched_getaffinity(0)), int(par["nvcc_threads"])),
        },
        cell=args.cell,
        inputs={
            "base_image": args.base_image,
            "base_image_digest": args.base_image_digest,
            "torch_wheel_sha256": wheel_hashes(args.wheel_hashes),
        },
    )
    manifest_path = write_json(out / MANIFEST_NAME, manifest.to_json())
    _say(
        f"wheel {wheel} ({stats['wall_s']} s, peak {stats['peak_rss_mb']:.0f} MiB); manifest {manifest_path}"
    )
    _say(f"built modules: {', '.join(built) or 'none'}")
    _say(timing_line(manifest.build))

    missing = build_outputs.missing_modules(expected, built, log_lines)
    if missing:
        cause = build_outputs.nothing_built_cause(setup.style, setup.evidence, passed, log_lines, log_path)
        print(build_outputs.gate_report(missing, expected, cause, log_path, "warning" if args.no_gate else "error"),
              file=sys.stderr, flush=True)
    if missing and not args.no_gate:
        return exit_codes.FAILED
    if args.install:
        return install_and_verify(wheel, manifest_path, out, env)
    return exit_codes.OK


if __name__ == "__main__":  # the Dockerfile's apex-build stage; build.py wheel calls main() under the same rules
    raise SystemExit(entry_point.run("apex-builder", main))
