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
import re
from pathlib import Path

from toolchain.errors import UsageError
from toolchain.spec.matrix import Cell

# The targets that run toolchain/builder/apex_builder.py (docker/Dockerfile's apex-build and what copies it).
APEX_TARGETS = frozenset({"runtime", "runtime-devel", "runtime-slim", "apex-build"})
CPU = "cpu"
_HEX_SHA = re.compile(r"^[0-9a-f]{7,40}$")


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


def _auto_prefix(cell: Cell) -> str:
    short = cell.apex_ref[:7] if _HEX_SHA.match(cell.apex_ref) else cell.apex_ref
    return f"apex-{short}-torch{cell.torch}-cu{cell.cuda}-py{cell.python}-"


def _without_apex(cell: Cell, target: str, cuda: str) -> str | None:
    """`TARGET-torchX-cuY-pyZ-OS` from an automatic cell id; None for an explicit --tag (the user's name)."""
    prefix = _auto_prefix(cell)
    if not cell.id.startswith(prefix):
        return None
    rest = cell.id[len(prefix) :]
    if cell.variant:  # archs, extras and flags describe Apex; a GCC choice still names the devel layers
        rest = (
            rest.removesuffix("-" + cell.variant)
            if rest.endswith("-" + cell.variant)
            else rest.rsplit("-", 1)[0]
        )
        rest = "-".join([rest, *(part for part in cell.variant.split("-") if re.fullmatch(r"gcc\d+", part))])
    return f"{target}-torch{cell.torch}-{'cpu' if cuda == CPU else 'cu' + cuda}-py{cell.python}-{rest}"


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
    tag = _without_apex(cell, target, cuda)
    return dataclasses.replace(cell, id=tag or cell.id, cuda=cuda, archs=() if cpu else cell.archs)
