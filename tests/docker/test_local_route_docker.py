"""The local-base route against a real engine: a matrix cell whose NVIDIA base the daemon cannot pull is built on the local
Debian base, said in one line; `--base nvidia` keeps it on NVIDIA's base (whose pull then fails, exit 3).
Only the devel stage is built (apt, no torch, no compile); it needs the local trixie base, which build.py
makes with debootstrap when it is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_build
from toolchain.image import base_route
from toolchain.spec.matrix import cli_cell
from verify.runtime import exit_codes

pytestmark = pytest.mark.docker


def _nvidia_base_reachable(docker_client) -> bool:
    cell = cli_cell({}, matrix_path=Path(__file__).resolve().parents[2] / "matrix.toml", base_cell="cu130")
    return base_route.engine_availability()(cell.base_devel) is None


def test_an_unpullable_nvidia_base_moves_the_cell_to_the_local_base(docker_client, tmp_path: Path) -> None:
    if _nvidia_base_reachable(docker_client):
        pytest.skip("this engine has or can pull nvidia/cuda: the fallback is not taken here")
    out, logs = tmp_path / "out", tmp_path / "logs"
    # h200: the cell that pins torch 2.11 on CUDA 13.0 (cu130 follows the newest torch for its CUDA)
    done = run_build("image", "--cell", "h200", "--target", "devel", "--progress", "plain", "--out", str(out),
                     "--logs", str(logs), timeout=1200)  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == exit_codes.OK, said[-3000:]
    (line,) = [text for text in said.splitlines() if text.startswith("[ BASE ] cell h200: ")]
    assert "cannot be pulled (" in line and "building it on the local base apex-toolchain/base:trixie" in line
    assert "CUDA 13.0 from NVIDIA's wheels, torch 2.11.0 from https://pypi.org/simple" in line
    (path,) = out.glob("cells/*/result.json")
    result = json.loads(path.read_text())
    assert result["cell"]["base_route"] == "local" and result["cell"]["os"] == "debian13"
    assert result["build"]["tag"] == "devel-torch2.11.0-cu13.0-py3.13-debian13", result["build"]


def test_base_nvidia_does_not_fall_back(docker_client, tmp_path: Path) -> None:
    """The network check names the base before any stage runs; with --no-network-check the build's pull does."""
    if _nvidia_base_reachable(docker_client):
        pytest.skip("this engine has or can pull nvidia/cuda")
    argv = ("image", "--cell", "cu130", "--base", "nvidia", "--target", "devel", "--progress", "plain",
            "--out", str(tmp_path / "out"), "--logs", str(tmp_path / "logs"))  # fmt: skip
    first = run_build(*argv, timeout=300)
    said = first.stdout + first.stderr
    assert first.returncode == exit_codes.ENVIRONMENT, said[-3000:]
    assert "[ BASE ]" not in said and "base image nvidia/cuda:" in said and "cannot be pulled (" in said
    assert "--base local" in said and "Traceback" not in said and not (tmp_path / "logs").exists()
    done = run_build(*argv, "--no-network-check", timeout=600)
    said = done.stdout + done.stderr
    assert done.returncode == exit_codes.ENVIRONMENT, said[-3000:]
    assert "[ BASE ]" not in said and "a base image could not be pulled" in said and "--base local" in said
    assert "Traceback" not in said
