"""The one import scanner of the tests' import rules: every import of a file read from its `ast` (also those
inside functions and branches, so a rule holds before anything is imported). The rules themselves stay with
their tests: the rooms of docs/architecture.md (test_architecture.py), no circle (test_import_cycles.py),
the tomllib guard (test_python_floor.py), reports/ scripts that import the project (test_report_scripts.py)
and the names a module defines (test_doc_references.py)."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ImportRef:
    """One imported name: `import a.b` is ("a.b", None), `from a.b import c` is ("a.b", "c"); a relative
    import keeps its dots in `module` ("..x") and has level > 0."""

    line: int
    module: str
    name: str | None = None
    level: int = 0
    bound: str = ""  # the name it binds in the importing module ("a" for `import a.b`, "d" for `... as d`)

    @property
    def top(self) -> str:
        """The top-level package: "a" for a.b."""
        return self.module.split(".")[0]


def of_node(node: ast.AST) -> list[ImportRef]:
    """The imports one node makes itself (none for any other node; children are not visited)."""
    if isinstance(node, ast.Import):
        return [
            ImportRef(node.lineno, alias.name, None, 0, alias.asname or alias.name.split(".")[0])
            for alias in node.names
        ]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [
            ImportRef(node.lineno, node.module, alias.name, 0, alias.asname or alias.name)
            for alias in node.names
        ]
    if isinstance(node, ast.ImportFrom):  # relative: the project uses none, so the rules name it
        module = "." * node.level + (node.module or "")
        return [
            ImportRef(node.lineno, module, alias.name, node.level, alias.asname or alias.name)
            for alias in node.names
        ]
    return []


def tree_imports(tree: ast.AST) -> list[ImportRef]:
    """Every import anywhere in the tree, in walk order."""
    return [ref for node in ast.walk(tree) for ref in of_node(node)]


def source_imports(source: str, filename: str = "<source>") -> list[ImportRef]:
    return tree_imports(ast.parse(source, filename=filename))


def file_imports(path: Path) -> list[ImportRef]:
    return source_imports(path.read_text(encoding="utf-8"), str(path))


def module_name(path: Path, root: Path) -> str:
    """verify/layers/arch.py -> verify.layers.arch; a package's __init__.py -> the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, tops: Iterable[str]) -> dict[str, set[str]]:
    """module -> the project modules it imports (`from a import b` is a.b when a/b is a module, else a)."""
    paths = {module_name(p, root): p for top in tops for p in (root / top).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        for ref in file_imports(path):
            if ref.level:
                continue
            full = f"{ref.module}.{ref.name}" if ref.name is not None else ref.module
            target = full if full in paths else ref.module
            if target in paths and target != name:
                graph[name].add(target)
    return graph
