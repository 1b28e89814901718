"""A newcomer's first run: base overrides from make and the environment, the no-registry
command, the failing checks under `build.py verify`. Real make, real build.py, real committed reports (tests/fixtures/evidence)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolchain.commands import images
from toolchain.image import build_log
from toolchain.spec import targets

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("where", ["command line", "environment"])
def test_make_passes_the_base_images(where):
    variables = {"BASE_DEVEL_IMAGE": "mirror.local/cuda:devel", "BASE_RUNTIME_IMAGE": "mirror.local/cuda:run"}
    env = dict(os.environ, **(variables if where == "environment" else {}))
    argv = ["make", "-n", "image", "CUDA=13.0"] + (
        [f"{k}={v}" for k, v in variables.items()] if where == "command line" else []
    )
    line = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
    assert (
        "--base-devel 'mirror.local/cuda:devel'" in line and "--base-runtime 'mirror.local/cuda:run'" in line
    )


def test_build_py_reads_the_base_images_from_the_environment():
    env = dict(
        os.environ,
        BASE_DEVEL_IMAGE="apex-toolchain/base:bookworm",
        BASE_RUNTIME_IMAGE="apex-toolchain/base:bookworm",
    )
    out = subprocess.run(
        [
            sys.executable,
            "build.py",
            "plan",
            "--cuda",
            "13.0",
            "--torch",
            "2.11.0",
            "--os",
            "debian12",
            "--python",
            "3.11",
            "--target",
            "runtime-slim",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "BASE_DEVEL_IMAGE=apex-toolchain/base:bookworm" in out.stdout
    # runtime-slim on a plain OS base: that base itself, no CUDA runtime image
    assert "BASE_SLIM_IMAGE=apex-toolchain/base:bookworm" in out.stdout


def test_slim_base_names_the_os_of_an_nvidia_tag(monkeypatch):
    monkeypatch.delenv("BASE_SLIM_IMAGE", raising=False)
    assert (
        targets.slim_base("nvidia/cuda:13.0.0-devel-ubuntu24.04", "nvidia/cuda:13.0.0-runtime-ubuntu24.04")
        == "ubuntu:24.04"
    )
    assert (
        targets.slim_base("nvidia/cuda:12.4.1-devel-ubuntu22.04", "nvidia/cuda:12.4.1-runtime-ubuntu22.04")
        == "ubuntu:22.04"
    )
    monkeypatch.setenv("BASE_SLIM_IMAGE", "my/os:1")
    assert targets.slim_base("nvidia/cuda:13.0.0-devel-ubuntu24.04", "") == "my/os:1"


def test_the_pull_error_names_the_local_base_and_the_offline_inputs():
    message, _ = build_log.environment_fault(
        "ERROR: pull access denied for nvidia/cuda, repository does not exist"
    )
    # the fix is the same command on the local base, with the inputs a machine without GitHub needs
    assert "--base local (make: BASE=local)" in message and "--apex-src DIR (make: APEX_SRC=DIR)" in message
    assert (
        build_log.NO_REGISTRY_COMMAND.split("&& ", 1)[1]
        .replace("python3 build.py", "")
        .strip()
        .startswith("image")
    )


def test_build_py_verify_lists_the_failing_checks(tmp_path):
    lines = images.failing_checks(REPO / "tests" / "fixtures" / "evidence" / "h200-arch80.json")
    assert lines[0].startswith("FAIL  arch.amp_C  arch mismatch: built for sm_80 only")
    assert any(line.startswith("FAIL  expectations.feature.FusedAdam") for line in lines)
    assert images.failing_checks(REPO / "tests" / "fixtures" / "evidence" / "h200-good.json") == []
    cut = tmp_path / "cut.json"
    cut.write_bytes((REPO / "tests" / "fixtures" / "evidence" / "h200-arch80.json").read_bytes()[:500])
    assert images.failing_checks(cut) == [] and images.failing_checks(None) == []


def test_build_py_report_shows_build_py_verify_results(tmp_path):
    """`build.py verify IMAGE` leaves OUT/verify/<image>/report.json; `build.py report` gives each a row."""
    for image, source in (("img-good", "h200-good.json"), ("img-arch80", "h200-arch80.json")):
        (tmp_path / "verify" / image).mkdir(parents=True)
        shutil.copy(
            REPO / "tests" / "fixtures" / "evidence" / source, tmp_path / "verify" / image / "report.json"
        )
    done = subprocess.run(
        [sys.executable, "build.py", "report", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "matrix-report.md").read_text()
    good = next(line for line in table.splitlines() if line.startswith("| img-good "))
    bad = next(line for line in table.splitlines() if line.startswith("| img-arch80 "))
    assert "2.11.0+cu130" in good and "PASS (full, NVIDIA H200)" in good
    assert "FAIL (full, NVIDIA H200)" in bad and "arch.amp_C: arch mismatch" in bad


def test_the_ci_docs_give_the_no_registry_command_the_apex_image_tier_runs():
    """docs/ci.md holds build_log.NO_REGISTRY_COMMAND word for word (its line breaks aside), which is what
    tests/apex_image builds for real (the README names `make image CUDA=12.4`, which finds the route itself)."""
    text = " ".join((REPO / "docs" / "ci.md").read_text().split())
    assert build_log.NO_REGISTRY_COMMAND in text
