"""Layer 1: what this process runs on: Python, torch and its CUDA build, driver, GPU, nvcc and gcc.

torch is imported here, once, lazily: the rest of verify asks this module instead of importing it.
External tools are asked with short timeouts and in parallel, so a slow nvidia-smi cannot stall --static.
"""

from __future__ import annotations

import concurrent.futures
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from verify.checks import Check, Status
from verify.domain.arch import Arch
from verify.domain.report_json import DriverJSON, EnvironmentJSON, GpuJSON, ToolJSON, TorchJSON
from verify.layers import drivers
from verify.runtime import input_files, interrupts

TOOL_TIMEOUT_S = 5.0
_DRIVER_PROC = Path("/proc/driver/nvidia/version")


def _run_tool(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and Path(root, "bin", "nvcc").is_file():
            return str(Path(root, "bin", "nvcc"))
    return None


def nvcc_info() -> ToolJSON | None:
    path = _nvcc_path()
    out = _run_tool([path, "--version"]) if path else None
    if not out:
        return None
    match = re.search(r"release (\d+\.\d+), V([\d.]+)", out)
    return {
        "path": path,
        "version": match.group(1) if match else None,
        "full": match.group(2) if match else None,
    }


def gcc_info() -> ToolJSON | None:
    path = shutil.which(os.environ.get("CC") or "gcc") or shutil.which("gcc")
    out = _run_tool([path, "--version"]) if path else None
    if not out:
        return None
    first = out.splitlines()[0] if out else ""
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)\s*$", first) or re.search(r"(\d+\.\d+\.\d+)", first)
    return {"path": path, "version": match.group(1) if match else None, "banner": first.strip()}


def driver_version(proc_file: Path = _DRIVER_PROC) -> tuple[str | None, str | None]:
    """(version, source): the kernel module's version file first (no process), else nvidia-smi."""
    try:
        text = input_files.read_system_text(proc_file)
        match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
        if match:
            return match.group(1), str(proc_file)
    except input_files.InputFileError:
        pass
    if shutil.which("nvidia-smi"):
        out = _run_tool(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        if out and out.strip():
            return out.strip().splitlines()[0], "nvidia-smi"
    return None, None


def _torch_info() -> tuple[TorchJSON | None, str | None]:
    try:
        # a signal inside torch's import would be raised in its C++ initialisers, which turn it into
        # another error (read as "torch cannot be imported") or abort: it is raised once the import is done
        with interrupts.deferred():
            import torch
    except Exception as exc:  # an import error of any kind is the finding, not a crash
        interrupts.raise_if_received()  # an error that was a signal in disguise: the run stops, no finding
        return None, f"{type(exc).__name__}: {exc}"
    info: TorchJSON = {
        "version": torch.__version__,
        "path": str(Path(torch.__file__).parent),
        "cuda": torch.version.cuda,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "arch_list": list(torch.cuda.get_arch_list()) if torch.version.cuda else [],
        "cuda_available": False,
        "device_count": 0,
        "gpu": None,
    }
    try:
        info["cuda_available"] = bool(torch.cuda.is_available())
        if info["cuda_available"]:
            info["device_count"] = torch.cuda.device_count()
            # every visible GPU (a cluster node has 8); `gpu` is device 0, where parity and timing run
            info["gpus"] = [_gpu(torch, i) for i in range(info["device_count"])]
            first = info["gpus"][0].copy()
            del first["index"]
            info["gpu"] = first
    except Exception as exc:  # a broken driver shows up here; report it, don't die
        info["cuda_error"] = f"{type(exc).__name__}: {exc}"
    return info, None


def _gpu(torch: Any, index: int) -> GpuJSON:
    props = torch.cuda.get_device_properties(index)
    return {
        "index": index,
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sm": f"sm_{props.major}{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "multiprocessors": props.multi_processor_count,
    }


def device_capabilities(env: EnvironmentJSON) -> list[tuple[int, int]]:
    """Every visible GPU's compute capability, device 0 first; [] without a GPU."""
    gpus = (env.get("torch") or {}).get("gpus") or []
    return [tuple(int(n) for n in g["capability"].split(".")) for g in gpus]  # type: ignore[misc]  # "M.m": a pair


def capability(env: EnvironmentJSON) -> tuple[int, int] | None:
    """The first GPU's compute capability from a collected environment, or None without a GPU."""
    gpu = (env.get("torch") or {}).get("gpu")
    if not gpu:
        return None
    major, minor = gpu["capability"].split(".")
    return int(major), int(minor)


def collect() -> tuple[EnvironmentJSON, list[Check]]:
    """The environment block of the report and the layer-1 checks."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        nvcc_f = pool.submit(nvcc_info)
        gcc_f = pool.submit(gcc_info)
        driver_f = pool.submit(driver_version)
        torch_info, torch_error = _torch_info()
        nvcc, gcc, (driver, driver_source) = nvcc_f.result(), gcc_f.result(), driver_f.result()

    env: EnvironmentJSON = {
        "python": {
            "version": platform.python_version(),
            "executable": sys.executable,
            "implementation": platform.python_implementation(),
        },
        "platform": {
            "system": platform.system(),
            "machine": platform.machine(),
            "release": platform.release(),
        },
        "torch": torch_info,
        "torch_error": torch_error,
        "driver": _driver_block(driver, driver_source, torch_info),
        "nvcc": nvcc,
        "gcc": gcc,
    }
    return env, _checks(env)


def _driver_block(driver: str | None, source: str | None, torch_info: TorchJSON | None) -> DriverJSON:
    """The driver and, when torch is a CUDA build, whether it is new enough for torch's CUDA."""
    block: DriverJSON = {"version": driver, "source": source}
    cuda = (torch_info or {}).get("cuda")
    if driver and cuda:
        try:
            verdict = drivers.judge(driver, cuda)
        except ValueError:  # an unparsable version string: say nothing rather than guess
            return block
        block["supports_torch_cuda"] = verdict.ok
        if verdict.floor:
            block["needs_branch"] = verdict.floor.branch
    return block


def driver_too_old(env: EnvironmentJSON) -> bool:
    """The driver cannot run torch's CUDA and torch sees no device: the node, not the image, must change."""
    torch_info = env.get("torch") or {}
    return (env.get("driver") or {}).get("supports_torch_cuda") is False and not torch_info.get(
        "cuda_available"
    )


def _driver_check(env: EnvironmentJSON) -> Check:
    driver = env["driver"]
    if not driver["version"]:
        return Check("environment", "driver", Status.INFO, "no NVIDIA driver found")
    torch_info = env.get("torch") or {}
    where = f"from {driver['source']}"
    if driver.get("supports_torch_cuda") is None:
        return Check("environment", "driver", Status.INFO, f"NVIDIA driver {driver['version']} ({where})")
    cuda = torch_info.get("cuda")
    assert cuda is not None  # supports_torch_cuda is set only when torch is a CUDA build
    verdict = drivers.judge(driver["version"], cuda)
    assert verdict.floor is not None  # supports_torch_cuda is this judge's ok: not None, so it found a floor
    details = {
        "driver": driver["version"],
        "driver_branch": drivers.branch_of(driver["version"]),
        "torch_cuda": torch_info["cuda"],
        "needs_branch": verdict.floor.branch,
        "facts": drivers.source(),
    }
    if verdict.ok:
        return Check(
            "environment", "driver", Status.PASS, f"{verdict.summary}: OK ({where})", details=details
        )
    if torch_info.get("cuda_available"):  # forward compatibility (cuda-compat) makes it work anyway
        return Check(
            "environment",
            "driver",
            Status.WARN,
            f"{verdict.summary}, yet torch sees the GPU (CUDA forward compatibility in use?); "
            f"{verdict.fix()}",
            details=details,
        )
    return Check(
        "environment",
        "driver",
        Status.FAIL,
        f"driver too old for this torch's CUDA {torch_info['cuda']}: {verdict.summary} ({where}), so torch "
        f"sees no CUDA device; {verdict.fix()}",
        details=details,
    )


def _checks(env: EnvironmentJSON) -> list[Check]:
    checks = [
        Check(
            "environment",
            "python",
            Status.INFO,
            f"Python {env['python']['version']} ({env['python']['executable']})",
        )
    ]
    torch_info = env["torch"]
    if torch_info is None:
        checks.append(
            Check(
                "environment",
                "torch",
                Status.FAIL,
                f"torch is not importable ({env['torch_error']}); install the image's torch first",
            )
        )
        return checks
    checks.append(
        Check(
            "environment",
            "torch",
            Status.PASS,
            f"torch {torch_info['version']} (CUDA {torch_info['cuda'] or 'none: CPU-only build'},"
            f" C++11 ABI {torch_info['cxx11_abi']}, archs {' '.join(torch_info['arch_list']) or 'none'})",
            details={k: torch_info[k] for k in ("version", "cuda", "cxx11_abi", "arch_list")},
        )
    )
    gpu = torch_info["gpu"]
    if gpu:
        others = _other_gpus(torch_info)
        checks.append(
            Check(
                "environment",
                "gpu",
                Status.PASS,
                f"{gpu['name']}, compute capability {gpu['capability']} ({gpu['sm']}),"
                f" {gpu['memory_gib']} GiB, {torch_info['device_count']} device(s)"
                + (f"; {others}" if others else ""),
                details=dict(gpu),
            )
        )
        archs = torch_info["arch_list"]
        if archs and gpu["sm"] not in archs and not _ptx_covers(archs, capability(env)):
            checks.append(
                Check(
                    "environment",
                    "torch_arch",
                    Status.WARN,
                    f"torch's own kernels are built for {' '.join(archs)}, not {gpu['sm']}: install a torch wheel for this GPU",
                )
            )
    elif torch_info["cuda"] is None:
        checks.append(
            Check(
                "environment",
                "gpu",
                Status.WARN,
                "torch is a CPU-only build: no CUDA device can be used; Apex's CUDA extensions need a CUDA build of torch",
            )
        )
    elif driver_too_old(env):
        checks.append(
            Check(
                "environment",
                "gpu",
                Status.WARN,
                f"no CUDA device usable: the NVIDIA driver {env['driver']['version']} is too old for "
                f"CUDA {torch_info['cuda']} (see environment.driver); GPU layers cannot run here",
            )
        )
    else:
        reason = torch_info.get("cuda_error") or "torch.cuda.is_available() is False"
        checks.append(
            Check(
                "environment",
                "gpu",
                Status.WARN,
                f"no CUDA device visible ({reason}); GPU layers cannot run here",
            )
        )
    checks.append(_driver_check(env))
    for tool in ("nvcc", "gcc"):
        info = env[tool]
        checks.append(
            Check(
                "environment",
                tool,
                Status.INFO,
                f"{tool} {info['version']} at {info['path']}"
                if info
                else f"{tool} not found (normal in runtime images)",
            )
        )
    return checks


def _other_gpus(torch_info: TorchJSON) -> str:
    """'' on one GPU or a node of identical ones; else which devices differ from device 0."""
    gpus = torch_info.get("gpus") or []
    if len(gpus) < 2:
        return ""
    first = (gpus[0]["name"], gpus[0]["capability"])
    differ = [g for g in gpus[1:] if (g["name"], g["capability"]) != first]
    if not differ:
        return f"all {len(gpus)} alike; parity and timing on cuda:0, a smoke check on each other"
    return "differs: " + ", ".join(f"cuda:{g['index']} {g['name']} ({g['sm']})" for g in differ)


def _ptx_covers(arch_list: list[str], cap: tuple[int, int] | None) -> bool:
    if cap is None:
        return False
    for name in arch_list:  # torch's list: sm_90 (SASS), compute_90 (PTX, which newer GPUs JIT-compile)
        arch = Arch.from_nvcc_name(name) if name.startswith("compute_") else None
        if arch is not None and not arch.suffix and arch.capability <= tuple(cap):
            return True
    return False
