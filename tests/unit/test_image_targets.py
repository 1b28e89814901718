"""An image without Apex (verify-runtime, devel, ...) or with a CPU-only torch is not tagged and
labelled as if it held Apex for CUDA archs; --wheelhouse says what it lacks, in the cell's own values."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import REPO, run_build
from toolchain.errors import UsageError
from toolchain.image import wheelhouse
from toolchain.spec import matrix, targets

LOCAL = {"cuda": "13.0", "torch": "2.13.0", "python": "3.11", "os": "debian12",
         "base_devel": "apex-toolchain/base:bookworm", "base_runtime": "apex-toolchain/base:bookworm"}  # fmt: skip
CPU_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
REQUIREMENTS = ["setuptools-81.0.0-py3-none-any.whl", "packaging-25.0-py3-none-any.whl",
                "ninja-1.13.0-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", "pip-25.3-py3-none-any.whl"]  # fmt: skip


def cli_cell(values: dict) -> matrix.Cell:
    """A command-line cell over matrix.toml's [defaults], as build.py makes it."""
    return matrix.cli_cell(values, matrix_path=REPO / "matrix.toml")


def _house(where: Path, *names: str) -> Path:
    where.mkdir()
    for name in names:  # the checks read wheel file names only, as the torch stage's pip would match them
        (where / name).write_bytes(b"")
    return where


def test_apex_targets_keep_the_cell_id() -> None:
    cell = cli_cell(LOCAL)
    for target in sorted(targets.APEX_TARGETS):
        assert targets.for_target(cell, target) == cell
    assert cell.id.startswith("apex-6424da3-torch2.13.0-cu13.0-")


def test_targets_without_apex_are_named_for_what_they_hold() -> None:
    cell = cli_cell({**LOCAL, "archs": "8.0;9.0", "gcc": "11"})
    built = targets.for_target(cell, "verify-runtime")
    assert built.id == "verify-runtime-torch2.13.0-cu13.0-py3.11-debian12-gcc11", built.id
    assert "apex" not in built.id and "sm80" not in built.id and built.build_args()["CELL_ID"] == built.id
    assert targets.for_target(cell, "devel").id.startswith("devel-torch2.13.0-cu13.0-")
    explicit = cli_cell({**LOCAL, "tag": "my-own-name"})  # the user's own tag is theirs
    assert targets.for_target(explicit, "verify-runtime").id == "my-own-name"


def test_a_cpu_torch_says_cpu_not_a_cuda_version(tmp_path: Path) -> None:
    by_index = targets.for_target(cli_cell({**LOCAL, "torch_index_url": "https://download.pytorch.org/whl/cpu"}),
                                  "verify-runtime")  # fmt: skip
    assert by_index.id == "verify-runtime-torch2.13.0-cpu-py3.11-debian12"
    assert (
        by_index.build_args()["CUDA_VERSION"] == "cpu" and by_index.build_args()["TORCH_CUDA_ARCH_LIST"] == ""
    )
    house = _house(tmp_path / "house", CPU_WHEEL, *REQUIREMENTS)
    by_wheel = targets.for_target(cli_cell(LOCAL), "verify-runtime", house)
    assert by_wheel.id == by_index.id and by_wheel.cuda == "cpu"
    cuda_house = _house(
        tmp_path / "cuda", "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", *REQUIREMENTS
    )
    assert targets.for_target(cli_cell(LOCAL), "verify-runtime", cuda_house).cuda == "13.0"


def test_an_apex_target_with_a_cpu_torch_is_refused_up_front(tmp_path: Path) -> None:
    house = _house(tmp_path / "house", CPU_WHEEL, *REQUIREMENTS)
    with pytest.raises(
        UsageError, match=r"--target runtime-slim compiles Apex's CUDA extensions, but --wheelhouse"
    ) as err:
        targets.for_target(cli_cell(LOCAL), "runtime-slim", house)
    assert err.value.exit_code == 2 and "--target verify-runtime" in str(err.value)


def test_build_py_plan_shows_the_tags(tmp_path: Path) -> None:
    local = [f"--{key.replace('_', '-')}={value}" for key, value in LOCAL.items()]
    plan = run_build("plan", *local, "--target", "verify-runtime", "--torch-index-url",
                     "https://download.pytorch.org/whl/cpu")  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    assert "cell cli: verify-runtime-torch2.13.0-cpu-py3.11-debian12" in plan.stdout
    assert "--build-arg CUDA_VERSION=cpu" in plan.stdout
    refused = run_build("image", *local, "--target", "runtime", "--torch-index-url", "https://download.pytorch.org/whl/cpu",
                        "--out", str(tmp_path / "out"), "--logs", str(tmp_path / "logs"))  # fmt: skip
    assert (
        refused.returncode == 2
        and "serves CPU-only torch" in refused.stderr
        and not (tmp_path / "logs").exists()
    )


def test_the_wheelhouse_check_names_what_is_missing(tmp_path: Path) -> None:
    cell = cli_cell({**LOCAL, "torch": "2.11.0", "python": "3.12", "os": "ubuntu24.04"})
    house = _house(tmp_path / "house", CPU_WHEEL, "setuptools-81.0.0-py3-none-any.whl")
    problems = wheelhouse.missing(cell, house)
    assert problems[0] == f"no torch 2.11.0 wheel (it has {CPU_WHEEL})"
    assert "no ninja wheel (a build requirement: ninja)" in problems and not any(
        "setuptools" in p for p in problems
    )
    assert wheelhouse.missing(cli_cell(LOCAL), _house(tmp_path / "full", CPU_WHEEL, *REQUIREMENTS)) == []
    wrong_python = wheelhouse.missing(
        cli_cell({**LOCAL, "python": "3.12", "os": "ubuntu24.04"}), tmp_path / "full"
    )
    assert wrong_python == [
        f"no torch 2.13.0 wheel for Python 3.12 on x86_64 (cp312, *_x86_64.whl; it has {CPU_WHEEL})"
    ]
    with pytest.raises(UsageError) as err:
        wheelhouse.check(cell, house)
    command = wheelhouse.download_command(cell, house)
    assert command in str(err.value) and "torch==2.11.0" in command and "--python-version 3.12" in command
    assert wheelhouse.missing(cell, _house(tmp_path / "empty")) == ["no .whl files there"]


def test_the_build_requirements_are_the_dockerfiles() -> None:
    line = next(
        x for x in (REPO / "docker" / "Dockerfile").read_text().splitlines() if x.startswith("ARG BUILD_REQ")
    )
    assert wheelhouse.build_requirements() == line.split("=", 1)[1].strip('"').split()
    assert {"setuptools>=70.1", "ninja"} <= set(wheelhouse.build_requirements())
