"""Today's stacks in the facts: torch 2.12-2.15, nvcc 13.x, Ubuntu 26.04, the aarch64 platform axis and
the new matrix cells. Rules are checked against the frozen facts of 2026-12-01 (so a new torch row does
not move them); the live facts file is checked in tests/unit/test_live_facts.py."""

from __future__ import annotations

import json

import pytest

from tests.support import FROZEN_MATRIX, frozen_facts, run_build
from toolchain.errors import MatrixError
from toolchain.image import buildkit_build, docker_host
from toolchain.spec import ci_matrix
from toolchain.spec.matrix import cli_cell, load_matrix
from verify.runtime import exit_codes

FROZEN = frozen_facts()
MATRIX = FROZEN_MATRIX


def cell(**values: str):
    return cli_cell(values, matrix_path=MATRIX, facts=FROZEN)


def problem(**values: str) -> str:
    with pytest.raises(MatrixError) as caught:
        cell(**values)
    assert caught.value.exit_code == exit_codes.USAGE
    return str(caught.value)


# --- torch rows -------------------------------------------------------------------------------


def test_cuda_13_2_alone_is_the_pypi_default_stack() -> None:
    c = cell(cuda="13.2")
    assert (c.torch, c.python, c.os, c.gcc) == ("2.15.0", "3.12", "ubuntu24.04", "13")
    assert c.base_devel == "nvidia/cuda:13.2.1-devel-ubuntu24.04"
    assert c.torch_index_url == "https://download.pytorch.org/whl/cu132"
    # nvcc 13.2's default list ends in PTX for its highest arch, as PyTorch's cu132 wheels do
    assert c.arch_list == "8.0;8.6;9.0;10.0;12.0+PTX" and not c.variant
    assert c.id == "apex-6424da3-torch2.15.0-cu13.2-py3.12-ubuntu24.04"


def test_torch_2_14_ships_cu126_cu130_cu132_and_2_15_only_cu132() -> None:
    for cuda in ("12.6", "13.0", "13.2"):
        assert cell(cuda=cuda, torch="2.14").torch == "2.14.1"
    assert "torch 2.15 has no wheel for CUDA 13.0 (it ships cu132); use --torch 2.14" in problem(
        cuda="13.0", torch="2.15"
    )
    assert cell(cuda="13.0").torch == "2.14.1"  # the newest torch with a cu130 build
    assert cell(cuda="13.2", torch="2.12").torch == "2.12.1"


def test_torch_2_15_python_range_is_3_11_to_3_15() -> None:
    message = problem(cuda="13.2", torch="2.15", python="3.10", os="ubuntu22.04")
    assert "Python 3.10 is outside torch 2.15's range 3.11-3.15" in message and "--python 3.11" in message
    assert cell(cuda="13.2", torch="2.15", python="3.11", os="ubuntu22.04").python == "3.11"


def test_toolkits_without_torch_wheels_point_at_the_newest_cuda_with_wheels() -> None:
    for cuda in ("13.1", "13.3", "13.4"):
        message = problem(cuda=cuda)
        assert f"no torch release ships wheels for CUDA {cuda}" in message and "--cuda 13.2" in message


# --- nvcc rows --------------------------------------------------------------------------------


def test_nvcc_13_limits() -> None:
    assert FROZEN.toolkit("13.0").archs == FROZEN.toolkit("13.3").archs
    assert "8.8" in FROZEN.toolkit("13.0").archs and "10.7" not in FROZEN.toolkit("13.3").archs
    assert "10.7" in FROZEN.toolkit("13.4").archs and FROZEN.toolkit("13.4").gcc_max == 16
    assert FROZEN.toolkit("13.2").gcc_max == 15 and FROZEN.toolkit("12.8").gcc_max == 14
    assert cell(cuda="13.2", archs="8.8").id.endswith("-sm88")
    message = problem(cuda="13.2", gcc="16", os="ubuntu24.04")
    assert "GCC 16 is newer than nvcc 13.2 allows (newest: 15)" in message


def test_ptx_on_the_highest_default_arch_only_for_cuda_13_and_only_for_defaults() -> None:
    assert cell(cuda="12.8", torch="2.8").arch_list == "8.0;8.6;9.0;10.0;12.0"  # PyTorch's cu128: SASS only
    assert cell(cuda="13.0", torch="2.11").arch_list == "8.0;8.6;9.0;10.0;12.0+PTX"
    explicit = cell(cuda="13.2", archs="9.0;10.0")
    assert explicit.arch_list == "9.0;10.0" and explicit.id.endswith("-sm90_100")


# --- Ubuntu 26.04 -----------------------------------------------------------------------------


def test_ubuntu_26_04_has_python_3_14_and_gcc_15() -> None:
    # NVIDIA's 13.2 images are not published for 26.04: with the cell's own bases the OS facts apply
    c = cell(
        cuda="13.2",
        os="ubuntu26.04",
        base_devel="nvidia/cuda:13.2.1-devel-ubuntu26.04",
        base_runtime="nvidia/cuda:13.2.1-runtime-ubuntu26.04",
    )
    assert (c.python, c.gcc) == ("3.14", "15")  # [defaults] 3.12 is a preference; 26.04 has only 3.14
    assert "NVIDIA publishes no CUDA 13.2 images for ubuntu26.04" in problem(cuda="13.2", os="ubuntu26.04")
    # 26.04 packages 3.14 but has no CUDA 13.2 image: advice naming it would lead nowhere
    assert "ubuntu26.04" not in problem(cuda="13.2", python="3.14")


# --- aarch64 ----------------------------------------------------------------------------------


def test_arm64_cell_id_platform_and_build_command() -> None:
    arm = cell(cuda="13.2", platform="linux/arm64")
    amd = cell(cuda="13.2", platform="linux/amd64")
    assert arm.id == amd.id + "-arm64" and amd.id == cell(cuda="13.2").id  # amd64 ids do not change
    # the registry tag leaves the platform out: both go under one tag (an OCI index, build.py publish-index)
    assert arm.tag == amd.tag == amd.id and arm.image_tag == amd.id and amd.image_tag == ""
    assert (arm.platform, amd.platform) == ("linux/arm64", "linux/amd64")
    assert arm.build_args() == {**amd.build_args(), "CELL_ID": arm.id}  # the Dockerfile needs no new ARG
    command = buildkit_build.build_command(arm, client=docker_host.DockerClient("docker", True, "27"))
    assert command[command.index("--platform") + 1] == "linux/arm64"
    assert "--platform" not in buildkit_build.build_command(
        amd, client=docker_host.DockerClient("docker", True, "27")
    )


def test_arm64_needs_aarch64_cuda_wheels() -> None:
    assert "torch 2.6 has no aarch64 CUDA wheels in the compatibility facts; use --torch 2.14" in problem(
        cuda="12.6", torch="2.6", platform="linux/arm64"
    )
    assert "torch 2.11 has no aarch64 wheel for CUDA 12.8 (it ships cu130)" in problem(
        cuda="12.8", torch="2.11", platform="linux/arm64"
    )
    assert "no torch release ships aarch64 wheels for CUDA 12.4" in problem(
        cuda="12.4", platform="linux/arm64"
    )
    assert cell(cuda="12.8", platform="linux/arm64").torch == "2.10.0"  # whl/cu128 has aarch64 wheels of 2.10
    assert "did you mean 'linux/arm64'?" in problem(cuda="13.2", platform="linux/aarch64")


def test_arm64_cells_in_bake_and_the_github_matrix() -> None:
    arm = cell(cuda="13.2", platform="linux/arm64")
    target = ci_matrix.bake([arm])["target"]["cli"]
    assert target["platforms"] == ["linux/arm64"]
    entry = ci_matrix.gh_matrix([arm])["include"][0]
    assert (entry["platform"], entry["runner"]) == ("linux/arm64", "ubuntu-24.04-arm")
    assert entry["gpu_runner"] == ["self-hosted", "linux", "gpu", "ARM64"]


# --- the matrix cells -------------------------------------------------------------------------


def test_new_matrix_cells_resolve_as_documented() -> None:
    cells = {c.name: c for c in load_matrix(MATRIX, facts=FROZEN).cells}
    assert cells["cu132"].id == "apex-6424da3-torch2.15.0-cu13.2-py3.12-ubuntu24.04"
    assert cells["cu132-arm64"].id == "apex-6424da3-torch2.15.0-cu13.2-py3.12-ubuntu24.04-arm64"
    assert cells["apex2504"].id == "apex-25.04-torch2.7.1-cu12.6-py3.12-ubuntu24.04"
    assert cells["apex2504"].apex_ref == "25.04"
    assert cells["cu130"].arch_list == "8.0;8.6;9.0;10.0;12.0+PTX"  # id unchanged: the default list


def test_build_py_plan_cuda_13_2_and_arm64() -> None:
    proc = run_build("plan", "--cuda", "13.2", "--torch", "2.15", "--json")
    assert proc.returncode == exit_codes.OK, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["build_args"]["BASE_DEVEL_IMAGE"].startswith("nvidia/cuda:13.2.")
    assert plan["build_args"]["TORCH_VERSION"].startswith("2.15.") and "--platform" not in plan["command"]
    proc = run_build("plan", "--cuda", "13.2", "--torch", "2.15", "--platform", "linux/arm64", "--json")
    assert proc.returncode == exit_codes.OK, proc.stderr
    plan = json.loads(proc.stdout)
    assert (
        plan["tag"].endswith("-arm64")
        and plan["command"][plan["command"].index("--platform") + 1] == "linux/arm64"
    )


def test_leads_are_loaded_with_their_row() -> None:
    assert any(lead.where == "torch 2.15" and "cu130" in lead.text for lead in FROZEN.leads)
