"""What many tests share: the repository root, the two CLIs run as real subprocesses, the upstream Apex
archives, the frozen compatibility facts (what rule tests resolve against), docker/Dockerfile read as
stages, the rank-process token of the distributed tests, the report tests' factories, and a stand-in server
on 127.0.0.1 for the answers of an outside service.

Each runner drops the variables that change how a CLI talks (GitHub Actions annotations, a default
registry, a build manifest) so a test sees plain output unless it passes them in `env` itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import http.server
import os
import re
import shlex
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FROZEN_FACTS = REPO / "tests" / "fixtures" / "facts-2026-12-01" / "compat.toml"
# the matrix those frozen facts resolve (the live matrix may name rows only the live facts have)
FROZEN_MATRIX = FROZEN_FACTS.with_name("matrix.toml")
DOCKERFILE = REPO / "docker" / "Dockerfile"
# Upstream Apex source archives (never copied into the repo): beside the checkout, or where this names
# (CI makes them from GitHub: scripts/apex-fixtures.sh).
APEX_FIXTURES = Path(os.environ.get("APEX_TEST_FIXTURES", REPO.parent / "shared" / "fixtures"))
_AMBIENT = ("GITHUB_ACTIONS", "APEX_IMAGE_REGISTRY", "APEX_BUILD_MANIFEST")


def clean_env(env: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in _AMBIENT}
    environ.update(env or {})
    return environ


def run_build(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python build.py ARGS` from `cwd`."""
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env(env),
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def local_server(handler: Callable[..., http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` served by a threading HTTP server on 127.0.0.1 (a free port) while the block runs; yields
    its address, http://127.0.0.1:PORT (no trailing slash)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run_verify(
    *args: str,
    extra_path: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`python -m verify ARGS` with this checkout first on PYTHONPATH (`extra_path` before it)."""
    environ = clean_env()
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, str(REPO)) if p)
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "verify", *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=cwd or REPO,
        timeout=timeout,
        check=False,
    )


def unpack_apex(name: str, dest: Path) -> Path:
    """Unpack the upstream Apex archive apex-NAME.tar.gz (6424da3b, 25.04) into dest; its checkout root
    (setup.py, the `apex` package). Skips the test where the archive is absent."""
    import pytest

    archive = APEX_FIXTURES / f"apex-{name}.tar.gz"
    if not archive.is_file():
        pytest.skip(
            f"no Apex source archive at {archive}: set APEX_TEST_FIXTURES to a folder of them "
            "(bash scripts/apex-fixtures.sh DIR makes one from GitHub)"
        )
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return dest / "apex"


def frozen_facts():
    """The compatibility facts as of 2026-12-01 (tests/fixtures): what rule tests resolve cells against,
    so that an update of toolchain/data/compat.toml changes no rule test's outcome."""
    from toolchain.spec import compat

    return compat.load(FROZEN_FACTS)


def frozen_cell(values: dict, **kwargs):
    """toolchain.spec.matrix.cli_cell on the frozen facts (a rule test's cell)."""
    from toolchain.spec.matrix import cli_cell

    return cli_cell(values, facts=frozen_facts(), **kwargs)


def frozen_matrix(path: Path):
    """toolchain.spec.matrix.load_matrix on the frozen facts."""
    from toolchain.spec.matrix import load_matrix

    return load_matrix(path, facts=frozen_facts())


@dataclasses.dataclass(frozen=True)
class DockerfileStage:
    name: str
    parent: str  # the FROM image or stage
    instructions: tuple[str, ...]  # one per instruction, continuation lines joined

    @property
    def text(self) -> str:
        return "\n".join(self.instructions)

    def with_scripts(self) -> str:
        """The stage's text and that of each docker/*.sh its steps run (bound in at /run/apex-toolchain/docker)."""
        scripts = re.findall(r"/run/apex-toolchain/(docker/[\w-]+\.sh)", self.text)
        return "\n".join([self.text, *((REPO / path).read_text() for path in dict.fromkeys(scripts))])

    def args(self) -> dict[str, str | None]:
        """The ARGs this stage declares: name -> default (None: the global ARG of that name)."""
        found: dict[str, str | None] = {}
        for line in self.instructions:
            if line.startswith("ARG "):
                found.update(_arg_words(line))
        return found

    def labels(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for line in self.instructions:
            if line.startswith("LABEL "):
                found.update(word.split("=", 1) for word in shlex.split(line[len("LABEL ") :]))  # type: ignore[misc]  # KEY=VALUE: two items
        return found


@dataclasses.dataclass(frozen=True)
class Dockerfile:
    global_args: tuple[tuple[str, str | None], ...]  # the ARGs before the first FROM, in order (repeats kept)
    stages: dict[str, DockerfileStage]


def _arg_words(line: str) -> list[tuple[str, str | None]]:
    words = shlex.split(line[len("ARG ") :])
    return [(w.split("=", 1)[0], w.split("=", 1)[1] if "=" in w else None) for w in words]


@functools.lru_cache(maxsize=1)
def dockerfile() -> Dockerfile:
    """docker/Dockerfile as instructions (comments dropped, `\\` continuations joined) grouped by stage."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    instructions = [i.strip() for i in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines() if i.strip()]
    global_args: list[tuple[str, str | None]] = []
    stages: dict[str, DockerfileStage] = {}
    current: tuple[str, str, list[str]] | None = None
    for line in instructions:
        match = re.match(r"FROM (\S+) AS (\S+)$", line)
        if match:
            if current:
                stages[current[0]] = DockerfileStage(current[0], current[1], tuple(current[2]))
            current = (match[2], match[1], [])
        elif current is None:
            assert line.startswith("ARG "), f"before the first FROM only ARG may stand: {line}"
            global_args += _arg_words(line)
        else:
            current[2].append(line)
    if current:
        stages[current[0]] = DockerfileStage(current[0], current[1], tuple(current[2]))
    return Dockerfile(tuple(global_args), stages)


# ---------------------------------------------------------------- child processes and modules

RANK_TOKEN_ENV = "VERIFY_DIST_TEST_TOKEN"  # set per test; every rank process a test starts inherits it


def rank_token(monkeypatch) -> str:
    """A fresh token in the environment (and no fault hooks), so a test can find the rank processes it
    started by their environment afterwards (`leftover_processes`)."""
    import uuid

    from verify.distributed.plan import CPU_HOOK_ENV
    from verify.gpu.worker import FAULT_ENV

    value = uuid.uuid4().hex
    monkeypatch.setenv(RANK_TOKEN_ENV, value)
    monkeypatch.delenv(FAULT_ENV, raising=False)
    monkeypatch.delenv(CPU_HOOK_ENV, raising=False)
    return value


def leftover_processes(token: str) -> list[int]:
    """Live processes (other than this one) whose environment carries the token: rank processes left behind."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if f"{RANK_TOKEN_ENV}={token}".encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def importable(names) -> frozenset[str]:
    """Which of these modules import in this Python (compiled Apex extensions, where built)."""
    import importlib

    usable = set()
    for name in sorted(set(names)):
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        usable.add(name)
    return frozenset(usable)


# ---------------------------------------------------------------- factories for the report tests


def static_verify_report(path: Path) -> Path:
    """A real `verify --static` report written to path: this machine has torch but no Apex, so FAIL (exit 1)."""
    proc = run_verify("--static", "--quiet", "--json", str(path), timeout=300)
    assert proc.returncode == 1 and path.is_file(), proc.stderr
    return path


def matrix_cells(*cuda: str):
    """Cells of the frozen matrix ([defaults] + one CUDA each, archs 9.0), on the frozen facts."""
    return [frozen_cell({"archs": "9.0", "cuda": c}, matrix_path=FROZEN_MATRIX) for c in cuda]


def cell_result(cell, status: str, build: dict | None, verify: dict | None = None, *, run_id: str = "run1"):
    """A CellResult for `cell` as a run writes it (fixed times, so reports compare)."""
    from toolchain.runs.cell_result import BuildRecord, CellFields, CellResult, CellStatus, VerifyRecord

    return CellResult(
        id=cell.id,
        name=cell.name,
        run_id=run_id,
        cell=CellFields.from_json(cell.to_json()),
        status=CellStatus(status),
        started_at="2026-01-01T00:00:00+00:00",
        finished_at="2026-01-01T00:10:00+00:00",
        build=BuildRecord.from_json(build) if build is not None else None,
        verify=VerifyRecord.from_json(verify) if verify is not None else None,
    )
