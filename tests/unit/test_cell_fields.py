"""The one table of cell fields: the Cell record, build.py's cell options and the grammar checks all
follow it (a field added to the table is a matrix key, a Cell attribute and an option at once)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support import REPO
from toolchain.commands.cells import overrides_from
from toolchain.commands.parser import build_parser
from toolchain.errors import MatrixError
from toolchain.spec import cell_fields
from toolchain.spec.cell import Cell
from toolchain.spec.matrix import cli_cell, load_matrix

GRAMMAR_FIELDS = [f for f in cell_fields.FIELDS if f.grammar is not None]


def test_every_field_is_a_cell_attribute_and_back() -> None:
    derived = {
        "id",
        "name",
        "variant",
        "image_tag",
        "base_route",
        "os_cuda_packages",
        "os_cuda_components",
        "made_id",
    }  # made by the resolver, never written
    assert {f.name for f in dataclasses.fields(Cell)} - derived == set(cell_fields.CELL_KEYS) - {
        "tag"
    }  # tag: the id


def test_build_py_has_one_option_per_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BASE_DEVEL_IMAGE", "mirror/cuda:devel")
    image = build_parser().commands["image"]
    by_dest = {a.dest: a for a in image._actions if a.option_strings}
    for field in cell_fields.FIELDS:
        assert by_dest[field.name].option_strings == [field.option] and by_dest[field.name].help == field.help
    assert by_dest["base_devel"].default == "mirror/cuda:devel" and by_dest["torch"].default is None
    args = image.parse_args(["--apex-ref", "25.09", "--torch-index-url", "https://x/simple"])
    assert overrides_from(args) == {
        "apex_ref": "25.09",
        "torch_index_url": "https://x/simple",
        "base_devel": "mirror/cuda:devel",
    }


@pytest.mark.parametrize("field", GRAMMAR_FIELDS, ids=lambda f: f.name)
@pytest.mark.parametrize("where", ["cli", "file"])
def test_a_value_outside_the_grammar_names_the_field_and_the_fix_where_it_was_written(
    field: cell_fields.CellField, where: str, tmp_path
) -> None:
    bad = "not valid!"
    assert field.grammar  # GRAMMAR_FIELDS holds only fields with one
    assert not field.grammar.pattern.fullmatch(bad)
    if where == "cli":
        with pytest.raises(MatrixError) as caught:
            cli_cell({"cuda": "12.4", field.name: bad}, matrix_path=REPO / "matrix.toml")
        fix_start = f"use {field.option} "
    else:
        path = tmp_path / "matrix.toml"
        path.write_text(f'[cells.c]\ncuda = "12.4"\narchs = ["9.0"]\n{field.name} = "{bad}"\n')
        with pytest.raises(MatrixError) as caught:
            load_matrix(path)
        fix_start = f'use {field.name} = "'
    problem = next(p for p in caught.value.problems if p.problem.startswith(f"{field.name} "))
    assert problem.problem == f"{field.name} {bad!r} {field.grammar.problem}"
    assert problem.fix.startswith(fix_start) and problem.fix.endswith(field.grammar.note)
