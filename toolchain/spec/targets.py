"""Which Dockerfile targets hold a compiled Apex, and what an image without one is tagged and labelled.

A cell's id (`apex-6424da3-torch2.11.0-cu13.0-py3.12-ubuntu24.04`) promises Apex built for CUDA archs. Only
the targets that run the builder keep it; any other target (verify-runtime, torch, devel, apex-src) is
tagged by what it is (`verify-runtime-torch2.11.0-cu13.0-py3.12-ubuntu24.04`), with no Apex ref and no arch
list. A torch that is a CPU-only build (the CPU index, or a `+cpu` wheel in the wheelhouse) says `cpu`
where the CUDA version would be, in the tag and the labels; with it an Apex target is refused up front,
since Apex's setup.py cannot run against a CPU torch (the builder would fail after the downloads).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path

from toolchain.errors import UsageError
from toolchain.spec.cell_id import CPU, CellId
from toolchain.spec.matrix import Cell

# The targets that run toolchain/builder/apex_builder.py (docker/Dockerfile's apex-build and what copies it).
APEX_TARGETS = frozenset({"runtime", "runtime-devel", "runtime-slim", "apex-build"})
# The base each target's runtime-base stage stands on (docker/Dockerfile: FROM os-${RUNTIME_OS}): the OS
# alone for runtime-slim (its stage refuses any other value), BASE_RUNTIME_IMAGE for every other target.
RUNTIME_OS = {"runtime-slim": "slim"}
DEFAULT_RUNTIME_OS = "runtime"


def cpu_torch_source(cell: Cell, wheelhouse: Path | None) -> str | None:
    """Where a CPU-only torch would come from (for the message), or None when torch is a CUDA build.
    The wheelhouse wins, as in docker/install-torch.sh."""
    if wheelhouse is not None:
        wheels = sorted(Path(wheelhouse).glob(f"torch-{cell.torch}*.whl"))
        if wheels and all("+cpu" in wheel.name.split("-")[1] for wheel in wheels):
            return f"--wheelhouse {wheelhouse} holds {wheels[0].name}"
        return None
    if cell.torch_index_url.rstrip("/").rsplit("/", 1)[-1] == CPU:
        return f"the torch index {cell.torch_index_url} serves CPU-only torch"
    return None


def _without_apex(cell: Cell, target: str, cuda: str) -> CellId | None:
    """`TARGET-torchX-cuY-pyZ-OS` from an automatic cell id; None for an explicit --tag (the user's name)."""
    if cell.made_id is None:
        return None
    return cell.made_id.without_apex(target, cuda, cell.variant)


def for_target(cell: Cell, target: str, wheelhouse: Path | None = None) -> Cell:
    """The cell as built for `target`: unchanged for an Apex target with a CUDA torch; a tag and labels
    without Apex for any other target; a CPU torch for an Apex target is bad input (exit 2)."""
    cpu = cpu_torch_source(cell, wheelhouse)
    if target in APEX_TARGETS:
        if cpu:
            raise UsageError(
                f"--target {target} compiles Apex's CUDA extensions, but {cpu}; use a CUDA build of torch "
                f"{cell.torch} (drop --torch-index-url for the CUDA {cell.cuda} default, or fill the wheelhouse "
                "from it), or build --target verify-runtime (torch and verify, no Apex)"
            )
        return cell
    cuda = CPU if cpu else cell.cuda
    made = _without_apex(cell, target, cuda)
    return dataclasses.replace(
        cell,
        id=str(made) if made else cell.id,
        made_id=made,
        cuda=cuda,
        archs=() if cpu else cell.archs,
    )


def slim_base(devel: str, runtime: str) -> str:
    """runtime-slim's base: $BASE_SLIM_IMAGE; else the runtime base when it is no nvidia/cuda image (a local
    OS base: the slim image needs nothing more); else the OS an nvidia/cuda tag names (…-ubuntu24.04 ->
    ubuntu:24.04), so the venv finds the same Python at the same path."""
    if os.environ.get("BASE_SLIM_IMAGE"):
        return os.environ["BASE_SLIM_IMAGE"]
    for base in (runtime, devel):
        if base and not base.startswith(("nvidia/cuda", "nvcr.io/nvidia/cuda")):
            return base
    found = re.search(r"-(ubuntu|debian|rockylinux|ubi)(\d+(?:\.\d+)?)$", runtime or devel)
    return f"{found.group(1)}:{found.group(2)}" if found else "ubuntu:24.04"


def build_args(cell_args: Mapping[str, str], target: str, base_route: str = "nvidia") -> dict[str, str]:
    """A cell's build args as `target` is built from them: with runtime-slim's base and the RUNTIME_OS the
    target stands on (what `build.py image` passes and what the bake file holds), and the cell's base route
    (a label only: toolchain/spec/image_labels.py)."""
    args = dict(cell_args)
    args["BASE_ROUTE"] = base_route
    args["BASE_SLIM_IMAGE"] = slim_base(args.get("BASE_DEVEL_IMAGE", ""), args.get("BASE_RUNTIME_IMAGE", ""))
    args["RUNTIME_OS"] = RUNTIME_OS.get(target, DEFAULT_RUNTIME_OS)
    return args
