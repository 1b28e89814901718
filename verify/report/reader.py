"""The one reader of a verify report (schema v2, verify/schema/report.schema.json; v1 still read), for
`build.py verify/pull/matrix/report` and the wheel index on the host and anything in an image:
`read(path)`, `read_bytes(data, path)` (copied out of a container), `parse(decoded, path)`, each
giving a VerifyReport or raising InputFileError (one line: the path, each wrong field, the fix).

It accepts what the schema declares, field by field: the type of every property the schema names
(nested, through `$ref`), and for text enums the values themselves (a check's status is one of Status).
It does not insist on required keys, bounds or patterns, and lets unknown keys through: the host reads
reports of older verify releases (schema v1: one top-level `speedup` per timing row) and of newer ones
(additive keys keep the schema version). `read_shape()` derives the shape from the schema file at first
use; there is no second declaration of the report's shape. The writer is assemble.py's `build`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from verify.checks import Status
from verify.runtime import field_types as ft
from verify.runtime import input_files, resources

SCHEMA_FILE = (
    "schema/report.schema.json"  # inside the verify package (runtime/resources.py reads it, zipapp too)
)


@functools.cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of the report (verify/schema/report.schema.json)."""
    return resources.read_json(SCHEMA_FILE)


# a number may be NaN/Infinity: Python's own writer emitted them bare before verify's atomic writer made them null
_JSON_TYPES: dict[str, ft.Shape] = {
    "string": ft.STR,
    "integer": ft.INT,
    "number": ft.Float(finite=False),
    "boolean": ft.BOOL,
    "array": ft.ListOf(ft.ANY),
    "object": ft.MapOf(ft.ANY),
}
_TYPE_OF = {str: "string", int: "integer", float: "number", bool: "boolean"}
_NULL = ft.Nullable(ft.Anything())  # marker for {"type": "null"} inside a union; alone it accepts anything


def shape_from_schema(node: Any, defs: Mapping[str, Any]) -> ft.Shape:
    """The field_types shape a JSON Schema node declares, as the reader applies it (see the module text):
    types, nested properties and array items, `$ref` into `defs`, `oneOf`, `enum` by the type of its values
    (a text enum by its values too), `const` by its type only; no required keys, bounds or patterns; other
    keys allowed."""
    if not isinstance(node, dict):
        return ft.ANY
    if "$ref" in node:
        return shape_from_schema(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    if "oneOf" in node:
        return _nullable_union([shape_from_schema(n, defs) for n in node["oneOf"]])
    if "enum" in node:
        return _enum_shape(node["enum"])
    if "const" in node:  # by its type only: a report of another schema_version is still read
        return _JSON_TYPES.get(_TYPE_OF.get(type(node["const"]), ""), ft.ANY)
    types = node.get("type")
    if isinstance(types, list):
        return _nullable_union([shape_from_schema({**node, "type": t}, defs) for t in types])
    return _shape_of_type(node, types, defs)


def _shape_of_type(node: dict, types: Any, defs: Mapping[str, Any]) -> ft.Shape:
    """A node of one JSON type: null, an object's properties or values, an array's items, else the type."""
    if types == "null":
        return _NULL
    if types == "object" and "properties" in node:
        extra = node.get("additionalProperties")
        return ft.Record(
            {k: shape_from_schema(v, defs) for k, v in node["properties"].items()},
            extra=shape_from_schema(extra, defs) if isinstance(extra, dict) else ft.ANY,
        )
    if types == "object" and isinstance(node.get("additionalProperties"), dict):
        return ft.MapOf(shape_from_schema(node["additionalProperties"], defs))
    if types == "array" and "items" in node:
        return ft.ListOf(shape_from_schema(node["items"], defs))
    return _JSON_TYPES.get(str(types), ft.ANY)


def _nullable_union(shapes: list[ft.Shape]) -> ft.Shape:
    nullable = any(s is _NULL or isinstance(s, ft.Nullable) for s in shapes)
    real = [s.shape if isinstance(s, ft.Nullable) else s for s in shapes if s is not _NULL]
    one = real[0] if len(real) == 1 else ft.OneOf(*real) if real else ft.ANY
    return ft.Nullable(one) if nullable and real else one


def _enum_shape(values: list[Any]) -> ft.Shape:
    texts = [v for v in values if isinstance(v, str)]
    others = [v for v in values if v is not None and not isinstance(v, str)]
    if texts and not others:
        shape: ft.Shape = ft.Str(
            pattern="|".join(re.escape(t) for t in texts), means=f"one of {', '.join(texts)}"
        )
    elif others and all(isinstance(v, int) and not isinstance(v, bool) for v in others) and not texts:
        shape = ft.INT
    else:
        shape = ft.ANY
    return ft.Nullable(shape) if None in values else shape


@functools.cache
def read_shape() -> ft.Shape:
    """What `parse` accepts: the report schema, as shape_from_schema reads it."""
    document = schema()
    return shape_from_schema(document, document.get("$defs", {}))


@dataclasses.dataclass(frozen=True)
class ReportExtension:
    module: str
    status: str  # "ok", "missing", "undefined_symbol", ... (the extension layer's kinds)


@dataclasses.dataclass(frozen=True)
class ReportCheck:
    id: str
    status: Status | None
    summary: str


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """A verify report as its readers use it: the parts they show, typed, and the document as read (`data`,
    what to_json gives back, so a reader that adds a block, the host's audit, writes it whole)."""

    data: Mapping[str, object]
    verdict: str | None = None
    mode: str | None = None
    exit_code: int | None = None
    summary: Mapping[Status, int] = dataclasses.field(default_factory=dict)
    torch_version: str | None = None
    torch_cuda: str | None = None
    gpu_name: str | None = None
    extensions: tuple[ReportExtension, ...] = ()
    expected_modules: tuple[str, ...] | None = None  # the build manifest's; None without a manifest
    checks: tuple[ReportCheck, ...] = ()
    speedups: tuple[tuple[str, float], ...] = ()  # (kernel, kernel-time speedup) per timing row that has one

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VerifyReport:
        """From a document that fits read_shape() (parse checks it first)."""
        torch = (data.get("environment") or {}).get("torch") or {}
        summary = data.get("summary") or {}
        expected = (data.get("manifest") or {}).get("expected_modules")
        return cls(
            data=data,
            verdict=data.get("verdict"),
            mode=data.get("mode"),
            exit_code=data.get("exit_code"),
            summary={s: summary[s.value] for s in Status if isinstance(summary.get(s.value), int)},
            torch_version=torch.get("version"),
            torch_cuda=torch.get("cuda"),
            gpu_name=(torch.get("gpu") or {}).get("name"),
            extensions=tuple(
                ReportExtension(e.get("module", "?"), e.get("status", "?"))
                for e in data.get("extensions") or []
            ),
            expected_modules=tuple(m for m in expected if isinstance(m, str))
            if isinstance(expected, list)
            else None,
            checks=tuple(
                ReportCheck(
                    c.get("id") or c.get("name") or "",
                    Status(c["status"]) if "status" in c else None,
                    c.get("summary", ""),
                )
                for c in data.get("checks") or []
            ),
            speedups=tuple(_speedups(data.get("timings") or [])),
        )

    def to_json(self) -> dict[str, object]:
        return dict(self.data)

    def with_block(self, key: str, block: Any) -> VerifyReport:
        """The report with one more top-level block (the host's `audit`)."""
        return dataclasses.replace(self, data={**self.data, key: block})

    def failing(self, *statuses: Status) -> list[ReportCheck]:
        return [c for c in self.checks if c.status in statuses]


def _speedups(timings: list[Any]) -> list[tuple[str, float]]:
    """Schema v2 keeps the ratio in timing["kernel_time"]["speedup"]; a v1 report had one top-level "speedup".
    Only finite positive ratios count (a withheld or failed figure has none)."""
    found = []
    for timing in timings:
        ratio = (timing.get("kernel_time") or {}).get("speedup", timing.get("speedup"))
        if (
            isinstance(ratio, (int, float))
            and not isinstance(ratio, bool)
            and math.isfinite(ratio)
            and ratio > 0
        ):
            found.append((str(timing.get("kernel", "?")), float(ratio)))
    return found


def parse(data: Any, path: str | os.PathLike) -> VerifyReport:
    """A decoded report as the record, or InputFileError naming `path` and each field of the wrong type."""
    if not isinstance(data, dict):
        raise input_files.InputFileError(
            path,
            "bad_shape",
            f"is not a verify report (expected an object, got {ft.type_word(data)})",
            input_files.VERIFY_REPORT.fix,
        )
    problems = ft.check(data, read_shape(), Path(path).name)
    if problems:
        raise input_files.InputFileError(
            path, "bad_shape", ft.summary(problems), input_files.VERIFY_REPORT.fix
        )
    return VerifyReport.from_json(data)


def read(path: str | os.PathLike) -> VerifyReport:
    """The report file (bounded read, input_files.VERIFY_REPORT) as the record; else InputFileError."""
    return parse(input_files.read_json(path, input_files.VERIFY_REPORT), path)


def read_bytes(data: bytes, path: str | os.PathLike) -> VerifyReport:
    """A report received as bytes (copied out of a container), read as `read` reads a file."""
    return parse(input_files.decode_json(data, path, input_files.VERIFY_REPORT), path)
