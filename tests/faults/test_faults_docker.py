"""Environment faults with the real Docker engine: each a clear message and exit 3, retried where that
helps, and the matrix report still written (atomically) for what did run."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.faults.faultlib import REPO, log_has, run_cli, wait_for
from toolchain.image import build_log, buildkit_build, docker_host
from verify.runtime import exit_codes

# a cell of matrix.toml's shape that the local base can start (the devel stage's apt step)
LOCAL_CELL = (
    "--cuda",
    "12.4",
    "--python",
    "3.11",
    "--os",
    "debian12",
    "--archs",
    "8.0",
    "--base-devel",
    "apex-toolchain/base:bookworm",
    "--base-runtime",
    "apex-toolchain/base:bookworm",
)
UNREACHABLE = "127.0.0.1:9"  # the discard port: connection refused, at once


def _report(out: Path) -> dict:
    return json.loads((out / "matrix-report.json").read_text())


def _no_temp_files(*dirs: Path) -> None:
    left = [p for d in dirs if d.exists() for p in d.rglob("*.tmp")]
    assert left == [], f"half-written files left: {left}"


def test_daemon_killed_mid_build_is_exit_3_with_a_partial_report(second_daemon, tmp_path: Path) -> None:
    out, logs_dir = tmp_path / "out", tmp_path / "logs"
    proc = subprocess.Popen(
        ["python", str(REPO / "build.py"), "image", *LOCAL_CELL, "--target", "devel", "--out", str(out),
         "--logs", str(logs_dir), "--progress", "plain"],
        cwd=REPO, env={**os.environ, **second_daemon.env()}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: log_has(logs_dir, "[devel 2/2] RUN"), 120, "the build's RUN step to start")
        second_daemon.kill()
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == exit_codes.ENVIRONMENT, output
    assert "the Docker daemon stopped answering during the build" in output and "Traceback" not in output
    report = _report(out)
    (cell,) = report["cells"]
    assert cell["status"] == "environment_unavailable" and report["status"] == "complete"
    result = json.loads(next(out.glob("cells/*/result.json")).read_text())
    assert "stopped answering" in result["build"]["error"]
    assert "[devel 2/2] RUN" in (logs_dir / cell["id"] / "build.log").read_text()
    _no_temp_files(out)


def test_socket_not_permitted_is_exit_3(second_daemon, tmp_path: Path) -> None:
    """The daemon answers, but its socket belongs to another user (0600): connect() gets EACCES.
    Root ignores file modes, so the run drops CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH, as a plain user has."""
    second_daemon.socket.chmod(0o600)
    os.chown(second_daemon.socket, 65534, 65534)
    result = run_cli(
        "matrix",
        "--cell",
        "cu124",
        "--out",
        str(tmp_path / "out"),
        "--logs",
        str(tmp_path / "logs"),
        env=second_daemon.env(),
        prefix=("setpriv", "--bounding-set=-dac_override,-dac_read_search"),
    )
    assert result.returncode == exit_codes.ENVIRONMENT, result.stdout + result.stderr
    assert f"the Docker socket {second_daemon.host} is not permitted for this user" in result.stderr
    assert "docker group" in result.stderr and not (tmp_path / "logs").exists()


def test_no_daemon_is_exit_3_before_any_cell(tmp_path: Path) -> None:
    result = run_cli(
        "matrix",
        "--out",
        str(tmp_path / "out"),
        "--logs",
        str(tmp_path / "logs"),
        env={"DOCKER_HOST": f"unix://{tmp_path}/dead.sock"},
    )
    assert result.returncode == exit_codes.ENVIRONMENT
    assert re.search(
        r"^error: no Docker daemon answers at unix://.*dead\.sock .*start it", result.stderr, re.M
    )
    assert not (tmp_path / "logs").exists()


def test_gpu_required_without_nvidia_runtime_is_exit_3(verify_image_tag: str, tmp_path: Path) -> None:
    result = run_cli("verify", verify_image_tag, "--gpu", "require", "--out", str(tmp_path))
    assert result.returncode == exit_codes.ENVIRONMENT, result.stdout + result.stderr
    assert "the Docker daemon has no NVIDIA GPU runtime" in result.stderr
    assert "NVIDIA Container Toolkit" in result.stderr


def test_unpullable_base_image_is_retried_then_exit_3(docker_client, tmp_path: Path) -> None:
    base = f"{UNREACHABLE}/nvidia/cuda:12.4.1-devel-ubuntu22.04"
    result = run_cli(
        "image",
        *LOCAL_CELL[:8],
        "--base-devel",
        base,
        "--base-runtime",
        base,
        "--target",
        "devel",
        "--out",
        str(tmp_path / "out"),
        "--logs",
        str(tmp_path / "logs"),
        "--progress",
        "plain",
        "--no-network-check",  # the build's own pull and its retry, not the check before it
    )
    assert result.returncode == exit_codes.ENVIRONMENT, result.stdout + result.stderr
    assert "a base image could not be pulled" in result.stdout + result.stderr
    log = next((tmp_path / "logs").rglob("build.log")).read_text()
    assert log.count("$ ") == 2, "one retry after a registry failure"
    assert _report(tmp_path / "out")["cells"][0]["status"] == "environment_unavailable"


def test_image_pull_from_unreachable_registry_is_retried_then_exit_3(docker_client, tmp_path: Path) -> None:
    result = run_cli(
        "pull",
        "--no-signature-check",
        "--cuda",
        "12.4",
        "--registry",
        f"{UNREACHABLE}/apex",
        "--gpu",
        "auto",
        "--out",
        str(tmp_path / "out"),
        timeout=180,
    )
    assert result.returncode == exit_codes.ENVIRONMENT, result.stdout + result.stderr
    assert re.search(r"pulling 127\.0\.0\.1:9/apex:apex-\S+ failed after 3 attempt\(s\)", result.stderr), (
        result.stderr
    )
    assert "check the registry is reachable" in result.stderr


@pytest.fixture
def tiny_fs(tmp_path: Path):
    """A 64 KiB tmpfs of this test's own (never the daemon's data-root), filled to the last block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "tiny"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def _fill(where: Path) -> None:
    try:
        with open(where / "filler", "wb") as handle:
            while True:
                handle.write(b"\0" * 1024)
                handle.flush()
    except OSError as error:  # ENOSPC: full (already, if even the open failed)
        assert error.errno == 28, error


def test_disk_full_writing_reports_is_exit_3_and_nothing_half_written(
    docker_client, tiny_fs: Path, tmp_path: Path
) -> None:
    out = tiny_fs / "out"
    out.mkdir()
    before = {"report_version": "1", "cells": [{"id": "earlier", "status": "verified"}], "runs": {}}
    (out / "matrix-report.json").write_text(json.dumps(before))
    _fill(tiny_fs)
    result = run_cli("matrix", "--cell", "cu124", "--out", str(out), "--logs", str(tmp_path / "logs"))
    assert result.returncode == exit_codes.ENVIRONMENT, result.stdout + result.stderr
    assert (
        "error: the disk is full (no space left on device)" in result.stderr
        and "Traceback" not in result.stderr
    )
    assert json.loads((out / "matrix-report.json").read_text()) == before, "the earlier report is whole"
    assert not (tmp_path / "logs").exists(), "no build started"
    _no_temp_files(tiny_fs)
    verify = subprocess.run(
        ["python", "-m", "verify", "--static", "--json", str(tiny_fs / "r.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == exit_codes.ENVIRONMENT, verify.stderr
    assert "the disk is full" in verify.stderr and not (tiny_fs / "r.json").exists()
    _no_temp_files(tiny_fs)


def test_buildkit_no_space_left_maps_to_exit_3(docker_client, tmp_path: Path) -> None:
    """A real BuildKit step that runs out of space: it writes past the 64 MiB tmpfs that BuildKit mounts
    on /dev/shm in every RUN container (bounded, gone when the step ends). The same client and log
    writer as the engine's builds; the engine reads this text as a full disk, not worth a retry."""
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(
        "FROM apex-toolchain/base:bookworm\nRUN dd if=/dev/zero of=/dev/shm/fill bs=1M count=100\n"
    )
    log = tmp_path / "build.log"
    code = buildkit_build._run_build(
        [*docker_host.docker_client().build_prefix(), "--progress", "plain", "--no-cache", str(context)],
        dict(os.environ, DOCKER_BUILDKIT="1"),
        buildkit_build.OwnedLog.at(log),
        "plain",
    )
    assert code != 0
    text = log.read_text()
    assert "No space left on device" in text
    fault = build_log.environment_fault(text)
    assert fault, text[-2000:]
    message, retry = fault
    assert message.startswith("the disk is full (no space left on device)") and retry is False
