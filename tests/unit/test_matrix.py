"""Matrix resolution: layering, defaults chosen to fit, tags and build args (the repo's real matrix.toml
and real TOML files written to tmp dirs), against the frozen facts of 2026-12-01 so that a facts update
moves none of these outcomes (tests/unit/test_live_facts.py checks the live facts and matrix)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support import FROZEN_MATRIX, REPO, frozen_cell, frozen_facts, frozen_matrix
from toolchain.spec import compat
from toolchain.spec.apex_fields import extra_flag_names
from toolchain.spec.cell_fields import TAG_MAX, TAG_RE
from toolchain.spec.matrix import load_matrix
from verify.domain.arch import Arch
from verify.layers import module_map

PIN = frozen_facts().apex_default_ref
CONTRACT_ARGS = {
    "BASE_DEVEL_IMAGE",
    "BASE_RUNTIME_IMAGE",
    "CUDA_VERSION",
    "PYTHON_VERSION",
    "TORCH_VERSION",
    "TORCH_INDEX_URL",
    "TORCH_CUDA_ARCH_LIST",
    "APEX_REPO",
    "APEX_REF",
    "APEX_FLAGS",
    "CELL_ID",
    "GCC_VERSION",
    "OS_CUDA_PACKAGES",
    "OS_CUDA_COMPONENTS",
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def simple(tmp_path: Path) -> Path:
    return write(
        tmp_path,
        """
        format_version = 1
        [defaults]
        python = "3.12"
        archs = ["8.0", "9.0", "10.0"]
        [cells.a]
        cuda = "12.4"
    """,
    )


def test_repo_matrix_is_valid_and_tags_are_docker_tags() -> None:
    matrix = load_matrix(REPO / "matrix.toml")  # the live matrix on the live facts
    assert len(matrix.cells) >= 4
    ids = [c.id for c in matrix.cells]
    assert len(set(ids)) == len(ids)
    for cell in matrix.cells:
        assert TAG_RE.match(cell.id) and len(cell.id) <= TAG_MAX
        ref = PIN[:7] if cell.apex_ref == PIN else cell.apex_ref  # a tag such as 25.04 is named as is
        assert cell.id.startswith(f"apex-{ref}-torch{cell.torch}-cu{cell.cuda}-py{cell.python}-{cell.os}")
        assert set(cell.build_args()) == CONTRACT_ARGS


def test_cuda_alone_picks_the_newest_torch_that_ships_it() -> None:
    cell = frozen_cell({"cuda": "12.4"}, matrix_path=FROZEN_MATRIX)
    assert cell.torch == "2.6.0" and cell.python == "3.11"
    assert cell.torch_index_url == "https://download.pytorch.org/whl/cu124"
    # `make image CUDA=12.4` builds exactly the matrix's cu124 cell (same tag, same cache)
    matrix = frozen_matrix(FROZEN_MATRIX)
    assert (
        cell.id == matrix.select(names=["cu124"])[0].id == "apex-6424da3-torch2.6.0-cu12.4-py3.11-ubuntu22.04"
    )


@pytest.mark.parametrize(
    ("cuda", "torch"), [("11.8", "2.7"), ("12.1", "2.5"), ("12.8", "2.11"), ("12.9", "2.8"), ("13.0", "2.14")]
)
def test_newest_torch_per_cuda(cuda: str, torch: str) -> None:
    assert compat.minor_of(frozen_cell({"cuda": cuda}, matrix_path=FROZEN_MATRIX).torch) == torch


def test_torch_minor_pins_the_recorded_patch_and_a_full_version_is_kept(simple: Path) -> None:
    assert frozen_cell({"cuda": "12.6", "torch": "2.7"}, matrix_path=simple).torch == "2.7.1"
    assert frozen_cell({"cuda": "12.6", "torch": "2.7.0"}, matrix_path=simple).torch == "2.7.0"


def test_build_args_follow_the_contract(simple: Path) -> None:
    cell = frozen_matrix(simple).cells[0]
    args = cell.build_args()
    assert set(args) == CONTRACT_ARGS
    assert args["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0"  # 10.0 left out: nvcc 12.4 cannot compile it
    assert args["APEX_FLAGS"] == "APEX_CPP_EXT=1 APEX_CUDA_EXT=1"
    assert args["APEX_REF"] == PIN and args["CELL_ID"] == cell.id
    assert args["BASE_DEVEL_IMAGE"] == "nvidia/cuda:12.4.1-devel-ubuntu22.04"
    assert args["BASE_RUNTIME_IMAGE"] == "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
    # [defaults] python 3.12 is a preference: ubuntu22.04 (the only OS of CUDA 12.4) ships 3.10/3.11
    assert args["GCC_VERSION"] == "11" and args["PYTHON_VERSION"] == "3.11"


def test_default_archs_fitted_to_the_toolkit_give_no_variant(simple: Path) -> None:
    cell12 = frozen_cell({"cuda": "12.4"}, matrix_path=simple)
    cell13 = frozen_cell({"cuda": "13.0"}, matrix_path=simple)
    # the 13.0 row has ptx_on_highest (PyTorch's CUDA 13 wheels end in +PTX); 12.4's has not
    assert cell12.archs == (Arch(8, 0), Arch(9, 0)) and cell13.archs == (
        Arch(8, 0),
        Arch(9, 0),
        Arch(10, 0, ptx=True),
    )
    assert not cell12.variant and not cell13.variant


def test_explicit_archs_and_extras_make_a_variant(simple: Path) -> None:
    cell = frozen_cell(
        {"cuda": "12.4", "archs": "9.0", "extras": "xentropy,fast_layer_norm"}, matrix_path=simple
    )
    assert cell.archs == (Arch(9, 0),)
    assert cell.id.endswith("-sm90-ext.fast_layer_norm.xentropy")
    assert cell.apex_flags == {
        "APEX_CPP_EXT": "1",
        "APEX_CUDA_EXT": "1",
        "APEX_XENTROPY": "1",
        "APEX_FAST_LAYER_NORM": "1",
    }
    ptx = frozen_cell({"cuda": "12.4", "archs": "8.0;9.0+PTX"}, matrix_path=simple)
    assert ptx.id.endswith("-sm80_90ptx") and ptx.arch_list == "8.0;9.0+PTX"


def test_extras_accept_names_flags_and_modules_from_the_module_map() -> None:
    names = extra_flag_names()
    contrib_flags = {f for f in module_map.known_flags() if f not in frozen_facts().apex_core_flags}
    assert set(names.values()) == contrib_flags
    cell = frozen_cell(
        {"cuda": "12.4", "archs": "9.0", "extras": "APEX_XENTROPY xentropy_cuda all"},
        matrix_path=FROZEN_MATRIX,
    )
    assert cell.extras == ("xentropy", "all")
    assert cell.apex_flags["APEX_ALL_CONTRIB_EXT"] == "1"


def test_layers_defaults_then_cell_then_command_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [defaults]
        python = "3.11"
        archs = "9.0"
        [cells.a]
        cuda = "12.6"
        python = "3.10"
        os = "ubuntu22.04"
    """,
    )
    cell = frozen_matrix(path).cells[0]
    assert (cell.python, cell.os, cell.archs) == ("3.10", "ubuntu22.04", (Arch(9, 0),))
    over = frozen_cell({"python": "3.11"}, matrix_path=path, base_cell="a")
    assert (over.python, over.os, over.cuda) == ("3.11", "ubuntu22.04", "12.6")


def test_defaults_os_is_adapted_to_what_the_cuda_has_but_a_cell_os_is_not(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [defaults]
        python = "3.12"
        os = "ubuntu24.04"
        archs = ["9.0"]
        [cells.old]
        cuda = "12.4"
        [cells.new]
        cuda = "12.8"
    """,
    )
    cells = {c.name: c for c in frozen_matrix(path).cells}
    assert cells["old"].os == "ubuntu22.04" and cells["new"].os == "ubuntu24.04"
    assert cells["new"].gcc == "13"


def test_gcc_default_is_capped_by_nvcc(tmp_path: Path) -> None:
    # ubuntu22.04's default gcc 11 fits nvcc 12.1 (newest 12); an explicit gcc-12 makes a variant
    cell = frozen_cell(
        {"cuda": "12.1", "torch": "2.5", "python": "3.11", "archs": "9.0", "os": "ubuntu22.04"}
    )
    assert cell.gcc == "11"
    explicit = frozen_cell({"cuda": "12.1", "torch": "2.5", "python": "3.11", "archs": "9.0", "gcc": "12"})
    assert explicit.gcc == "12" and explicit.id.endswith("-gcc12")


def test_full_cuda_version_is_read_as_its_minor() -> None:
    assert frozen_cell({"cuda": "12.4.1", "python": "3.11", "archs": "9.0"}).cuda == "12.4"


def test_overlong_variant_is_hashed_to_keep_the_tag_legal() -> None:
    every = ",".join(n for n in extra_flag_names() if n != "all" and not n.endswith(("_cuda", "_lib")))
    # tag 25.04 has every contrib module (the default commit lacks fmha, multihead_attn, gpu_direct_storage)
    cell = frozen_cell(
        {
            "cuda": "12.8",
            "python": "3.12",
            "archs": "8.0;8.6;9.0;10.0;12.0+PTX",
            "extras": every,
            "apex_ref": "25.04",
        }
    )
    assert len(cell.id) <= TAG_MAX and TAG_RE.match(cell.id)
    assert cell.variant.startswith("sm80_86_90_100_120ptx-ext.")  # the full variant is kept on the cell


def test_select_filters(simple: Path, tmp_path: Path) -> None:
    matrix = frozen_matrix(FROZEN_MATRIX)
    assert [c.name for c in matrix.select(cuda=["12.8"])] == ["cu128"]
    assert [c.name for c in matrix.select(torch=["2.11"])] == ["cu130"]
    assert [c.name for c in matrix.select(torch=["2.11.0"])] == ["cu130"]
    assert len(matrix.select()) == len(matrix.cells)


def test_custom_base_images_with_a_non_cuda_os(tmp_path: Path) -> None:
    """The CPU-only CI tier builds with its own base (debian12): allowed when both bases are given."""
    cell = frozen_cell(
        {
            "cuda": "12.6",
            "torch": "2.7",
            "python": "3.11",
            "os": "debian12",
            "archs": "9.0",
            "base_devel": "local/debian:12",
            "base_runtime": "local/debian:12",
        }
    )
    assert cell.build_args()["BASE_DEVEL_IMAGE"] == "local/debian:12"
    assert (cell.gcc, cell.os) == ("12", "debian12")
