"""The live matrix keeps one cell per CUDA on the newest torch that ships it, derived from the live facts (a
cell naming no torch), beside the pinned stack of the H200 test host."""

from __future__ import annotations

from tests.support import REPO
from toolchain.spec import compat
from toolchain.spec.matrix import load_matrix
from toolchain.spec.toml_loader import load_toml

MATRIX = REPO / "matrix.toml"


def test_every_cuda_of_the_matrix_has_a_cell_on_its_newest_torch() -> None:
    facts = compat.load()
    cells = load_matrix(MATRIX).cells
    for cuda in sorted({c.cuda for c in cells if c.platform == facts.default_platform}):
        newest = facts.torch_for_cuda(cuda)[0].version
        assert any(c.cuda == cuda and c.torch == newest for c in cells), (cuda, newest)


def test_the_cuda_cells_name_no_torch_so_the_facts_move_them() -> None:
    raw = load_toml(MATRIX)["cells"]
    facts = compat.load()
    cells = {c.name: c for c in load_matrix(MATRIX).cells}
    for name in ("cu124", "cu126", "cu128", "cu130", "cu132"):
        assert "torch" not in raw[name], name
        assert cells[name].torch == facts.torch_for_cuda(cells[name].cuda)[0].version
    assert (cells["cu126"].torch, cells["cu128"].torch, cells["cu130"].torch) == (
        "2.14.1",
        "2.11.0",
        "2.14.1",
    )


def test_the_h200_hosts_stack_stays_a_cell_of_its_own() -> None:
    h200 = {c.name: c for c in load_matrix(MATRIX).cells}["h200"]
    assert (h200.torch, h200.cuda, h200.python) == ("2.11.0", "13.0", "3.12")
    assert h200.id == "apex-6424da3-torch2.11.0-cu13.0-py3.12-ubuntu24.04"  # the tag the H200 evidence names


def test_cuda_13_0_images_are_the_patch_torch_pins() -> None:
    facts = compat.load()
    assert facts.cuda["13.0"].full == "13.0.3"
    assert facts.base_images("13.0", "ubuntu24.04") == (
        "nvidia/cuda:13.0.3-devel-ubuntu24.04",
        "nvidia/cuda:13.0.3-runtime-ubuntu24.04",
    )
