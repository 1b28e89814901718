"""The shape of each cell field, checked before what it means: the keys a layer may have, each value's
TOML type (from cell_fields.CELL_KEYS), its length, and characters no tool downstream reads (non-ASCII
digits, control characters). A value with a problem here is never read by the resolver.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from toolchain.errors import CellProblem
from toolchain.spec.cell_fields import CELL_KEYS
from verify.runtime.messages import did_you_mean, shown

# A cell field is a version, a name, a ref or a URL: anything longer is refused before it is parsed.
FIELD_MAX = 1024
LIST_MAX = 64  # entries of one list field (archs, extras, apex_flags)
_TOML_TYPES = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a float"),
    (str, "a string"),
    (list, "an array"),
    (dict, "a table"),
)
# ASCII control characters other than tab, LF and CR (those are whitespace the field grammars refuse)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclasses.dataclass(frozen=True)
class CellFieldProblem:
    path: str  # the field, dotted like the shared checker's: "archs", "archs[1]"
    problem: str
    fix: str


def _toml_type(value: Any) -> str:
    return next((name for kind, name in _TOML_TYPES if isinstance(value, kind)), "a date/time")


def field_problems(key: str, value: Any, origin: str) -> list[CellFieldProblem]:
    """What is wrong with the type or the characters of one field (empty: the resolver may read it)."""
    want = CELL_KEYS[key]
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    literal = value if len(shown(value)) <= 40 else "..."
    if isinstance(value, str):
        return _text_problems(key, key, value, origin)
    if want is str:
        if is_number:  # cuda = 12.4 (a TOML float) is a classic slip: 12.10 would read as 12.1
            return [
                CellFieldProblem(key, f"{key} = {shown(value)} is a number", f'quote it: {key} = "{literal}"')
            ]
        return [
            CellFieldProblem(key, f"{key} must be a string, not {_toml_type(value)}", f'write {key} = "..."')
        ]
    if is_number:  # archs = 9.0: one number where a list of strings is expected
        return [
            CellFieldProblem(
                key, f"{key} = {shown(value)} is a number, not a list", f'write {key} = ["{literal}"]'
            )
        ]
    if not isinstance(value, list):
        return [
            CellFieldProblem(
                key, f"{key} must be an array of strings, not {_toml_type(value)}", f'write {key} = ["..."]'
            )
        ]
    if len(value) > LIST_MAX:
        return [CellFieldProblem(key, f"{key} has {len(value)} entries (at most {LIST_MAX})", "list fewer")]
    problems: list[CellFieldProblem] = []
    for index, item in enumerate(value):
        path = f"{key}[{index}]"
        if isinstance(item, str):
            problems += _text_problems(path, key, item, origin)
        elif isinstance(item, bool) or not isinstance(item, (int, float)):  # numbers: 9.0 reads as "9.0"
            problems.append(
                CellFieldProblem(
                    path,
                    f"{path} must be a string, not {_toml_type(item)}",
                    f'write it in quotes: {key} = ["...", "..."]',
                )
            )
    return problems


def _text_problems(path: str, key: str, text: str, origin: str) -> list[CellFieldProblem]:
    if len(text) > FIELD_MAX:
        return [
            CellFieldProblem(
                path,
                f"{path} is {len(text)} characters long (at most {FIELD_MAX})",
                "write the version, name, ref or URL it should be",
            )
        ]
    if not text.isascii():
        odd = list(dict.fromkeys(ch for ch in text if not ch.isascii()))
        named = ", ".join(f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')}" for ch in odd[:3])
        ascii_text = _ascii_form(text)
        if ascii_text is None:
            fix = "use ASCII letters, digits and punctuation only"
        elif origin == "cli" and path == key:
            fix = f"write it in ASCII: --{key.replace('_', '-')} {shown(ascii_text, quote=False)}"
        else:
            fix = f"write it in ASCII: {shown(ascii_text).replace(chr(39), chr(34))}"
        return [CellFieldProblem(path, f"{path} {shown(text)} has non-ASCII characters ({named})", fix)]
    control = _CONTROL.search(text)
    if control:
        return [
            CellFieldProblem(
                path, f"{path} {shown(text)} holds a control character (U+{ord(control[0]):04X})", "remove it"
            )
        ]
    return []  # tab, LF, CR: separators in "8.0 9.0"-style lists; the other fields' grammars refuse them


def _ascii_form(text: str) -> str | None:
    """'１２.4' -> '12.4', '٣.١١' -> '3.11' (any script's decimal digits, full-width forms); None if no such form."""
    out: list[str] = []
    for ch in text:
        if ch.isascii():
            out.append(ch)
        elif unicodedata.decimal(ch, None) is not None:
            out.append(str(unicodedata.decimal(ch)))
        elif unicodedata.category(ch) == "Cf":  # zero-width and direction marks: invisible, dropped
            continue
        else:
            folded = unicodedata.normalize("NFKC", ch)
            if not folded.isascii():
                return None
            out.append(folded)
    return "".join(out)


def check_keys(
    table: Mapping[str, object], allowed: Iterable[str], where: str, what: str
) -> list[CellProblem]:
    allowed = list(allowed)
    return [
        CellProblem(
            where,
            f"unknown key {shown(key)}",
            did_you_mean(key, allowed) or f"use one of {', '.join(allowed)}",
        )
        for key in table
        if key not in allowed
    ]


def check_layer(layer: Mapping[str, object], where: str, origin: str = "cell") -> list[CellProblem]:
    problems = check_keys(layer, CELL_KEYS, where, "a cell key")
    for key, value in layer.items():
        if key in CELL_KEYS and value is not None and value != "":
            problems += [CellProblem(where, p.problem, p.fix) for p in field_problems(key, value, origin)]
    return problems
