"""verify.runtime.field_types: every problem at once, each under its dotted path; limits on depth and size that hold
for unknown keys too; messages that never echo a value. Inputs are real decoded JSON and TOML."""

from __future__ import annotations

import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from verify.runtime import field_types as ft

if sys.version_info >= (3, 11):
    import tomllib
else:  # mypy checks as Python 3.10: the dev extra's backport
    import tomli as tomllib

CELL = ft.Record(
    {
        "cuda": ft.STR,
        "archs": ft.ListOf(ft.STR, max_items=4),
        "apex_flags": ft.MapOf(ft.STR),
        "gcc": ft.OneOf(ft.INT, ft.STR),
        "base_devel": ft.Nullable(ft.STR),
        "jobs": ft.Int(minimum=1),
        "ratio": ft.FLOAT,
        "gate": ft.BOOL,
    },
    required=("cuda",),
)


def test_a_valid_value_has_no_problems() -> None:
    data = tomllib.loads(
        'cuda = "12.4"\narchs = ["9.0"]\ngcc = 12\nratio = 2\ngate = true\n[apex_flags]\nAPEX_CPP_EXT = "1"\n'
    )
    assert ft.check(data, CELL, "cells.a", words=ft.TOML) == []
    assert ft.check({"cuda": "12.4", "base_devel": None, "gcc": "12"}, CELL, "c") == []


def test_every_problem_is_reported_with_its_path() -> None:
    data = tomllib.loads(
        'archs = "9.0"\ngcc = [12]\nbase_devel = 3\njobs = 0\nratio = nan\ngate = 1\n'
        '[apex_flags]\n"APEX.X" = 1\n'
    )
    problems = [str(p) for p in ft.check(data, CELL, "cells.a", words=ft.TOML)]
    assert problems == [
        "cells.a.cuda: missing (required)",
        "cells.a.archs: expected a list, got a string",
        "cells.a.gcc: expected an integer or a string, got a list",
        "cells.a.base_devel: expected a string or null, got an integer",
        "cells.a.jobs: expected an integer of at least 1, got 0",
        "cells.a.ratio: expected a finite number, got nan",
        "cells.a.gate: expected a boolean, got an integer",
        'cells.a.apex_flags["APEX.X"]: expected a string, got an integer',
    ]
    assert ft.summary([ft.FieldProblem(str(i), "x") for i in range(7)], limit=2) == "0: x; 1: x (and 5 more)"


def test_records_tables_unknown_keys_and_booleans_are_not_integers() -> None:
    closed = ft.Record({"a": ft.INT}, extra=None)
    assert [str(p) for p in ft.check({"a": True, "b": 1}, closed, "t", words=ft.TOML)] == [
        "t.a: expected an integer, got a boolean",
        "t.b: unknown key",
    ]
    assert [str(p) for p in ft.check([], closed, "t", words=ft.TOML)] == ["t: expected a table, got a list"]
    assert [str(p) for p in ft.check([], closed, "t")] == ["t: expected an object, got a list"]


def test_depth_and_sizes_are_bounded_everywhere_without_echoing() -> None:
    deep: list = []
    for _ in range(5000):  # deeper than a recursive walk could go
        deep = [deep]
    problems = ft.check({"free": deep}, ft.Record({}), "doc")
    assert [p.message for p in problems] == ["nested deeper than 32 levels"]
    assert problems[0].path.startswith("doc.free[0][0]")
    big = "y" * 2_000_000
    problems = ft.check({"cuda": big, "archs": ["a"] * 5, "apex_flags": {big: 1}}, CELL, "c")
    text = ft.summary(problems)
    assert "c.cuda: a string of 2000000 characters (at most 1000000)" in text
    assert "c.archs: a list of 5 items (at most 4)" in text
    assert str(problems[-1]) == f'c.apex_flags["{"y" * 60}..."]: expected a string, got an integer'
    assert len(text) < 800
    many = ft.check(list(range(1000)), ft.ListOf(ft.STR), "l", limits=ft.Limits(max_problems=10))
    assert len(many) == 11 and str(many[-1]) == "l: 990 more problems not listed"


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=40,
    )
)
def test_any_decoded_value_gets_a_list_of_problems_never_an_exception(value: object) -> None:
    for shape in (CELL, ft.ListOf(CELL), ft.MapOf(ft.Nullable(ft.FLOAT)), ft.ANY):
        problems = ft.check(value, shape, "x", limits=ft.Limits(max_depth=3))
        assert all(p.path.startswith("x") and p.message for p in problems)
