"""The import rules of docs/architecture.md as a checked rule: an `ast` scan of every import of every file
of verify/, toolchain/ and build.py (also those inside functions), against the doc's own table, so the
table cannot drift from the code and verify's in-image rule holds before anything is imported."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.import_scan import file_imports
from tests.support import REPO

DOC = REPO / "docs" / "architecture.md"
HEADER = "| room | may import | third-party |"
# Python 3.10's standard library (the image's Python): sys.stdlib_module_names of 3.11+ adds tomllib
STDLIB = frozenset(sys.stdlib_module_names) - {"tomllib"}


@dataclass(frozen=True)
class Rule:
    room: str  # "verify/runtime/" (a folder) or "verify/cli.py" (a file)
    may_import: frozenset[str]
    third_party: frozenset[str]  # "stdlib", module names, or "*" for any declared dependency


def read_rules(text: str) -> dict[str, Rule]:
    lines = text.splitlines()
    start = lines.index(HEADER) + 2  # past the header and its |---| line
    rules = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        room, may, third = (cell.strip() for cell in line.strip("|").split("|"))
        names = lambda cell: frozenset(re.findall(r"`([^`]+)`", cell))  # noqa: E731
        rules[room.strip("`")] = Rule(
            room.strip("`"), names(may), frozenset(t.strip() for t in third.split(",") if t.strip())
        )
    return rules


def room_of(path: str, rooms: set[str]) -> str | None:
    """The longest room that holds `path` (a repo-relative file, or a dotted module turned into one)."""
    holding = [r for r in rooms if path == r or (r.endswith("/") and path.startswith(r))]
    return max(holding, key=len) if holding else None


def module_paths(module: str) -> list[str]:
    """Where a dotted project module can live: the package's face or the module file."""
    base = module.replace(".", "/")
    return [f"{base}/__init__.py", f"{base}.py", f"{base}/"]


def project_room(module: str, rooms: set[str], root: Path) -> str | None:
    for candidate in module_paths(module):
        if (root / candidate).exists() or candidate.endswith("/"):
            found = room_of(candidate, rooms)
            if found and ((root / candidate).exists() or candidate.rstrip("/") + "/" in rooms):
                return found
    return None


def violations(root: Path, rules: dict[str, Rule]) -> list[str]:
    rooms = set(rules)
    files = sorted(p for top in ("verify", "toolchain") for p in (root / top).rglob("*.py"))
    files.append(root / "build.py")
    out = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        own = room_of(rel, rooms)
        if own is None:
            out.append(f"{rel}: in no room of the table (add its row)")
            continue
        rule = rules[own]
        for ref in file_imports(path):
            line, module, name, top = ref.line, ref.module, ref.name, ref.top
            if ref.level:
                out.append(f"{rel}:{line}: relative import {module!r}")
            elif top in ("verify", "toolchain"):
                out += _project_import_problems(f"{rel}:{line}", module, name, own, rule, rooms, root)
            elif top in ("build", "tests"):
                out.append(f"{rel}:{line}: imports {module}")
            elif (
                "*" not in rule.third_party
                and not (top in STDLIB and "stdlib" in rule.third_party)
                and top not in rule.third_party
            ):
                out.append(
                    f"{rel}:{line}: {own} may not import {top} (third-party allowed: "
                    f"{', '.join(sorted(rule.third_party)) or 'none'})"
                )
    return out


def _project_import_problems(
    where: str, module: str, name: str | None, own: str, rule: Rule, rooms: set[str], root: Path
) -> list[str]:
    """An import of verify/ or toolchain/ outside `own`'s row (or of a module in no room)."""
    target = None
    if name is not None:  # `from verify import messages` names a module, `from verify import X` a value
        target = project_room(f"{module}.{name}", rooms, root)
        if target is not None and not any((root / c).exists() for c in module_paths(f"{module}.{name}")):
            target = None
    target = target or project_room(module, rooms, root)
    if target is None:
        return [f"{where}: imports {module} which is in no room"]
    if target != own and target not in rule.may_import:
        return [f"{where}: {own} may not import {target} ({module}{'.' + name if name else ''})"]
    return []


RULES = read_rules(DOC.read_text())


def test_the_table_is_read_whole() -> None:
    assert {
        "verify/runtime/",
        "verify/layers/",
        "verify/report/",
        "verify/timing/",
        "toolchain/builder/",
        "build.py",
    } <= set(RULES)
    assert RULES["verify/runtime/"].may_import == frozenset()
    assert "*" not in RULES["toolchain/builder/"].third_party


def test_every_import_keeps_the_rules() -> None:
    found = violations(REPO, RULES)
    assert found == [], "\n".join(found)


def test_every_room_of_the_table_exists() -> None:
    missing = [room for room in RULES if not (REPO / room).exists()]
    assert missing == []


@pytest.mark.parametrize(
    ("file", "source", "expected"),
    [
        (
            "verify/runtime/bad.py",
            "from verify.layers import arch\n",
            "verify/runtime/ may not import verify/layers/",
        ),
        (
            "verify/runtime/bad.py",
            "def f():\n    import toolchain.errors\n",
            "may not import toolchain/errors.py",
        ),
        ("verify/layers/bad.py", "import docker\n", "may not import docker"),
        ("toolchain/builder/bad.py", "import tomllib\n", "may not import tomllib"),
        ("toolchain/builder/bad.py", "from toolchain.spec import compat\n", "may not import toolchain/spec/"),
        ("verify/bench/bad.py", "from verify import cli\n", "verify/bench/ may not import verify/cli.py"),
        ("verify/stray.py", "import os\n", "in no room of the table"),
        ("verify/layers/bad.py", "from . import arch\n", "relative import"),
    ],
)
def test_a_broken_rule_is_found(tmp_path: Path, file: str, source: str, expected: str) -> None:
    """The scan can fail: a copy of the tree with one bad import is caught, named by file and line."""
    for top in ("verify", "toolchain"):
        for path in (REPO / top).rglob("*.py"):
            target = tmp_path / path.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path.read_text())
    (tmp_path / "build.py").write_text((REPO / "build.py").read_text())
    (tmp_path / file).write_text(source)
    found = violations(tmp_path, RULES)
    assert any(file in v and expected in v for v in found), found
