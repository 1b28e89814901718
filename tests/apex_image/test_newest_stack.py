"""The newest stack, built for real: the matrix cell cu132-py313 (torch 2.15, CUDA 13.2 from NVIDIA's
wheels, Python 3.13 on the local Debian 13 base) compiled for sm_90 only (the `-sm90` variant: five archs do
not fit a CPU machine's CI), gated in the build, then verified in a container as `build.py image` does by
default. Opt-in (APEX_IMAGE_NEWEST=1), which .ci/run sets: a second cold Apex compile, its cost in docs/ci.md."""

from __future__ import annotations

import json
import os
import tarfile
import time
from pathlib import Path

import pytest

from tests.apex_image.conftest import ARCHIVE, BUILD_TIMEOUT_S, _check_disk, _run_bounded, _tail
from tests.support import REPO
from toolchain.image import inspect_image

CELL, TAG = "cu132-py313", "apex-6424da3-torch2.15.0-cu13.2-py3.13-debian13-sm90"
pytestmark = pytest.mark.skipif(
    os.environ.get("APEX_IMAGE_NEWEST") != "1",
    reason="the newest-stack build is opt-in: APEX_IMAGE_NEWEST=1 (a second cold compile)",
)


@pytest.fixture(scope="session")
def newest_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not ARCHIVE.is_file():
        pytest.skip(f"no Apex source archive at {ARCHIVE}")
    where = tmp_path_factory.mktemp("newest-src")
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(where, filter="data")
    return where / "apex"


@pytest.fixture(scope="session")
def newest(tmp_path_factory: pytest.TempPathFactory, newest_src: Path, docker_client) -> dict:
    import sys

    _check_disk(docker_client)  # its own cold build: torch 2.15's CUDA 13 wheels, their venv twice
    where = tmp_path_factory.mktemp("newest-stack")

    argv = [sys.executable, str(REPO / "build.py"), "image", "--cell", CELL, "--archs", "9.0", "--apex-src",
            str(newest_src), "--progress", "plain", "--out", str(where / "out"), "--logs",
            str(where / "logs")]  # fmt: skip
    start = time.monotonic()
    code = _run_bounded(argv, where / "console.log", BUILD_TIMEOUT_S)
    wall = time.monotonic() - start
    print(f"\nnewest stack: build.py image --cell {CELL} --archs 9.0 exit {code} in {wall:.0f} s")
    if code != 0:
        pytest.fail(f"exit {code} after {wall:.0f} s:\n{_tail(where / 'console.log', 40)}", pytrace=False)
    result = json.loads((where / "out" / "cells" / TAG / "result.json").read_text())
    return {"result": result, "console": (where / "console.log").read_text(errors="replace"), "wall_s": wall}


def test_it_stands_on_the_local_debian13_base_and_says_so(newest) -> None:
    info = inspect_image.inspect(TAG)
    labels = info["labels"]
    assert labels["base.route"] == "local" and labels["python"] == "3.13" and labels["cuda"] == "13.2"
    assert labels["torch"] == "2.15.0" and labels["archs"] == "9.0"
    assert info["oci"]["base.name"] == "apex-toolchain/base:trixie"
    versions = info["manifest"]["versions"]
    assert versions["nvcc_source"] == "pypi" and versions["nvcc"].startswith("13.2.")
    assert info["apex_commit"] == "6424da3b4faa6c8f062da4a48c424fff3f02d42d"  # pinned: recorded without .git


def test_the_gate_passed_with_sm90_sass_in_every_cuda_module(newest) -> None:
    info = inspect_image.inspect(TAG)
    report = info["static_report"]
    assert report["verdict"] == "PASS"
    cuda = [e for e in report["extensions"] if e["flag"] == "APEX_CUDA_EXT" and e["module"] in
            info["manifest"]["expected_modules"]]  # fmt: skip
    assert len(cuda) >= 10 and all(e["arch"]["sass"] == ["sm_90"] for e in cuda), cuda


def test_build_py_verified_it_and_the_build_printed_progress(newest) -> None:
    result = newest["result"]
    assert result["status"] == "verified" and result["verify"]["verdict"] == "PASS", result["verify"]
    assert "[apex-builder] progress: " in newest["console"]
    assert "Apex commit unknown" not in Path(result["verify"]["report_path"]).read_text()


def test_import_torch_prints_no_numpy_warning(newest, docker_client) -> None:
    said = docker_client.containers.run(
        TAG, ["python", "-c", "import torch, numpy; print('ok')"], remove=True, stdout=True, stderr=True
    ).decode()
    assert said.strip() == "ok", said


def test_verify_none_still_carries_the_gate_into_the_report(newest, tmp_path: Path, newest_src: Path) -> None:
    """The same build again (every layer cached) with --verify none: `build.py report` shows the gate's result."""
    from tests.support import run_build

    out = tmp_path / "out"
    done = run_build("image", "--cell", CELL, "--archs", "9.0", "--apex-src", str(newest_src), "--verify", "none",
                     "--out", str(out), "--logs", str(tmp_path / "logs"), timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    result = json.loads((out / "cells" / TAG / "result.json").read_text())
    assert result["status"] == "built" and result["verify"]["verdict"] == "PASS", result["verify"]
    report = run_build("report", "--out", str(out))
    assert report.returncode == 0, report.stderr
    row = next(line for line in (out / "matrix-report.md").read_text().splitlines() if TAG in line)
    assert "PASS (static)" in row and " ok" in row, row
