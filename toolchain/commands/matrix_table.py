"""The README's matrix table, one row per cell as `build.py plan` resolves it (`build.py plan --markdown`).

The README holds this command's output; tests/unit/test_readme_matrix.py keeps the two equal, so a cell
added to matrix.toml or a fact changed in compat.toml shows up as a stale README until it is pasted again.
"""

from __future__ import annotations

from toolchain.spec import compat
from toolchain.spec.cell import Cell

HEADER = (
    "| cell | CUDA | torch | Python | OS (GCC), platform | archs | image tag |\n|---|---|---|---|---|---|---|"
)


def render(cells: list[Cell]) -> str:
    """The table's lines, header first, in the matrix's order."""
    return "\n".join([HEADER, *(_row(cell, cells) for cell in cells)])


def _row(cell: Cell, cells: list[Cell]) -> str:
    where = f"{cell.os} ({cell.gcc})"
    if cell.base_route != "nvidia":
        where += f", {cell.base_route} base"
    if cell.platform != compat.DEFAULT_PLATFORM:
        where += f", {cell.platform}"
    values = (cell.name, cell.cuda, cell.torch, cell.python, where, cell.arch_list, _tag(cell, cells))
    return "| " + " | ".join(values) + " |"


def _tag(cell: Cell, cells: list[Cell]) -> str:
    if cell.tag == cell.id:
        return f"`{cell.tag}`"
    owner = next((other.name for other in cells if other.id == cell.tag), None)
    if owner is None:
        return f"`{cell.tag}` (cell id `{cell.id}`)"
    return f"{owner}'s tag (one OCI index); cell id `{cell.id}`"
