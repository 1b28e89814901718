"""The docs read as short prose: no line of docs/*.md over 110 characters and no paragraph over 150 words.

A line may run longer only where one code span or link in it cannot be broken (a command, a printed line).
Table rows count too: a terminal wraps a wide row into an unreadable grid, so a table whose cells are prose
is a list instead. What stays exempt is what cannot be reflowed without changing what it shows:
- the lines of a ```text fence or of one with no language: what a command prints, as it prints it (a fence
  with a language, ```bash or ```toml, is something to copy, and a long command wraps with a backslash);
- the tables in WIDE_TABLES below, each with its reason: grids of figures read across a row and the import
  rules that tests/unit/test_architecture.py reads as data.
A list item counts as its own paragraph."""

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


# (page, the table's header row) -> why its rows may be wider than MAX_LINE
WIDE_TABLES = {
    ("architecture.md", "| room | may import | third-party |"): "the import rules, read as data by a test",
    ("bench.md", "| # | stage |"): "a grid of timings: each row compares the columns",
    ("bench.md", "| # | key |"): "a grid of runs: each row compares the columns",
    ("builder.md", "| build (H200 host"): "a grid of measured builds: each row compares the columns",
    ("gpu-checks.md", "| what | fp32 | bf16 | fp16 |"): "tolerances per dtype: each row compares the columns",
}
_OUTPUT_FENCES = ("", "text")  # what a command prints


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


def measured_blocks(page: Path) -> list[tuple[int, str]]:
    """(line number, line) of the table rows and fenced lines the line rule measures: all but the exempt."""
    found, fence, table = [], None, None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip()
        elif fence is not None:
            if fence not in _OUTPUT_FENCES:
                found.append((number, line))
        elif stripped.startswith("|"):
            table = table or stripped
            if not any(page.name == name and table.startswith(head) for name, head in WIDE_TABLES):
                found.append((number, line))
        else:
            table = None
    return found


def long_lines(page: Path) -> list[str]:
    found = []
    for number, line in sorted(prose(page) + measured_blocks(page)):
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
    assert long_lines(page) == ["p.md:1: 120 characters", "p.md:3: 163 characters", "p.md:8: 304 characters"]
    assert [words for _, words in paragraphs(page)] == [60, 2, 152, 3]  # a list marker counts as a word


def test_commands_are_measured_and_printed_output_and_the_named_grids_are_not(tmp_path: Path) -> None:
    page = tmp_path / "bench.md"
    wide = "| # | stage | " + "9 | " * 40
    page.write_text(
        f"```bash\n{'c' * 120}\n```\n```text\n{'o' * 120}\n```\n{wide}\n|---|\n{wide}\n\n| a | "
        + "b " * 60
        + "|\n"
    )
    assert long_lines(page) == ["bench.md:2: 120 characters", "bench.md:11: 127 characters"]


@pytest.mark.parametrize(("name", "head"), sorted(WIDE_TABLES))
def test_every_exempt_table_is_still_there(name: str, head: str) -> None:
    lines = (REPO / "docs" / name).read_text().splitlines()
    assert any(line.startswith(head) for line in lines), (
        f"{name} has no table {head!r}: drop it from WIDE_TABLES"
    )
