"""The local-base route (a debootstrap base, CUDA from NVIDIA's wheels, torch from PyPI) when NVIDIA's
images cannot be pulled; the glibc x nvcc host clash; the builder's progress lines (an injected clock).

Rules resolve against the frozen facts of 2026-12-01 with this issue's rows added here as data, so a later
edit of the live facts does not move them; the live rows themselves are checked at the end."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.support import FROZEN_MATRIX, frozen_facts
from toolchain.errors import EnvironmentUnavailable, MatrixError, UsageError
from toolchain.image import base_route
from toolchain.spec import compat
from toolchain.spec.matrix import cli_cell
from verify.runtime import exit_codes

MATRIX = FROZEN_MATRIX
_FROZEN = frozen_facts()
FACTS = dataclasses.replace(
    _FROZEN,
    os={
        **_FROZEN.os,
        "debian12": dataclasses.replace(_FROZEN.os["debian12"], glibc="2.36"),
        "debian13": compat.OsRelease("debian13", "14", ("12", "13", "14"), ("3.13",), glibc="2.41"),
    },
    local_bases={
        "debian12": compat.LocalBase("debian12", "apex-toolchain/base:bookworm", "bookworm"),
        "debian13": compat.LocalBase("debian13", "apex-toolchain/base:trixie", "trixie"),
    },
    host_clashes=(
        compat.HostClash("2.41", "12.9", "cospi clash", "test"),
        compat.HostClash("2.42", "13.1", "rsqrt clash", "test"),
    ),
)


_GIVEN: dict[str, dict[str, str]] = {}  # cell id -> the command-line values it was made from


def cell(base: str | None = None, **values: str):
    made = cli_cell(values, matrix_path=MATRIX, base_cell=base, facts=FACTS)
    _GIVEN[made.id] = values
    return made


def again(current, changes):
    """What build.py's re-resolver does: the cell's own layers (its table, its command line), then the change."""
    return cli_cell(
        {**_GIVEN.get(current.id, {}), **changes},
        matrix_path=MATRIX,
        base_cell=None if current.name == "cli" else current.name,
        facts=FACTS,
    )


def unreachable(ref: str) -> str:
    return "lookup registry-1.docker.io: no such host"


def choose(c, requested="auto", available=unreachable):
    return base_route.choose(c, requested, again, available, FACTS)


# --- the cell on a local base -------------------------------------------------------------------


def test_a_debian13_cell_stands_on_the_local_base_with_torch_from_pypi() -> None:
    c = cell(cuda="13.2", torch="2.15", python="3.13", os="debian13", archs="9.0")
    assert (c.base_route, c.base_devel, c.base_runtime) == (
        "local",
        "apex-toolchain/base:trixie",
        "apex-toolchain/base:trixie",
    )
    assert c.torch_index_url == "https://pypi.org/simple" and c.gcc == "14"
    assert c.id == "apex-6424da3-torch2.15.0-cu13.2-py3.13-debian13-sm90"
    assert cell(cuda="13.2").base_route == "nvidia"


def test_glibc_2_41_refuses_nvcc_12_with_the_fix() -> None:
    with pytest.raises(MatrixError) as caught:
        cell(cuda="12.8", torch="2.8", python="3.13", os="debian13")
    text = str(caught.value)
    assert caught.value.exit_code == exit_codes.USAGE
    assert "debian13 has glibc 2.41" in text and "nvcc up to 12.9" in text and "cospi" in text
    assert "--cuda 13.0" in text and "--os debian12" in text


def test_glibc_2_42_would_refuse_nvcc_13_1_but_not_13_2() -> None:
    clash = FACTS.host_clashes[1]
    assert (
        clash.applies("2.42", "13.1")
        and not clash.applies("2.42", "13.2")
        and not clash.applies("2.41", "13.1")
    )
    assert not clash.applies(None, "12.4")  # an OS whose glibc is not recorded: no rule applies


# --- --base auto | nvidia | local ---------------------------------------------------------------------


def test_auto_keeps_nvidias_base_when_it_is_there() -> None:
    c = cell(base="cu130")
    assert choose(c, available=lambda ref: None) == (c, None)


def test_auto_moves_an_unpullable_cell_to_the_local_base_and_says_so_in_one_line() -> None:
    c = cell(base="cu130")  # torch 2.11: PyPI's wheel is its CUDA 13.0 build; Python 3.12 from [defaults]
    moved, note = choose(c)
    # no local base packages 3.12: the newest local OS, and its Python (torch 2.11 has cp313 wheels)
    assert moved.base_route == "local" and moved.os == "debian13" and moved.python == "3.13"
    assert (moved.cuda, moved.torch, moved.archs, moved.apex_ref) == (c.cuda, c.torch, c.archs, c.apex_ref)
    assert (
        moved.torch_index_url == "https://pypi.org/simple"
        and moved.base_devel == "apex-toolchain/base:trixie"
    )
    assert (
        "\n" not in note
        and "nvidia/cuda:13.0.1-devel-ubuntu24.04 cannot be pulled (lookup registry-1" in note
    )
    assert "debian13 with Python 3.13, as none packages the cell's 3.12" in note
    assert "apex-toolchain/base:trixie" in note and moved.id in note and "--base nvidia" in note
    # a Python the cell writes and a local base packages: that base
    assert choose(cell(cuda="13.0", torch="2.11", python="3.11", os="ubuntu22.04"))[0].os == "debian12"


def test_auto_stops_with_exit_3_naming_the_index_where_pypi_lacks_the_build() -> None:
    with pytest.raises(EnvironmentUnavailable) as caught:  # PyPI's torch 2.8 is its CUDA 12.8 build
        choose(cell(cuda="13.0", torch="2.10", python="3.11", os="ubuntu22.04"))
    text = str(caught.value)
    assert caught.value.exit_code == exit_codes.ENVIRONMENT
    assert "PyPI does not carry" in text and "PyPI's torch 2.10 is CUDA 12.8" in text
    assert "--torch-index-url https://download.pytorch.org/whl/cu130" in text and "--base local" in text


def test_a_cuda_12_cell_takes_debian13s_own_toolkit_as_nvidias_wheels_hold_no_nvcc_12() -> None:
    c = cell(base="cu124")  # torch 2.6: PyPI's wheel is its CUDA 12.4 build
    moved, note = choose(c)
    assert (moved.os, moved.python, moved.gcc, moved.cuda, moved.torch) == (
        "debian13",
        "3.13",
        "13",
        "12.4",
        "2.6.0",
    )
    assert moved.os_cuda_packages == ("nvidia-cuda-toolkit",) and moved.archs == c.archs
    assert moved.build_args()["OS_CUDA_COMPONENTS"] == "contrib non-free"
    assert (
        "CUDA 12.4 from debian13's nvidia-cuda-toolkit" in note
        and "Python 3.13, as none packages the cell's 3.11" in note
    )
    # where no OS archive has the CUDA either: exit 3 saying why each local base refused
    with pytest.raises(EnvironmentUnavailable) as caught:
        choose(cell(base="cu126"))
    text = str(caught.value)
    assert (
        "no local base fits it" in text
        and "NVIDIA's wheels hold no nvcc 12.6" in text
        and "glibc 2.41" in text
    )
    with pytest.raises(EnvironmentUnavailable):
        choose(cell(cuda="12.6", torch="2.8", python="3.11", os="ubuntu22.04"))


def test_local_forces_the_route_and_nvidia_refuses_an_os_nvidia_has_no_image_for() -> None:
    c = cell(base="cu130")
    moved, note = choose(c, "local", available=lambda ref: pytest.fail("--base local asks no registry"))
    assert moved.base_route == "local" and note.startswith("cell cu130: --base local: building it")
    assert choose(c, "nvidia") == (c, None)
    with pytest.raises(UsageError, match="NVIDIA publishes no CUDA 13.2 image for debian13"):
        choose(cell(cuda="13.2", torch="2.15", python="3.13", os="debian13"), "nvidia")


def test_a_written_python_no_local_base_packages_is_exit_3_naming_the_ones_that_do() -> None:
    with pytest.raises(EnvironmentUnavailable) as caught:
        choose(cell(cuda="13.0", torch="2.11", python="3.12"))
    text = str(caught.value)
    assert caught.value.exit_code == exit_codes.ENVIRONMENT and "no local base fits it" in text
    assert (
        "debian12 (Python 3.11)" in text
        and "debian13 (Python 3.13)" in text
        and "no python3.12 package" in text
    )


def test_given_bases_are_never_moved() -> None:
    c = cell(
        cuda="13.0", torch="2.11", base_devel="mirror.local/cuda:devel", base_runtime="mirror.local/cuda:rt"
    )
    assert c.base_route == "given" and choose(c) == (c, None)


# --- the live rows ---------------------------------------------------------------------------------


def test_the_live_facts_carry_the_local_routes_rows() -> None:
    live = compat.load()
    assert set(live.local_bases) == {"debian12", "debian13", "debian14"}
    assert live.os["debian13"].python == ("3.13",) and "3.14" in live.os["debian14"].python
    assert live.host_clash("debian13", "12.8") is not None and live.host_clash("debian13", "13.2") is None
    assert live.host_clash("debian13", "12.4") is None  # its own nvidia-cuda-toolkit, patched for its glibc
    assert live.host_clash("debian12", "12.4") is None
    assert "2.14.0" in live.torch["2.14"].patches
    assert {"12.6", "12.8", "13.0"} <= set(live.torch["2.11"].aarch64_cuda) <= set(live.torch["2.11"].cuda)
    assert {"12.6", "12.8", "13.0"} <= set(live.torch["2.9"].aarch64_cuda)
    assert (live.cuda["13.0"].full, live.cuda["13.2"].full) == ("13.0.3", "13.2.2")
    with pytest.raises(MatrixError, match=r"torch>=2\.6\.0"):
        cli_cell({"cuda": "12.4", "torch": "2.5"}, matrix_path=MATRIX)


def test_a_matrix_cell_without_a_base_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    """`build.py matrix`: a cell that has no base is an environment_unavailable row (exit 3), built by nobody."""
    from toolchain.console import Console
    from toolchain.runs import run_loop
    from toolchain.runs.run_request import RunRequest

    c = cell(base="cu126")
    request = RunRequest(out=tmp_path / "out", logs=tmp_path / "logs")
    code = run_loop.run_matrix(
        [c], request, Console(), matrix_path=MATRIX, unavailable={"cu126": "no local base"}
    )
    assert code == exit_codes.ENVIRONMENT
    result = json.loads(run_loop.result_path(request.out, c.id).read_text())
    assert result["status"] == "environment_unavailable" and result["build"]["error"] == "no local base"
    overview = json.loads((request.out / "matrix-report.json").read_text())
    assert overview["status"] == "complete"
