"""Install the chosen stack's Apex with uv (when on PATH) or this Python's pip, torch pinned exactly.

The pin is a constraint, `torch==<the installed version>`, not a requirement: it cannot add torch where
there is none, and it stops the resolver from replacing the installed torch (the wheel's own pin,
`torch==2.11.*`, would allow another patch release from a wider index). `--index-url` is the stack's own
folder alone: with PyPI as an extra index the unrelated `apex` there could be chosen.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

from verify.install.problem import InstallProblem
from verify.runtime import child_processes

PROJECT = "apex"


@dataclasses.dataclass(frozen=True)
class InstallPlan:
    tool: str  # "uv" or "pip"
    argv: tuple[str, ...]  # without the constraint file, which exists only while it runs
    index_url: str
    torch_pin: str  # torch==2.13.0+cpu

    def shown(self) -> str:
        return " ".join([*self.argv, "--constraint", f"<({self.torch_pin})"])


def plan(index_url: str, torch_version: str, *, dry_run: bool) -> InstallPlan:
    pin = f"torch=={torch_version}"
    uv = shutil.which("uv")
    if uv:
        argv = [uv, "pip", "install", "--python", sys.executable, PROJECT, "--index-url", index_url]
        tool = "uv"
    elif importlib.util.find_spec("pip") is not None:
        argv = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", PROJECT]
        argv += ["--index-url", index_url]
        tool = "pip"
    else:
        raise InstallProblem(
            f"this Python ({sys.executable}) has no pip and uv is not on PATH; install one of them"
            f" ({sys.executable} -m ensurepip, or https://docs.astral.sh/uv/) and run this again"
        )
    return InstallPlan(tool, tuple([*argv, *(["--dry-run"] if dry_run else [])]), index_url, pin)


def run(install: InstallPlan) -> int:
    """Run the installer, its output passed through; its exit code."""
    with tempfile.TemporaryDirectory(prefix="apex-verify-install.") as work:
        constraints = Path(work) / "torch-pin.txt"
        constraints.write_text(install.torch_pin + "\n", encoding="utf-8")
        sys.stdout.flush()
        sys.stderr.flush()
        proc = child_processes.start([*install.argv, "--constraint", str(constraints)])
        try:
            return child_processes.reap(proc)
        finally:
            child_processes.kill(proc)
