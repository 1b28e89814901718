"""Python 3.10 is the floor (requires-python, the build images): a 3.11-only stdlib module is imported only
behind a version check, with its backport in the other branch. `build.py index` imported tomllib
unguarded, so it failed on 3.10 with ModuleNotFoundError (mypy, checking as 3.10, also finds this)."""

from __future__ import annotations

import ast

from tests.import_scan import of_node
from tests.support import REPO

# 3.11-only modules the code reads, and the backport each one's 3.10 branch imports instead
BACKPORTS = {"tomllib": "tomli"}
CHECKED = [
    REPO / "build.py",
    *sorted((REPO / "toolchain").rglob("*.py")),
    *sorted((REPO / "verify").rglob("*.py")),
    *sorted((REPO / "scripts").rglob("*.py")),
]


def _imported(node: ast.stmt) -> set[str]:
    return {ref.top for ref in of_node(node) if not ref.level}


def _is_311_check(test: ast.expr) -> bool:
    """`sys.version_info >= (3, 11)`."""
    return (
        isinstance(test, ast.Compare)
        and ast.unparse(test.left) == "sys.version_info"
        and isinstance(test.ops[0], ast.GtE)
        and ast.unparse(test.comparators[0]) == "(3, 11)"
    )


def unguarded_imports(source: str) -> list[str]:
    """'line N: import M' for each 3.11-only module imported outside `if sys.version_info >= (3, 11):`
    or with no backport in that check's else branch."""
    guarded: set[int] = set()
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and _is_311_check(node.test):
            for stmt in node.body:
                for module in _imported(stmt) & set(BACKPORTS):
                    guarded.add(stmt.lineno)
                    if not any(BACKPORTS[module] in _imported(other) for other in node.orelse):
                        problems.append(
                            f"line {stmt.lineno}: import {module} with no {BACKPORTS[module]} "
                            "in the else branch"
                        )
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt) and node.lineno not in guarded:
            problems += [
                f"line {node.lineno}: import {m} unguarded" for m in _imported(node) & set(BACKPORTS)
            ]
    return problems


def test_the_rule_finds_an_unguarded_import_and_accepts_the_guarded_one() -> None:
    assert unguarded_imports("import tomllib\n") == ["line 1: import tomllib unguarded"]
    assert unguarded_imports("try:\n    import tomllib\nexcept ImportError:\n    import tomli as tomllib\n")
    assert unguarded_imports("import sys\nif sys.version_info >= (3, 11):\n    import tomllib\n") == [
        "line 3: import tomllib with no tomli in the else branch"
    ]
    assert (
        unguarded_imports(
            "import sys\nif sys.version_info >= (3, 11):\n    import tomllib\n"
            "else:\n    import tomli as tomllib\n"
        )
        == []
    )


def test_no_module_needs_python_311() -> None:
    found = {str(path.relative_to(REPO)): unguarded_imports(path.read_text()) for path in CHECKED}
    assert not {path: problems for path, problems in found.items() if problems}


def test_the_scan_sees_the_code() -> None:
    assert REPO / "toolchain" / "spec" / "toml_loader.py" in CHECKED and len(CHECKED) > 100
