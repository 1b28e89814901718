"""Apex-image tier: the README's no-registry command builds a real Apex image end to end on a CPU machine.

Local debootstrap base + CUDA from NVIDIA's wheels + torch's CUDA wheel from PyPI + upstream Apex (the pinned
fixture archive, given as `--apex-src DIR` like any user's checkout) compiled for one arch, gated in the build
by `verify --static`, into the `runtime-slim` target. Built once per session; a second session on the same
daemon reuses BuildKit's layers and its pip and ccache cache mounts.

It skips only when the fixture archive is absent (outside this project's machines a user clones from GitHub
instead); a missing engine, a full disk, PyPI unreachable or a failed build fail the tier with the reason.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.support import APEX_FIXTURES, REPO, clean_env
from toolchain.errors import EnvironmentUnavailable
from toolchain.image import build_log, buildkit_build

ARCHIVE = APEX_FIXTURES / "apex-6424da3b.tar.gz"
ARCHS = "9.0"  # the command's one arch: the H200's
# A cold build on a fresh 2-core machine: ~2 min of downloads and installs, then every core unit compiled once
# (measured in reports/cpu-2026-12-01-slim-image/). The bound stops a hung build well inside CI's 90 minutes.
BUILD_TIMEOUT_S = float(os.environ.get("APEX_IMAGE_BUILD_TIMEOUT_S", 60 * 60))
# What a cold build writes under Docker's root: the pip cache (~3 GB of wheels), the torch stage's venv
# (~4.9 GB), the Apex build layer, and the slim image's copy of the venv (~4.9 GB). With the torch stage cached
# (a second run on the same daemon) about 6 GiB is enough: APEX_IMAGE_DISK_GIB says so. .ci/run reclaims the
# same figure on its runner before each cold build.
DISK_DEFAULT_GIB = 20
DISK_NEEDED_GIB = float(os.environ.get("APEX_IMAGE_DISK_GIB", DISK_DEFAULT_GIB))


@dataclasses.dataclass(frozen=True)
class BuiltImage:
    tag: str
    code: int
    console: str  # build.py's own output
    out: Path  # build.py --out
    logs: Path  # build.py --logs
    wall_s: float


def no_registry_argv(apex_src: Path, out: Path, logs: Path, extra_ca: Path | None) -> list[str]:
    """The no-registry command of docs/ci.md (build_log.NO_REGISTRY_COMMAND), as the argv
    of this interpreter, plus the inputs a machine without GitHub needs."""
    words = shlex.split(build_log.NO_REGISTRY_COMMAND.split("&&", 1)[1])
    assert words[:2] == ["python3", "build.py"], build_log.NO_REGISTRY_COMMAND
    argv = [
        sys.executable,
        str(REPO / "build.py"),
        *words[2:],
        "--apex-src",
        str(apex_src),
        "--progress",
        "plain",
        "--out",
        str(out),
        "--logs",
        str(logs),
    ]
    tag = os.environ.get("APEX_IMAGE_TAG")  # a tag of one's own on a machine where others build the same cell
    return argv + (["--extra-ca", str(extra_ca)] if extra_ca else []) + (["--tag", tag] if tag else [])


def _host_ca_bundle() -> Path | None:
    """PyPI's certificate verifies here only with the host's bundle (FACTS.md): passed as the extra-CA secret."""
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def _check_disk(client) -> None:
    root = Path(client.info().get("DockerRootDir") or "/var/lib/docker")
    free_gib = shutil.disk_usage(root if root.exists() else "/").free / 2**30
    if free_gib < DISK_NEEDED_GIB:
        pytest.fail(
            f"only {free_gib:.1f} GiB free under {root}; a cold Apex image build needs about {DISK_NEEDED_GIB} "
            "GiB (torch's CUDA wheels, their venv twice, the build cache): free space with "
            "`docker builder prune` / `docker image prune` and rerun (APEX_IMAGE_DISK_GIB=N when its layers are cached)",
            pytrace=False,
        )


def _run_bounded(argv: list[str], console: Path, timeout: float) -> int:
    """build.py in its own process group; past the bound it gets SIGTERM (it ends the docker client it
    started, and BuildKit cancels the build), then SIGKILL for the whole group."""
    with open(console, "w") as sink:
        proc = subprocess.Popen(
            argv, cwd=REPO, env=clean_env(), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            pytest.fail(
                f"the Apex image build did not finish within {timeout:.0f} s (APEX_IMAGE_BUILD_TIMEOUT_S); "
                f"its console: {console}; last lines:\n{_tail(console)}",
                pytrace=False,
            )
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def _tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


@pytest.fixture(scope="session")
def apex_image(tmp_path_factory: pytest.TempPathFactory) -> BuiltImage:
    if not ARCHIVE.is_file():
        pytest.skip(
            f"no Apex source archive at {ARCHIVE} (set APEX_TEST_FIXTURES to the folder holding "
            "apex-6424da3b.tar.gz); this tier builds Apex from it"
        )
    try:
        buildkit_build.ping()
        buildkit_build.docker_client()
    except EnvironmentUnavailable as error:
        pytest.fail(f"no usable Docker engine ({error}); run scripts/ensure-docker.sh", pytrace=False)
    import docker

    client = docker.from_env(timeout=300)
    base = build_log.NO_REGISTRY_COMMAND.split("--base-devel ", 1)[1].split()[0]
    try:
        client.images.get(base)
    except docker.errors.ImageNotFound:
        pytest.fail(
            f"no base image {base}; run scripts/ensure-docker.sh (it makes one with debootstrap)",
            pytrace=False,
        )
    _check_disk(client)

    where = tmp_path_factory.mktemp("apex-image")
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(where / "src", filter="data")
    apex_src = where / "src" / "apex"
    argv = no_registry_argv(apex_src, where / "out", where / "logs", _host_ca_bundle())
    start = time.monotonic()
    code = _run_bounded(argv, where / "console.log", BUILD_TIMEOUT_S)
    wall = time.monotonic() - start
    console = (where / "console.log").read_text(errors="replace")
    results = sorted((where / "out" / "cells").glob("*/result.json"))
    tag = json.loads(results[0].read_text())["build"]["tag"] if len(results) == 1 else ""
    print(f"\napex-image tier: `{shlex.join(argv[1:])}` exit {code} in {wall:.0f} s")
    if code != 0:
        logs = sorted((where / "logs").rglob("build.log"))
        pytest.fail(
            f"the no-registry command exited {code} after {wall:.0f} s.\nbuild.py said:\n"
            f"{_tail(where / 'console.log', 25)}"
            + (f"\nits build log {logs[0]} ends:\n{_tail(logs[0])}" if logs else ""),
            pytrace=False,
        )
    assert tag, f"build.py exited 0 but wrote no single cell result under {where / 'out'}"
    return BuiltImage(
        tag=tag, code=code, console=console, out=where / "out", logs=where / "logs", wall_s=wall
    )


@pytest.fixture(scope="session")
def docker_client():
    import docker

    return docker.from_env(timeout=300)
