"""Install the chosen stack's Apex with uv (when on PATH and it can see torch) or this Python's pip, torch
pinned exactly.

The pin is a constraint, `torch==<the installed version>`, not a requirement: it cannot add torch where
there is none, and it stops the resolver from replacing the installed torch (the wheel's own pin,
`torch==2.11.*`, would allow another patch release from a wider index). `--index-url` is the stack's own
folder alone: with PyPI as an extra index the unrelated `apex` there could be chosen.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from verify.install.problem import InstallProblem
from verify.runtime import atomic, child_processes

PROJECT = "apex"


@dataclasses.dataclass(frozen=True)
class InstallPlan:
    tool: str  # "uv" or "pip"
    argv: tuple[str, ...]  # without the constraint file, which exists only while it runs
    index_url: str
    torch_pin: str  # torch==2.13.0+cpu
    why: str = ""  # why this tool, when it is not the first choice

    def shown(self) -> str:
        return " ".join([*self.argv, "--constraint", f"<({self.torch_pin})"]) + (
            f" ({self.why})" if self.why else ""
        )


def torch_outside_env() -> str:
    """The folder torch is installed in, when it is not this environment's own site-packages ("" when it
    is, or when there is no torch). uv reads only the environment's own site-packages: a torch reached through
    a .pth file or a parent environment's folders is invisible to it, so it would look for torch on the
    stack's index (which holds none) and fail. pip reads every folder on sys.path."""
    try:
        home = Path(str(importlib.metadata.distribution("torch").locate_file(""))).resolve()
    except (importlib.metadata.PackageNotFoundError, OSError):
        return ""
    own = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    return "" if home in own else str(home)


def plan(index_url: str, torch_version: str, *, dry_run: bool) -> InstallPlan:
    pin = f"torch=={torch_version}"
    uv = shutil.which("uv")
    has_pip = importlib.util.find_spec("pip") is not None
    outside = torch_outside_env() if uv and has_pip else ""
    why = (
        f"not uv: torch is in {outside}, outside this environment, where uv does not look" if outside else ""
    )
    if uv and not outside:
        argv = [uv, "pip", "install", "--python", sys.executable, PROJECT, "--index-url", index_url]
        tool = "uv"
    elif has_pip:
        argv = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", PROJECT]
        argv += ["--index-url", index_url]
        tool = "pip"
    else:
        raise InstallProblem(
            f"this Python ({sys.executable}) has no pip and uv is not on PATH; install one of them"
            f" ({sys.executable} -m ensurepip, or https://docs.astral.sh/uv/) and run this again"
        )
    return InstallPlan(tool, tuple([*argv, *(["--dry-run"] if dry_run else [])]), index_url, pin, why)


def run(install: InstallPlan) -> int:
    """Run the installer, its output passed through; its exit code."""
    with tempfile.TemporaryDirectory(prefix="apex-verify-install.") as work:
        constraints = Path(work) / "torch-pin.txt"
        atomic.write_text(constraints, install.torch_pin + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
        proc = child_processes.start([*install.argv, "--constraint", str(constraints)])
        try:
            return child_processes.reap(proc)
        finally:
            child_processes.kill(proc)
