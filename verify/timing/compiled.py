"""torch.compile as the native alternative: can this torch and host compile, and how a call is compiled.

Shared by the compile layer (verify/gpu/compile_check.py), the timing layer and `verify bench`: one answer
to "does Inductor work here" and one way to compile, so a compiled figure means the same everywhere.
A compile is never timed: callers compile (and run once) while building a variant, before any warm-up.
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# the default backend (Inductor) in its default mode: what `torch.compile(model)` gives a user
MODE = "default"


def first_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return (lines[0] if lines else "(no message)")[:limit]


def inductor_problem(cuda: bool = True) -> str | None:
    """Why torch.compile's default backend cannot run here, or None. Inductor's CUDA kernels are Triton's,
    and Triton builds its launcher with the host's C compiler on first use."""
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile (2.0 or newer has)"
    try:
        importlib.import_module("torch._inductor")
    except Exception as err:  # noqa: BLE001 - a torch without Inductor (or broken): the reason is the finding
        return f"this torch has no usable Inductor ({type(err).__name__}: {first_line(str(err))})"
    if cuda:
        try:
            importlib.import_module("triton")
        except Exception as err:  # noqa: BLE001
            return (
                f"Inductor needs Triton for CUDA and `import triton` fails ({type(err).__name__}:"
                f" {first_line(str(err))}): install the triton that matches torch {torch.__version__}"
            )
    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")):
        return "no C compiler (cc, gcc or clang) on PATH: Triton and Inductor build their launchers with one"
    where = str(Path(torch.__file__).parent)
    if not cuda and any(c.isspace() for c in where):
        # seen with torch 2.13: its C++ build puts -I<torch>/include on the command line unquoted
        return (
            f"torch is installed under a path with a space ({where}): Inductor's C++ compile for the CPU "
            "cannot build there; use a torch (venv) whose path has no spaces"
        )
    return None


def compiled(fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    """torch.compile(fn) in verify's one way (the default backend and mode unless options say otherwise)."""
    return torch.compile(fn, **options)
