"""Every relative link in README.md and docs/ resolves: the file exists, and a #fragment names a heading
of that Markdown file (GitHub's anchor rule: lower case, punctuation dropped, spaces to dashes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(markdown: Path) -> set[str]:
    text, fence, found = markdown.read_text(), False, set()
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"^#{1,6} (.+)$", line)):
            found.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return found


def _links(page: Path) -> list[str]:
    fence, links = False, []
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            links += [t for t in _LINK.findall(line) if not re.match(r"^(https?|mailto):", t)]
    return links


def test_the_docs_exist_and_link_somewhere() -> None:
    assert len(PAGES) > 5 and sum(len(_links(p)) for p in PAGES) > 20


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in _anchors(resolved):
            broken.append(f"{target}: no heading #{fragment}")
    assert broken == [], f"{page.relative_to(REPO)}: {broken}"


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Title\n[ok](#title) [gone](missing.md) [anchor](#nope)\n```\n[in code](x.md)\n```\n")
    assert _links(page) == ["#title", "missing.md", "#nope"]
    assert _anchors(page) == {"title"}
