"""ccache for the build's C++ and CUDA compiles: the environment that routes them through it (torch's own
wrapper where it has one, a PATH masquerade where not) and the hit/miss counts the manifest records.
Standard library only: it runs inside the build image (Python 3.10).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from toolchain.errors import EnvironmentUnavailable


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
        out = subprocess.run(
            ["ccache", "--print-stats"], check=True, capture_output=True, text=True, env=env
        ).stdout
    except (subprocess.CalledProcessError, OSError):
        return {}
    stats = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    keys = ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")
    return {k: int(stats[k]) for k in keys if stats.get(k, "").isdigit()}
