"""Every code name README.md and docs/ write in backticks that points into this repository exists: a path
(`toolchain/spec/cell.py`, `spec/cell.py` inside its package, `tests/unit/`) names a file or folder of
the tree, and a dotted name (`verify.layers.fatbin.needed_libraries`) a module and, after it, a name defined at
that module's top level (read with `ast`, nothing imported). Paths into Apex's or an image's own tree
(`csrc/...`, `/opt/apex/...`) and JSON keys (`build.timing`) are outside its reach by their form."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.import_scan import of_node
from tests.support import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PACKAGES = ("toolchain", "verify")
# the repository's own top-level folders: a path that starts with one of them names the tree
TOP = ("toolchain", "verify", "tests", "scripts", "docker", "cluster", "docs", "reports", ".github", ".ci")
# spans that start like the tree's folders but name another project's path, each with where it is from
NOT_OURS = {
    "docker/bake-action": "the GitHub action docker/bake-action (docs/ci.md)",
    "tests/L0/run_fused_layer_norm": "Apex's own test folder (docs/gpu-checks.md)",
}
_SPAN = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^[\w.-]+(/[\w.-]+)*/?$")
_DOTTED = re.compile(r"^(toolchain|verify)(\.[A-Za-z_]\w*)+$")
_FILE_SUFFIX = re.compile(r"\.(py|pyz|sh|json|toml|md|ya?ml|txt|html)$")


def _spans(page: Path) -> list[str]:
    return [s.strip().removesuffix("()") for s in _SPAN.findall(page.read_text(encoding="utf-8"))]


def _path_problem(text: str, page: Path) -> str | None:
    """None when `text` is no path into the tree or names something that exists."""
    if "/" not in text or not _PATH.match(text) or text in NOT_OURS:
        return None
    first = text.split("/", 1)[0]
    inside = [REPO / package / first for package in PACKAGES if (REPO / package / first).is_dir()]
    if first not in TOP and not inside and first not in ("..", "."):
        return None  # not the tree's (Apex's csrc/, an image's folders, OUT/..., owner/repo)
    roots = [REPO, *(REPO / package for package in PACKAGES), page.parent]
    if any((root / text).exists() for root in roots):
        return None
    return f"`{text}`: no such file or folder"


def _top_level_names(module: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        else:
            names.update(ref.bound for ref in of_node(node))
    return names


def _dotted_problem(text: str) -> str | None:
    """None when `text` is no dotted name of the packages, or a module (and a name defined in it)."""
    if not _DOTTED.match(text) or _FILE_SUFFIX.search(text):
        return None
    parts = text.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if module.is_file():
            rest = parts[cut:]
            if not rest:
                return None
            if len(rest) == 1 and rest[0] in _top_level_names(module):
                return None
            return f"`{text}`: {module.relative_to(REPO)} defines no {'.'.join(rest)}"
    return f"`{text}`: no such module"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_code_name_in_the_docs_exists(page: Path) -> None:
    problems = [p for s in _spans(page) if (p := _path_problem(s, page) or _dotted_problem(s))]
    assert problems == [], f"{page.relative_to(REPO)}: {problems}"


def test_the_checks_see_references_and_catch_stale_ones(tmp_path: Path) -> None:
    assert sum(1 for page in PAGES for s in _spans(page) if _PATH.match(s) and "/" in s) > 50
    page = tmp_path / "p.md"
    page.write_text(
        "`toolchain/spec/cell.py` `spec/cell.py` `verify.layers.fatbin.needed_libraries` `csrc/x.cu`\n"
        "`toolchain/spec/gone.py` `verify.layers.fatbin.no_such_name` `verify.no_such_module` `build.timing`\n"
    )
    found = [(s, _path_problem(s, page) or _dotted_problem(s)) for s in _spans(page)]
    assert [s for s, problem in found if problem] == [
        "toolchain/spec/gone.py",
        "verify.layers.fatbin.no_such_name",
        "verify.no_such_module",
    ]
