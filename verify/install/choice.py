"""Which of an index's stacks and wheels fit this environment, or why none does.

The stack name carries torch's minor and CUDA build (`torch2.11-cu130`); the wheel file names carry the
Python and platform tags. A CUDA build that differs is no match even on the same torch minor: Apex's
extensions link the CUDA runtime torch was built with. The C++ ABI is not in the index's names (every
wheel is built against its torch, whose ABI it inherits), so it is shown, not matched.
"""

from __future__ import annotations

import dataclasses
import re

from verify.domain import stack_name
from verify.install.index_stacks import IndexStack
from verify.install.local_stack import LocalStack
from verify.install.problem import InstallProblem

# PEP 600's legacy aliases: the glibc each promises
_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(.+)$")


@dataclasses.dataclass(frozen=True)
class Choice:
    stack: IndexStack
    wheels: tuple[str, ...]  # the stack's wheels this Python and platform can install


def wheel_fits(wheel: str, local: LocalStack) -> bool:
    """Does the wheel file name's tag triple (PEP 425, compressed sets allowed) fit this Python?"""
    parts = wheel[: -len(".whl")].split("-") if wheel.endswith(".whl") else []
    if len(parts) not in (5, 6):
        return False
    pythons, abis, platforms = (set(p.split(".")) for p in parts[-3:])
    major = local.python_tag[2:3]
    python_ok = bool(pythons & {local.python_tag, f"py{major}", f"py{local.python_tag[2:]}"})
    abi_ok = bool(abis & {local.python_tag, "abi3", "none"})
    return python_ok and abi_ok and any(_platform_fits(p, local) for p in platforms)


def _platform_fits(tag: str, local: LocalStack) -> bool:
    if tag in ("any", local.platform):
        return True
    arch = local.platform.removeprefix("linux_")
    found = _MANYLINUX.match(tag)
    need, tag_arch = ((int(found[1]), int(found[2])), found[3]) if found else (None, None)
    for alias, version in _LEGACY_MANYLINUX.items():
        if tag.startswith(alias + "_"):
            need, tag_arch = version, tag[len(alias) + 1 :]
    if need is None or tag_arch != arch or local.glibc is None:
        return False
    return tuple(int(x) for x in local.glibc.split(".")[:2]) >= need


def nearest(local: LocalStack, stacks: list[IndexStack]) -> IndexStack | None:
    """The stack closest to this torch: the same minor first (another CUDA build), then the nearest minor
    (the newer on a tie), then the nearest CUDA."""
    here_minor = tuple(int(x) for x in stack_name.torch_minor(local.torch_version).split("."))
    here_cuda = _cuda_number(stack_name.cuda_tag(local.torch_cuda))

    def distance(stack: IndexStack) -> tuple[int, int, int, int]:
        parsed = stack_name.parse(stack.name)
        assert parsed is not None  # index_stacks checked every name
        (major, minor), cuda = parsed
        gap = abs(major - here_minor[0]) * 100 + abs(minor - here_minor[1])
        return gap, -(major * 100 + minor), abs(_cuda_number(cuda) - here_cuda), -_cuda_number(cuda)

    return min(stacks, key=distance) if stacks else None


def _cuda_number(tag: str) -> int:
    return 0 if tag == "cpu" else int(tag[2:])


def build_command(local: LocalStack) -> str:
    archs = "" if not local.torch_cuda else f" --archs {local.gpu_arch or 'ARCHS'}"
    return f"python build.py wheel --apex-src APEX_CHECKOUT --out dist/{archs} --install"


def choose(local: LocalStack, stacks: list[IndexStack], index: str) -> Choice:
    """The stack named like this torch, with at least one wheel for this Python; else InstallProblem (3)."""
    here = local.name
    found = next((s for s in stacks if s.name == here), None)
    fitting = tuple(w for w in found.wheels if wheel_fits(w, local)) if found else ()
    if found and fitting:
        return Choice(found, fitting)
    listed = ", ".join(s.name for s in stacks) or "none"
    if found:
        problem = (
            f"{here} in {index} has no wheel for Python {local.python_tag} on {local.platform}"
            f" (it has {', '.join(found.wheels) or 'no wheels'})"
        )
    else:
        close = nearest(local, stacks)
        problem = f"{index} has no stack {here}; it has {listed}" + (
            f" (nearest: {close.name})" if close else ""
        )
    raise InstallProblem(
        f"no Apex wheel for this environment, {local.describe()}: {problem}; nothing was installed. Build one"
        f" here with `{build_command(local)}` and publish it with `python build.py index dist/ --index DIR`,"
        " or install the torch of a stack the index has"
    )
