"""No import circle among the project's modules: an `ast` scan of every import of verify/ and toolchain/
(also those inside functions, where a circle hides), so each module stands on the ones below it."""

from __future__ import annotations

from tests import import_scan
from tests.support import REPO

TOPS = ("verify", "toolchain")


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (tests/import_scan.py)."""
    return import_scan.import_graph(REPO, TOPS)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for child in sorted(graph[node]):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                found.append(sorted(component))

    for root in sorted(graph):
        if root not in index:
            visit(root)
    return found


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert cycles(import_graph()) == []


def test_the_scan_sees_function_level_imports_and_finds_a_circle() -> None:
    """The scan itself: the image/ circle this test guards against was made of imports inside functions
    (cmd_pull imports the pull module only when it runs); one edge back closes that circle again."""
    graph = import_graph()
    assert "toolchain.image.pull" in graph["toolchain.commands.images"]
    assert "toolchain.image.registry_pull" in graph["toolchain.image.container_engine"]
    graph["toolchain.image.registry_pull"] = graph["toolchain.image.registry_pull"] | {"toolchain.image.pull"}
    assert cycles(graph) == [
        [
            "toolchain.image.container_engine",
            "toolchain.image.container_verify",
            "toolchain.image.pull",
            "toolchain.image.registry_pull",
        ]
    ]
