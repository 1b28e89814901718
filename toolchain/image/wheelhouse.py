"""What a `--wheelhouse` must hold for a cell, checked on the host before any build.

The torch stage (docker/install-torch.sh) installs from it with `--no-index`: torch at the cell's version
for the image's Python and machine, every dependency of that torch, and the build requirements. The
dependencies cannot be known without resolving torch's metadata, so the message gives the one `pip
download` command, in the cell's own values, that fills a wheelhouse with all of it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from toolchain.errors import UsageError
from toolchain.image.buildkit_build import DOCKERFILE, REPO_ROOT
from toolchain.spec import compat as compat_mod
from toolchain.spec.matrix import Cell
from toolchain.spec.targets import CPU
from verify.runtime import input_files

_REQUIREMENTS = re.compile(r'^ARG BUILD_REQUIREMENTS="([^"]+)"', re.M)
PYPI = "https://pypi.org/simple"


def build_requirements() -> list[str]:
    """The Dockerfile's BUILD_REQUIREMENTS default (one place: the torch stage's ARG)."""
    found = _REQUIREMENTS.search(input_files.read_shipped_text(REPO_ROOT / DOCKERFILE))
    return found.group(1).split() if found else []


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ ]", requirement, maxsplit=1)[0]


def download_command(cell: Cell, wheelhouse: Path) -> str:
    """Run on Linux of the image's machine: no --platform, since pip (23) does not widen `manylinux_2_28` to
    the older manylinux tags that ninja's and some NVIDIA wheels carry (seen: "no matching distribution")."""
    index = cell.torch_index_url
    if cell.cuda == CPU and index.rstrip("/").rsplit("/", 1)[-1] != CPU:  # a CPU cell refills with CPU torch
        index = compat_mod.load().index_url_pattern.format(cuda_tag=CPU)
    argv = ["pip", "download", "--dest", str(wheelhouse), "--only-binary=:all:"]
    argv += ["--python-version", cell.python, "--index-url", index]
    if index.rstrip("/") != PYPI:
        argv += ["--extra-index-url", PYPI]  # torch's index lacks some dependencies and build requirements
    return shlex.join([*argv, f"torch=={cell.torch}", *build_requirements()])


def missing(cell: Cell, wheelhouse: Path) -> list[str]:
    """What the torch stage would not find in `wheelhouse` (by wheel file name), in words."""
    names = [path.name for path in Path(wheelhouse).glob("*.whl")]
    if not names:
        return ["no .whl files there"]
    python_tag = "cp" + cell.python.replace(".", "")
    machine = compat_mod.load().platform(cell.platform).machine
    torch = [n for n in names if re.match(rf"torch-{re.escape(cell.torch)}(\+[\w.]+)?-", n)]
    problems = []
    if not torch:
        others = sorted(n for n in names if n.startswith("torch-"))
        problems.append(f"no torch {cell.torch} wheel" + (f" (it has {', '.join(others)})" if others else ""))
    elif not [n for n in torch if f"-{python_tag}-" in n and n.endswith(f"_{machine}.whl")]:
        problems.append(
            f"no torch {cell.torch} wheel for Python {cell.python} on {machine} "
            f"({python_tag}, *_{machine}.whl; it has {', '.join(sorted(torch))})"
        )
    for requirement in build_requirements():
        if not any(n.lower().startswith(_name(requirement).lower() + "-") for n in names):
            problems.append(f"no {_name(requirement)} wheel (a build requirement: {requirement})")
    return problems


def check(cell: Cell, wheelhouse: Path | None) -> None:
    """UsageError (exit 2) naming what is missing and the command that fills the wheelhouse."""
    if wheelhouse is None:
        return
    problems = missing(cell, wheelhouse)
    machine = compat_mod.load().platform(cell.platform).machine
    if problems:
        raise UsageError(
            f"--wheelhouse {wheelhouse} for cell {cell.name} ({cell.id}): {'; '.join(problems)}. It must "
            f"hold torch {cell.torch}, all its dependencies and the build requirements as wheels for "
            f"Python {cell.python} on {machine}; fill it with, on Linux {machine}: {download_command(cell, Path(wheelhouse))}"
        )
