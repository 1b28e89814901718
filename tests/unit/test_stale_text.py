"""Text that only made sense where it was written: numbers of a tracker that is not in this repository (a
comment says what was meant instead; an upstream reference names its repository, `NVIDIA/apex#1972`), and
`<!-- section:... -->` markers in the docs that nothing reads. The dated reports/ folders are records and
keep their wording (they hold no code), as do the copies the tests read in tests/fixtures/evidence."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import REPO

FOLDERS = ("toolchain", "verify", "tests", "scripts", "docs", "docker", "cluster", ".ci", ".github")
FILES = ("README.md", "Makefile", "matrix.toml", "pyproject.toml", "build.py", "conftest.py")
SUFFIXES = frozenset({".py", ".sh", ".md", ".toml", ".json", ".yml", ".yaml", ".txt", ""})
_TRACKER = re.compile(r"\b[Ii]ssues? ?#?[0-9]+|(?<![\w/.-])\(#[0-9]+\)")
_MARKER = re.compile(r"<!-- */?section:")


def checked_files() -> list[Path]:
    found = [REPO / name for name in FILES]
    for folder in FOLDERS:
        found += [p for p in (REPO / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    records = REPO / "tests" / "fixtures" / "evidence"  # what verify wrote on the H200, verbatim, as reports/
    found = [p for p in found if not p.is_relative_to(records)]
    return sorted(p for p in found if p.is_file() and p.suffix in SUFFIXES)


def findings(pattern: re.Pattern[str], files: list[Path]) -> list[str]:
    hits = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if pattern.search(line):
                shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
                hits.append(f"{shown}:{number}: {line.strip()[:120]}")
    return hits


def test_no_numbers_of_a_tracker_outside_the_repository() -> None:
    files = checked_files()
    assert len(files) > 200
    assert findings(_TRACKER, files) == [], "say what the number meant (or name the upstream repository)"


def test_reports_hold_results_not_scripts() -> None:
    """A report folder keeps its README and small results; the scripts that made them stay in git history."""
    assert [p for p in (REPO / "reports").rglob("*") if p.suffix in (".py", ".sh")] == []


def test_no_section_markers_in_the_docs() -> None:
    pages = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    assert findings(_MARKER, pages) == []


def test_the_patterns_catch_what_they_are_for(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    # written in pieces, so that this file itself passes the check
    page.write_text(
        "as issue "
        "22 asked\n"
        "(#"
        "23) fixed\n"
        "Issue #"
        "7\n"
        "upstream NVIDIA/apex#1972 and (NVIDIA/apex#2017)\n<!-- section:ci -->\nan issue with 3 parts\n"
    )
    assert [h.split(":", 2)[1] for h in findings(_TRACKER, [page])] == ["1", "2", "3"]
    assert [h.split(":", 2)[1] for h in findings(_MARKER, [page])] == ["5"]
