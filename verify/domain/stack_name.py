"""A stack's name, the index's folder for it: `torch2.11-cu130` (torch minor, torch's CUDA build), `cpu` for
a CPU torch. The builder stamps it into each wheel, `build.py index` files the wheel under it, and
`apex-verify install` computes it from the installed torch to find its wheel: one rule for all three."""

from __future__ import annotations

import re

# re.ASCII: `\d` alone also matches other scripts' digits (`٢.١١`), which would name a stack folder that
# `apex-verify install` (and a reader of the index) never computes
_MINOR = re.compile(r"^(\d+)\.(\d+)", re.ASCII)
_NAME = re.compile(r"torch(?P<major>\d+)\.(?P<minor>\d+)-(?P<cuda>cpu|cu\d+)", re.ASCII)


def torch_minor(torch_version: str) -> str:
    """'2.11.0+cu130' -> '2.11'."""
    found = _MINOR.match(torch_version or "")
    if not found:
        raise ValueError(f"torch version {torch_version!r} does not start with MAJOR.MINOR")
    return f"{found.group(1)}.{found.group(2)}"


def cuda_tag(torch_cuda: str | None) -> str:
    """torch's CUDA '13.0' -> 'cu130'; a CPU torch (None) -> 'cpu'."""
    if not torch_cuda:
        return "cpu"
    found = _MINOR.match(torch_cuda)
    if not found:
        raise ValueError(f"torch CUDA version {torch_cuda!r} does not start with MAJOR.MINOR")
    return f"cu{found.group(1)}{found.group(2)}"


def stack_name(torch_version: str, torch_cuda: str | None) -> str:
    """'2.11.0+cu130', '13.0' -> 'torch2.11-cu130'."""
    return f"torch{torch_minor(torch_version)}-{cuda_tag(torch_cuda)}"


def parse(name: str) -> tuple[tuple[int, int], str] | None:
    """'torch2.11-cu130' -> ((2, 11), 'cu130'); None for a name of another shape."""
    found = _NAME.fullmatch(name)
    if not found:
        return None
    return (int(found["major"]), int(found["minor"])), found["cuda"]
