"""Check decoded JSON or TOML against a declared shape: every field's type, the nesting depth and the
sizes, with every problem reported at once under the field's dotted path. Standard library only (it
runs in images), used for the build manifest, `build.py report`'s inputs and the matrix's cell fields.

    from verify.runtime import field_types as ft

    CELL = ft.Record(
        {"cuda": ft.STR, "archs": ft.ListOf(ft.STR, max_items=32), "apex_flags": ft.MapOf(ft.STR),
         "gcc": ft.OneOf(ft.INT, ft.STR), "base_devel": ft.Nullable(ft.STR)},
        required=("cuda",),
    )
    problems = ft.check(table, CELL, "cells.cu124", words=ft.TOML)   # [] when every field is right
    for problem in problems:
        print(problem)                    # cells.cu124.archs: expected a list, got a string
    raise SomeUsageError(ft.summary(problems))   # one line: the first few, then "(and N more)"

Shapes (frozen records; combine freely):
  STR, INT, FLOAT, BOOL    scalars; `Str(max_len=N)`, `Int(minimum=, maximum=)` bound them further;
                           `Str(pattern="[0-9]+[.][0-9]+", means="a version like 2.6")` checks the text too. INT
                           refuses booleans (True is an int in Python); FLOAT takes integers and refuses
                           inf/nan (`Float(finite=False)` takes them).
  ANY                      any value: only the limits apply (free-form parts such as a check's `details`)
  ListOf(item, max_items=, min_items=) a list whose every element is `item`
  MapOf(value, max_items=, keys=) an object / table, every value `value` (and every key `keys`, a Str)
  Record(fields, required=(), extra=ANY)
                           the keys in `fields` with their shapes, `required` ones must be present; other keys
                           are checked against `extra` (ANY: allowed within the limits; None: "unknown key")
  Nullable(shape)          null or `shape`
  OneOf(*shapes)           the first shape whose type the value has; else "expected a string or an integer"

`Limits` (max_depth, max_items, max_str_len) bound every value, unknown keys included; what is deeper or
bigger is reported, not walked, so a hostile document costs at most its size. Paths read
`root.key.sub[3].leaf`; a key that is not an identifier is quoted (`root.flags["a.b"]`). A message names
the expected and the actual type (and a size), and of a value at most its first 40 characters (a Str
pattern that does not match), so nothing huge is echoed.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
from collections.abc import Mapping
from typing import Any

JSON = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "list": "a list",
    "dict": "an object",
    "null": "null",
    "datetime": "a date/time",
}
TOML = {**JSON, "dict": "a table"}  # TOML's own word for an object; "a list" reads better than "an array"


@dataclasses.dataclass(frozen=True)
class Limits:
    max_depth: int = 32  # containers inside containers; real reports and manifests nest at most 6 deep
    max_items: int = 100_000  # per list or object
    max_str_len: int = 1_000_000  # characters per string (a build log tail line can be long)
    max_problems: int = 200  # kept; the rest are counted


DEFAULT_LIMITS = Limits()


@dataclasses.dataclass(frozen=True)
class FieldProblem:
    path: str  # e.g. manifest.versions.torch
    message: str  # e.g. expected a string, got a list

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclasses.dataclass(frozen=True)
class Str:
    max_len: int | None = None
    pattern: str | None = None  # a regular expression the whole text must match (re.fullmatch)
    means: str = ""  # what the pattern stands for, in messages: "a version like 2.6"


@dataclasses.dataclass(frozen=True)
class Int:
    minimum: int | None = None
    maximum: int | None = None


@dataclasses.dataclass(frozen=True)
class Float:
    finite: bool = True  # False: inf and nan are allowed too


@dataclasses.dataclass(frozen=True)
class Bool:
    pass


@dataclasses.dataclass(frozen=True)
class Anything:
    pass


@dataclasses.dataclass(frozen=True)
class ListOf:
    item: Shape
    max_items: int | None = None
    min_items: int = 0


@dataclasses.dataclass(frozen=True)
class MapOf:
    value: Shape
    max_items: int | None = None
    keys: Str | None = None


@dataclasses.dataclass(frozen=True)
class Record:
    fields: Mapping[str, Shape]
    required: tuple[str, ...] = ()
    extra: Shape | None = Anything()


@dataclasses.dataclass(frozen=True)
class Nullable:
    shape: Shape


@dataclasses.dataclass(frozen=True)
class OneOf:
    shapes: tuple[Shape, ...]

    def __init__(self, *shapes: Shape) -> None:
        object.__setattr__(self, "shapes", tuple(shapes))


Shape = Str | Int | Float | Bool | Anything | ListOf | MapOf | Record | Nullable | OneOf

STR, INT, FLOAT, BOOL, ANY = Str(), Int(), Float(), Bool(), Anything()


def check(
    value: Any, shape: Shape, root: str, *, limits: Limits = DEFAULT_LIMITS, words: Mapping[str, str] = JSON
) -> list[FieldProblem]:
    """Every problem of `value` against `shape`, each under its path from `root`; [] when it fits."""
    walker = _Walker(limits, words)
    walker.walk(value, shape, root, 0)
    if walker.dropped:
        walker.problems.append(FieldProblem(root, f"{walker.dropped} more problems not listed"))
    return walker.problems


def summary(problems: list[FieldProblem], limit: int = 5) -> str:
    """One line for a message: the first `limit` problems, then how many more."""
    shown = "; ".join(str(p) for p in problems[:limit])
    return shown + (f" (and {len(problems) - limit} more)" if len(problems) > limit else "")


def type_word(value: Any, words: Mapping[str, str] = JSON) -> str:
    """'a string', 'an integer', 'a list', ... for the type of a decoded value."""
    return words.get(_kind(value)) or f"a {type(value).__name__}"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "dict"
    if isinstance(value, (datetime.date, datetime.time)):
        return "datetime"
    return type(value).__name__


_KINDS = {
    Str: ("str",),
    Int: ("int",),
    Float: ("float", "int"),
    Bool: ("bool",),
    ListOf: ("list",),
    MapOf: ("dict",),
    Record: ("dict",),
}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_MAX_KEY_IN_PATH = 60


def _accepts(shape: Shape, kind: str) -> bool:
    if isinstance(shape, Anything):
        return True
    if isinstance(shape, Nullable):
        return kind == "null" or _accepts(shape.shape, kind)
    if isinstance(shape, OneOf):
        return any(_accepts(s, kind) for s in shape.shapes)
    return kind in _KINDS[type(shape)]


def _key_path(path: str, key: Any) -> str:
    text = str(key)
    if _IDENTIFIER.match(text) and len(text) <= _MAX_KEY_IN_PATH:
        return f"{path}.{text}"
    if len(text) > _MAX_KEY_IN_PATH:
        text = text[:_MAX_KEY_IN_PATH] + "..."
    return f"{path}[{json.dumps(text)}]"


class _Walker:
    def __init__(self, limits: Limits, words: Mapping[str, str]) -> None:
        self.limits, self.words = limits, words
        self.problems: list[FieldProblem] = []
        self.dropped = 0

    def report(self, path: str, message: str) -> None:
        if len(self.problems) < self.limits.max_problems:
            self.problems.append(FieldProblem(path, message))
        else:
            self.dropped += 1

    def describe(self, shape: Shape) -> str:
        if isinstance(shape, Nullable):
            return f"{self.describe(shape.shape)} or null"
        if isinstance(shape, OneOf):
            return " or ".join(self.describe(s) for s in shape.shapes)
        if isinstance(shape, Anything):
            return "any value"
        return self.words[_KINDS[type(shape)][0]]

    def walk(self, value: Any, shape: Shape, path: str, depth: int) -> None:
        kind = _kind(value)
        if not _accepts(shape, kind):
            self.report(path, f"expected {self.describe(shape)}, got {type_word(value, self.words)}")
            return
        if isinstance(shape, Nullable):
            if value is not None:
                self.walk(value, shape.shape, path, depth)
            return
        if isinstance(shape, OneOf):
            self.walk(value, next(s for s in shape.shapes if _accepts(s, kind)), path, depth)
            return
        if kind in ("list", "dict") and not self._container_ok(value, kind, path, depth, shape):
            return
        self._walk_accepted(value, shape, path, depth)

    def _walk_accepted(self, value: Any, shape: Shape, path: str, depth: int) -> None:
        """`value` is of a kind `shape` accepts, within the container limits: the shape's own checks."""
        if isinstance(shape, Anything):
            self._walk_any(value, path, depth)
        elif isinstance(shape, Str):
            self._string(value, path, shape.max_len, shape)
        elif isinstance(shape, Int):
            self._integer(value, path, shape)
        elif isinstance(shape, Float) and shape.finite and not math.isfinite(value):
            self.report(path, f"expected a finite number, got {value}")
        elif isinstance(shape, ListOf):
            self._list(value, shape, path, depth)
        elif isinstance(shape, MapOf):
            self._map(value, shape, path, depth)
        elif isinstance(shape, Record):
            self._record(value, shape, path, depth)

    def _list(self, value: list, shape: ListOf, path: str, depth: int) -> None:
        if len(value) < shape.min_items:
            self.report(path, f"expected a list of at least {shape.min_items} items, got {len(value)}")
        for index, item in enumerate(value):
            self.walk(item, shape.item, f"{path}[{index}]", depth + 1)

    def _map(self, value: dict, shape: MapOf, path: str, depth: int) -> None:
        for key, item in value.items():
            if shape.keys is not None:
                self._string(str(key), _key_path(path, key), shape.keys.max_len, shape.keys, "key")
            self.walk(item, shape.value, _key_path(path, key), depth + 1)

    def _container_ok(self, value: Any, kind: str, path: str, depth: int, shape: Shape) -> bool:
        if depth >= self.limits.max_depth:
            self.report(path, f"nested deeper than {self.limits.max_depth} levels")
            return False
        cap = getattr(shape, "max_items", None) or self.limits.max_items
        if len(value) > cap:
            what = "items" if kind == "list" else "keys"
            self.report(path, f"{type_word(value, self.words)} of {len(value)} {what} (at most {cap})")
            return False
        return True

    def _string(
        self, value: str, path: str, max_len: int | None, shape: Str | None = None, what: str = "value"
    ) -> None:
        cap = min(max_len or self.limits.max_str_len, self.limits.max_str_len)
        if len(value) > cap:
            self.report(path, f"a string of {len(value)} characters (at most {cap})")
        elif shape is not None and shape.pattern is not None and not re.fullmatch(shape.pattern, value):
            shown = json.dumps(value[:40] + ("..." if len(value) > 40 else ""))
            self.report(
                path, f"expected {shape.means or 'text matching ' + shape.pattern} as the {what}, got {shown}"
            )

    def _integer(self, value: int, path: str, shape: Int) -> None:
        if shape.minimum is not None and value < shape.minimum:
            self.report(path, f"expected an integer of at least {shape.minimum}, got {value}")
        elif shape.maximum is not None and value > shape.maximum:
            self.report(path, f"expected an integer of at most {shape.maximum}, got {value}")

    def _record(self, value: dict, shape: Record, path: str, depth: int) -> None:
        for key in shape.required:
            if key not in value:
                self.report(_key_path(path, key), "missing (required)")
        for key, item in value.items():
            field = shape.fields.get(key, shape.extra)
            if field is None:
                self.report(_key_path(path, key), "unknown key")
            else:
                self.walk(item, field, _key_path(path, key), depth + 1)

    def _walk_any(self, value: Any, path: str, depth: int) -> None:
        kind = _kind(value)
        if kind == "str":
            self._string(value, path, None)
        elif kind == "list":
            for index, item in enumerate(value):
                self.walk(item, ANY, f"{path}[{index}]", depth + 1)
        elif kind == "dict":
            for key, item in value.items():
                self.walk(item, ANY, _key_path(path, key), depth + 1)
