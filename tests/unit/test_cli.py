"""build.py as a user runs it: a subprocess, real files, real exit codes, no tracebacks."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO, run_build
from toolchain.spec.matrix import load_matrix
from verify.runtime import exit_codes

CU124 = "apex-6424da3-torch2.6.0-cu12.4-py3.11-ubuntu22.04"


def assert_clean_error(proc: subprocess.CompletedProcess[str], code: int, *fragments: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("error: ")
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)


def test_plan_for_cuda_alone_shows_args_and_the_build_command() -> None:
    proc = run_build("plan", "--cuda", "12.4")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"cell cli: {CU124}" in out
    for line in (
        "TORCH_VERSION         2.6.0",
        "TORCH_INDEX_URL       https://download.pytorch.org/whl/cu124",
        "TORCH_CUDA_ARCH_LIST  8.0;8.6;9.0",
        "PYTHON_VERSION        3.11",
        "GCC_VERSION           11",
    ):
        assert line in out
    assert "build command:" in out and "docker" in out and "--target runtime" in out


def test_plan_json_is_machine_readable() -> None:
    proc = run_build("plan", "--cuda", "12.8", "--archs", "9.0", "--extras", "xentropy", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["tag"] == "apex-6424da3-torch2.11.0-cu12.8-py3.12-ubuntu24.04-sm90-ext.xentropy"
    assert plan["build_args"]["APEX_FLAGS"] == "APEX_CPP_EXT=1 APEX_CUDA_EXT=1 APEX_XENTROPY=1"
    assert "docker" in " ".join(plan["command"])
    assert any(part.endswith(f"CELL_ID={plan['tag']}") for part in plan["command"])


def test_plan_without_options_lists_every_cell() -> None:
    proc = run_build("plan", "--json")
    assert proc.returncode == 0, proc.stderr
    plans = json.loads(proc.stdout)
    assert [p["cell"] for p in plans] == [c.name for c in load_matrix(REPO / "matrix.toml").cells]
    assert {"cu124", "cu130", "cu132", "cu132-arm64", "apex2504"} <= {p["cell"] for p in plans}
    assert plans[0]["tag"] == CU124


def test_plan_from_a_named_cell_with_an_override() -> None:
    proc = run_build("plan", "--cell", "h200", "--archs", "9.0", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tag"] == "apex-6424da3-torch2.11.0-cu13.0-py3.12-ubuntu24.04-sm90"


def test_validate_the_repo_matrix() -> None:
    proc = run_build("validate")
    assert proc.returncode == 0, proc.stderr
    count = len(load_matrix(REPO / "matrix.toml").cells)
    assert f"{count} cells valid" in proc.stdout and CU124 in proc.stdout


def test_impossible_cell_exits_2_before_anything_is_built(tmp_path: Path) -> None:
    proc = run_build(
        "image", "--matrix", str(REPO / "matrix.toml"), "--cuda", "12.4", "--torch", "2.8", cwd=tmp_path
    )
    assert_clean_error(proc, exit_codes.USAGE, "torch 2.8 has no wheel for CUDA 12.4", "--torch 2.6")
    assert not (tmp_path / "logs").exists() and not (tmp_path / "out").exists()


def test_image_with_missing_apex_source_exits_2(tmp_path: Path) -> None:
    proc = run_build(
        "image",
        "--matrix",
        str(REPO / "matrix.toml"),
        "--cuda",
        "12.4",
        "--apex-src",
        str(tmp_path / "no-apex"),
        cwd=tmp_path,
    )
    assert_clean_error(proc, exit_codes.USAGE, "--apex-src", "no such directory")
    assert not (tmp_path / "logs").exists()


def test_image_without_a_docker_daemon_exits_3(tmp_path: Path) -> None:
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    proc = run_build("image", "--matrix", str(REPO / "matrix.toml"), "--cuda", "12.4", cwd=tmp_path, env=env)
    assert_clean_error(proc, exit_codes.ENVIRONMENT)
    assert not (tmp_path / "logs").exists()


def test_matrix_filters_that_match_nothing_exit_2(tmp_path: Path) -> None:
    proc = run_build("matrix", "--matrix", str(REPO / "matrix.toml"), "--cuda", "11.8", cwd=tmp_path)
    assert_clean_error(proc, exit_codes.USAGE, "no cell of", "matches")
    proc = run_build("matrix", "--matrix", str(REPO / "matrix.toml"), "--cell", "cu999", cwd=tmp_path)
    assert_clean_error(proc, exit_codes.USAGE, "--cell cu999: no such cell", "cu124")


def test_matrix_with_one_bad_cell_builds_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "matrix.toml"
    bad.write_text(
        '[defaults]\narchs = ["9.0"]\npython = "3.12"\n[cells.good]\ncuda = "12.6"\n'
        '[cells.bad]\ncuda = "12.4"\ntorch = "2.9"\n'
    )
    proc = run_build("matrix", "--matrix", str(bad), "--cell", "good", cwd=tmp_path)
    assert_clean_error(proc, exit_codes.USAGE, "cell bad: torch 2.9 has no wheel for CUDA 12.4")
    assert not (tmp_path / "logs").exists()


def test_paths_that_cannot_be_read_or_written_are_exit_2_naming_them(tmp_path: Path) -> None:
    assert_clean_error(
        run_build("validate", "--matrix", str(tmp_path)),
        exit_codes.USAGE,
        f"{tmp_path}: is a directory",
        "matrix.toml",
    )
    # /proc takes no new files, even for root: the atomic write's temp file fails, the target is named
    assert_clean_error(
        run_build("bake", "--output", "/proc/x.json"),
        exit_codes.USAGE,
        "/proc/x.json: No such file or directory",
        "--output",
    )
    assert_clean_error(
        run_build("report", "--out", "/proc/apex-out"), exit_codes.USAGE, "/proc/apex-out", "--out"
    )


def test_github_actions_gets_an_error_annotation() -> None:
    proc = run_build("plan", "--cuda", "12.5", env={"GITHUB_ACTIONS": "true"})
    assert proc.returncode == exit_codes.USAGE
    assert proc.stdout.startswith("::error::command line: CUDA '12.5' has no PyTorch wheels")


def test_wheel_delegates_to_the_apex_builder(tmp_path: Path) -> None:
    proc = run_build("wheel", "--apex-src", str(tmp_path / "missing"), "--out", str(tmp_path / "w"))
    assert proc.returncode == exit_codes.USAGE
    assert "Traceback" not in proc.stderr and "missing" in proc.stderr


def test_usage_errors_from_argparse_exit_2() -> None:
    assert run_build().returncode == exit_codes.USAGE
    assert run_build("frobnicate").returncode == exit_codes.USAGE
    assert run_build("--help").returncode == 0


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_passes_only_the_variables_that_are_set() -> None:
    dry = subprocess.run(
        [
            "make",
            "-n",
            "image",
            "CUDA=12.4",
            "TORCH=2.6",
            "PYTHON=3.11",
            "ARCHS=8.0;9.0",
            "APEX_REF=6424da3",
            "EXTRAS=xentropy",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    command = dry.stdout.strip()
    for part in (
        "build.py image",
        "--cuda '12.4'",
        "--torch '2.6'",
        "--python '3.11'",
        "--archs '8.0;9.0'",
        "--apex-ref '6424da3'",
        "--extras 'xentropy'",
        "--target 'runtime'",
    ):
        assert part in command
    bare = subprocess.run(
        ["make", "-n", "image", "CUDA=12.4"], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert "--torch" not in bare.stdout and "--python" not in bare.stdout
    plan = subprocess.run(["make", "-s", "plan", "CUDA=12.4"], capture_output=True, text=True, cwd=REPO)
    assert plan.returncode == 0, plan.stderr
    assert CU124 in plan.stdout
