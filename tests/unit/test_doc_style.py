"""The docs read as short prose: no line of docs/*.md over 110 characters and no paragraph over 150 words.

A line may run longer only where one code span or link in it cannot be broken (a command, a printed line).
Table rows and lines inside ``` fences are not measured: a table row cannot wrap, and a fence shows what a
command prints. A list item counts as its own paragraph."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import REPO

PAGES = sorted((REPO / "docs").glob("*.md"))
MAX_LINE = 110
MAX_WORDS = 150
UNBREAKABLE = 70  # a code span or link this long may carry its line past MAX_LINE
_SPAN = re.compile(r"`[^`]+`|\[[^\]]*\]\([^)]*\)")
_ITEM = re.compile(r"^\s*([-*+]|\d+\.)\s")


def prose(page: Path) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fences, tables, headings and comments; '' ends a paragraph."""
    fence, lines = False, []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = not fence
            lines.append((number, ""))
        elif fence or stripped.startswith(("|", "#", "<!--")):
            lines.append((number, ""))
        else:
            lines.append((number, line))
    return lines


def long_lines(page: Path) -> list[str]:
    found = []
    for number, line in prose(page):
        unbreakable = any(len(span) > UNBREAKABLE for span in _SPAN.findall(line))
        if len(line) > MAX_LINE and not unbreakable:
            found.append(f"{page.name}:{number}: {len(line)} characters")
    return found


def paragraphs(page: Path) -> list[tuple[int, int]]:
    """(first line, words) of each paragraph or list item."""
    found: list[tuple[int, int]] = []
    start, words = 0, 0
    for number, line in [*prose(page), (0, "")]:
        if words and (not line.strip() or _ITEM.match(line)):
            found.append((start, words))
            words = 0
        if line.strip():
            start = start if words else number
            words += len(line.split())
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_line_of_the_docs_is_over_110_characters(page: Path) -> None:
    assert long_lines(page) == [], "reflow the paragraph (a table row: move detail into text below)"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_paragraph_of_the_docs_is_over_150_words(page: Path) -> None:
    big = [f"{page.name}:{line}: {words} words" for line, words in paragraphs(page) if words > MAX_WORDS]
    assert big == [], "split it: key facts first, a few short paragraphs"


def test_the_rules_catch_what_they_are_for(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "x " * 60 + "\n\n| " + "y " * 80 + "|\n```\n" + "z" * 200 + "\n```\n"
        "see `" + "a" * 120 + "`\n" + "- " + "w " * 151 + "\n- short item\n"
    )
    assert long_lines(page) == ["p.md:1: 120 characters", "p.md:8: 304 characters"]
    assert [words for _, words in paragraphs(page)] == [60, 2, 152, 3]  # a list marker counts as a word
