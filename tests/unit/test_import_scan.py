"""The shared import scanner (tests/import_scan.py) that the import-rule tests stand on: it sees every form
of import, also inside functions and branches, so each rule built on it can fail."""

from __future__ import annotations

from pathlib import Path

from tests.import_scan import ImportRef, import_graph, source_imports
from tests.unit.test_doc_references import _top_level_names

SOURCE = """\
import os.path
import numpy as np
from verify.domain import arch as a
from . import sibling


def later():
    import toolchain.errors
    if True:
        from verify.runtime.messages import shown
"""


def test_every_form_of_import_is_seen() -> None:
    assert source_imports(SOURCE) == [
        ImportRef(1, "os.path", None, 0, "os"),
        ImportRef(2, "numpy", None, 0, "np"),
        ImportRef(3, "verify.domain", "arch", 0, "a"),
        ImportRef(4, ".", "sibling", 1, "sibling"),
        ImportRef(8, "toolchain.errors", None, 0, "toolchain"),
        ImportRef(10, "verify.runtime.messages", "shown", 0, "shown"),
    ]


def test_the_graph_takes_a_from_import_of_a_module_as_that_module(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from pkg import b\n")
    (tmp_path / "pkg" / "b.py").write_text("import pkg\nfrom pkg.a import f\n")
    assert import_graph(tmp_path, ["pkg"]) == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg", "pkg.a"}}


def test_the_doc_names_rule_still_sees_imports(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("import os.path\nfrom a import b as c\nX = 1\n")
    assert _top_level_names(script) == {"os", "c", "X"}
