"""The cleanup's prune order (scripts/test_machine_state.py): the engine keeps a build-cache record while
another builds on it, so each record is pruned only after every record that builds on it."""

from __future__ import annotations

import importlib.util

from tests.support import REPO

_spec = importlib.util.spec_from_file_location(
    "test_machine_state", REPO / "scripts" / "test_machine_state.py"
)
assert _spec and _spec.loader
machine_state = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(machine_state)


def _records(parent_of: dict[str, str | None], plural: bool = False) -> list[dict]:
    if plural:  # newer engines: a list of parents
        return [{"ID": i, "Parents": [p] if p else None} for i, p in parent_of.items()]
    return [{"ID": i, "Parent": p or ""} for i, p in parent_of.items()]


def test_children_go_before_their_parents_in_a_chain_and_a_fork() -> None:
    parent_of = {"base": None, "torch": "base", "apex": "torch", "slim": "torch", "old": None, "mount": None}
    for plural in (False, True):
        order = machine_state._deepest_first(_records(parent_of, plural), {"torch", "apex", "slim", "base"})
        assert set(order) == {"torch", "apex", "slim", "base"}
        for child, parent in parent_of.items():
            if child in order and parent in order:
                assert order.index(child) < order.index(parent), (plural, order)


def test_only_wanted_records_that_still_exist_are_named() -> None:
    records = _records({"a": None, "b": "a"})
    assert machine_state._deepest_first(records, {"b", "gone"}) == ["b"]
    assert machine_state._deepest_first(records, set()) == []


def test_a_deeper_record_goes_first_whatever_its_name() -> None:
    # a1 builds on r, b2 on a1: b2 first, though a1 sorts before it by name
    records = _records({"r": None, "a1": "r", "b2": "a1"})
    assert machine_state._deepest_first(records, {"r", "a1", "b2"}) == ["b2", "a1", "r"]
