"""`build.py release` (`make publish OUT=site`): the publish workflow's steps as one local command, each the
project's own command in a child process, so the rehearsal runs exactly what users and CI run:

  1. wheel    `build.py wheel --install` with the torch environment's Python (--python): built, gated
              (--wheels DIR instead: wheels `build.py wheel` already built and gated there)
  2. serve    `python -m toolchain.index.serve OUT --port 0` on 127.0.0.1
  3. index    `build.py index` into OUT: checked, tagged (manylinux_2_X), pages with the served address,
              what Apex requires besides torch served beside it (--dependency-wheels DIR, --no-download)
  4. venv     a fresh venv holding only that torch (`pip install torch==X`, the user's pip settings):
              nothing else, so the index alone must suffice for Apex
  5. tool     `pip install apex-verify --index-url URL/simple` (the index's own simple/: no stack named)
  6. install  `apex-verify install --index URL`: the stack found from the venv's torch, the wheel installed
              with torch pinned, verify --static: its exit code is the command's

The work folder (the wheel, the venv) is a temporary one, removed afterwards unless --keep-work; OUT keeps the
index. Exit codes: 0 PASS; 1 a step failed or verify failed; 2 usage; 3 the environment (no torch, no pip).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from toolchain.console import Console
from toolchain.errors import EnvironmentUnavailable, ToolchainError, UsageError
from verify.runtime import child_processes, exit_codes
from verify.runtime.messages import printable

REPO = Path(__file__).resolve().parents[2]
BUILD_PY = REPO / "build.py"
SERVE_START_S = 30.0  # the server prints its address once it listens: well under a second when healthy
clock: Callable[[], float] = time.monotonic  # tests inject one


class StepFailed(ToolchainError):
    """A step's command exited non-zero: its own output above says why; the release stops there."""

    exit_code = exit_codes.FAILED


@dataclasses.dataclass(frozen=True)
class Timed:
    step: str
    seconds: float


@dataclasses.dataclass
class Steps:
    """Runs each step's command with its output passed through, and keeps the walls."""

    say: Callable[[str], None]
    done: list[Timed] = dataclasses.field(default_factory=list)

    def run(self, step: str, argv: list[str]) -> int:
        self.say(f"[release] {step}: {' '.join(printable(a) for a in argv)}")
        started = clock()
        sys.stdout.flush()
        proc = child_processes.start(argv)
        try:
            code = child_processes.reap(proc)
        finally:
            child_processes.kill(proc)
        self.done.append(Timed(step, clock() - started))
        return code

    def must(self, step: str, argv: list[str]) -> None:
        code = self.run(step, argv)
        if code != exit_codes.OK:
            raise StepFailed(
                f"release: step {step} exited {code} (its output is above); nothing after it ran"
            )

    def walls(self) -> str:
        return ", ".join(f"{t.step} {t.seconds:.1f} s" for t in self.done)


def torch_of(python: str) -> tuple[str, str | None]:
    """(torch.__version__, torch.version.cuda) of that Python; EnvironmentUnavailable when it has none."""
    ask = "import torch; print(torch.__version__); print(torch.version.cuda or '')"
    try:
        done = subprocess.run([python, "-c", ask], capture_output=True, text=True, timeout=300)
    except OSError as exc:
        raise UsageError(
            f"--python {python}: cannot run it ({exc.strerror}); pass a Python that has torch"
        ) from None
    lines = done.stdout.split()
    if done.returncode != 0 or not lines:
        raise EnvironmentUnavailable(
            f"--python {python}: cannot import torch ({(done.stderr.strip().splitlines() or ['no output'])[-1]}); "
            "pass the Python of the torch environment the wheel is for"
        )
    return lines[0], (lines[1] if len(lines) > 1 else None)


def free_port() -> int:
    """A port 127.0.0.1 has free now: the pages are written with the address before the server starts
    (it serves only a folder that holds an index)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class IndexServer:
    """The local index server (toolchain/index/serve.py) on 127.0.0.1:`port`; `url` ends in '/'."""

    def __init__(self, index: Path, port: int) -> None:
        argv = [sys.executable, "-m", "toolchain.index.serve", str(index), "--port", str(port)]
        self.proc = child_processes.start(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # `serving INDEX at http://127.0.0.1:PORT/`
        if not line.rstrip().endswith("/") or " at http" not in line:
            self.close()
            raise EnvironmentUnavailable(
                f"release: the index server did not start (it said {line.strip()!r}); run "
                f"`python -m toolchain.index.serve {index} --port {port}` to see why"
            )
        self.url = line.rsplit(" ", 1)[-1].strip()

    def close(self) -> None:
        child_processes.kill(self.proc)
        child_processes.reap(self.proc)


def fresh_venv(python: str, path: Path, torch_spec: list[str], steps: Steps) -> Path:
    """A venv of the same Python with pip and only torch: the user who has just that. What Apex requires
    besides torch (packaging) comes from the index, as it does for that user."""
    steps.must("venv", [python, "-m", "venv", str(path)])
    venv_python = path / "bin" / "python"
    steps.must("torch", [str(venv_python), "-m", "pip", "install", "--quiet", *torch_spec])
    return venv_python


def cmd_release(args: argparse.Namespace, console: Console) -> int:
    if (args.apex_src is None) == (args.wheels is None):
        raise UsageError(
            "build.py release: pass --apex-src DIR (build the wheel) or --wheels DIR (built ones)"
        )
    if args.apex_src is not None and not (args.apex_src / "setup.py").is_file():
        raise UsageError(f"--apex-src {printable(args.apex_src)}: no setup.py there; pass an Apex checkout")
    if args.wheels is not None and not any(args.wheels.glob("*.whl")):
        raise UsageError(
            f"--wheels {printable(args.wheels)}: no .whl there; pass build.py wheel's --out folder"
        )
    python = args.python or sys.executable
    version, cuda = torch_of(python)
    public = version.split("+", 1)[0]
    torch_spec = [
        f"torch=={public}",
        *(["--index-url", args.torch_index_url] if args.torch_index_url else []),
    ]
    steps = Steps(console.line)
    work = Path(tempfile.mkdtemp(prefix="apex-release-"))
    started = clock()
    try:
        code = _release(args, python, torch_spec, work, steps)
    finally:
        if args.keep_work:
            console.line(printable(f"[release] work folder kept: {work}"))
        else:
            shutil.rmtree(work, ignore_errors=True)
    verdict = "PASS" if code == exit_codes.OK else "FAIL"
    console.line(
        printable(
            f"release: {verdict} - torch {version} ({'CUDA ' + cuda if cuda else 'CPU'}): the index in "
            f"{printable(args.out)}, apex-verify install exit {code}, {clock() - started:.1f} s ({steps.walls()})"
        )
    )
    return exit_codes.OK if code == exit_codes.OK else exit_codes.FAILED


def _release(args: argparse.Namespace, python: str, torch_spec: list[str], work: Path, steps: Steps) -> int:
    dist = args.wheels or work / "dist"
    if args.wheels is None:
        wheel = [python, str(BUILD_PY), "wheel", "--apex-src", str(args.apex_src), "--out", str(dist)]
        for option, value in (
            ("--flags", args.flags),
            ("--archs", args.archs),
            ("--apex-commit", args.apex_commit),
        ):
            wheel += [option, value] if value else []
        steps.must("wheel", [*wheel, "--install"])
    port = free_port()
    address = f"http://127.0.0.1:{port}/"
    index = [sys.executable, str(BUILD_PY), "index", str(dist), "--index", str(args.out)]
    for folder in args.dependency_wheels:
        index += ["--dependency-wheels", str(folder)]
    index += ["--no-download"] if args.no_download else []
    steps.must("index", [*index, "--address", address])
    venv_python = fresh_venv(python, work / "venv", torch_spec, steps)
    server = IndexServer(args.out, port)
    try:
        tool = [str(venv_python), "-m", "pip", "install", "--quiet", "apex-verify"]
        steps.must("apex-verify", [*tool, "--index-url", f"{server.url}simple"])
        return steps.run(
            "install", [str(work / "venv" / "bin" / "apex-verify"), "install", "--index", server.url]
        )
    finally:
        server.close()
