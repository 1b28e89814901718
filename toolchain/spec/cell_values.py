"""One cell's values, layered (compatibility facts -> [defaults] -> [cells.NAME] -> command line), with
where each came from, so that every problem's fix is written in the syntax of that place (`--torch 2.6`
vs `torch = "2.6" in [cells.old]`). Problems are collected, not raised: one cell reports all of its own.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from toolchain.errors import CellProblem
from toolchain.spec.cell_fields import BY_NAME, CELL_KEYS
from toolchain.spec.compat import Compat, version_key
from toolchain.spec.field_shapes import field_problems
from verify.runtime.messages import closest, shown


@dataclasses.dataclass
class _Value:
    value: Any
    origin: str  # "defaults" | "cell" | "cli"


class CellValues:
    """Resolve one cell's layers; collect problems instead of stopping at the first."""

    def __init__(
        self, name: str, label: str, layers: Sequence[tuple[str, Mapping[str, object]]], facts: Compat
    ) -> None:
        self.name = name
        self.label = label
        self.facts = facts
        self.problems: list[CellProblem] = []
        self.values: dict[str, _Value] = {}
        # keys whose value has the wrong type or characters (reported by check_layer): key -> origin.
        # They are neither used nor replaced by a lower layer's value, and never reported as missing.
        self.invalid: dict[str, str] = {}
        self.defaults_archs: list[str] = []
        for origin, layer in layers:
            for key, value in layer.items():
                if key not in CELL_KEYS or value is None or value == "":
                    continue
                if field_problems(key, value, origin):
                    self.values.pop(key, None)
                    self.invalid[key] = origin
                    continue
                self.values[key] = _Value(value, origin)
                self.invalid.pop(key, None)
                if origin == "defaults" and key == "archs":
                    self.defaults_archs = self.as_list("archs") or []

    # how to write a fix where this value came from
    def how(self, key: str, value: str, like: str | None = None) -> str:
        """`--key value` or `key = "value" in [cells.X]`, matching where `key` (or `like`) was written."""
        source = key if key in self.values else like
        origin = self.values[source].origin if source in self.values else self.invalid.get(key, "cell")
        if origin == "cli":
            return f"--{key.replace('_', '-')} {value}"
        where = "[defaults]" if origin == "defaults" else f"[cells.{self.name}]"
        return f'{key} = "{value}" in {where}'

    def problem(self, problem: str, fix: str) -> None:
        self.problems.append(CellProblem(self.label, problem, fix))

    def get(self, key: str) -> _Value | None:
        return self.values.get(key)

    def missing(self, key: str) -> bool:
        """Not given at all (an invalid value was given: its problem is already reported)."""
        return key not in self.values and key not in self.invalid

    def text(self, key: str) -> str | None:
        entry = self.values.get(key)
        return None if entry is None else str(entry.value).strip()

    def explicit(self, key: str) -> bool:
        entry = self.values.get(key)
        return entry is not None and entry.origin != "defaults"

    def as_list(self, key: str) -> list[str] | None:
        entry = self.values.get(key)
        if entry is None:
            return None
        if isinstance(entry.value, str):
            return [p for p in re.split(r"[;,\s]+", entry.value) if p]
        return [str(v).strip() for v in entry.value]

    def grammar_ok(self, key: str, text: str | None) -> bool:
        """The value against its field's fixed grammar (cell_fields.py); a problem with the fix when not."""
        grammar = BY_NAME[key].grammar
        if not text or grammar is None or grammar.pattern.fullmatch(text):
            return True
        self.problem(
            f"{key} {shown(text)} {grammar.problem}",
            f"use {self.how(key, grammar.example(self.facts))}{grammar.note}",
        )
        return False


def nearest(value: str, choices: list[str]) -> str:
    """The choice closest to value (numerically for versions); the newest when none is close."""
    return next(iter(closest(value, choices)), max(choices, key=version_key))
