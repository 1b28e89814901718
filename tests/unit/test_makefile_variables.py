"""The Makefile defines each variable once: a second `X ?=` further down is dead text that drifts (three
copies of one block lived there until 2026-12-03), and the quoting rule's VARIABLES list names them all."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)\s*(?:\?=|:=|=|\+=)", re.M)


def defined(text: str) -> Counter[str]:
    return Counter(ASSIGNMENT.findall(text))


def test_every_variable_is_defined_once() -> None:
    counts = defined((REPO / "Makefile").read_text())
    assert counts, "no assignments read: the pattern no longer matches the Makefile"
    twice = sorted(name for name, n in counts.items() if n > 1)
    assert twice == [], f"defined more than once in the Makefile: {twice}"


def test_the_check_sees_a_repeated_block() -> None:
    assert defined("BASE ?=\nCUDA ?=\n# again\nBASE ?=\n")["BASE"] == 2


def test_every_user_variable_is_in_the_quoting_list() -> None:
    text = (REPO / "Makefile").read_text()
    variables = re.search(r"^VARIABLES := (.*?)\n(?!\s)", text, re.M | re.S)
    assert variables, "no VARIABLES := in the Makefile"
    listed = set(variables.group(1).replace("\\", " ").split())
    user = {
        name
        for name in defined(text)
        if name not in {"VARIABLES", "BUILD", "CELL_OPTS", "FILTER_OPTS", "BUILD_OPTS"}
    }
    assert user - listed == set(), (
        f"variables a user sets but the quoting rule does not cover: {user - listed}"
    )
