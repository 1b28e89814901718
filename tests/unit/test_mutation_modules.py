"""tests/mutation/modules.toml, as scripts/mutation_run.py reads it: every module exists and every equivalent
names a line its module still has (a stale line would match no mutant, so that mutant would run again
unnoticed, or worse, a new line would be judged by an old reason)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import mutation_run


def test_every_equivalent_names_a_line_of_its_module() -> None:
    targets = mutation_run.load()
    assert targets
    assert all(t.tests for t in targets)


def test_a_stale_equivalent_line_is_refused(tmp_path: Path) -> None:
    modules = tmp_path / "modules.toml"
    modules.write_text(
        '[[module]]\npath = "verify/distributed/merge.py"\ntests = ["tests/unit/test_rules_verdicts.py"]\n'
        '[[module.equivalent]]\noperator = "core/NumberReplacer"\nline = "x = 1  # gone"\nwhy = "w"\n'
    )
    with pytest.raises(mutation_run.BadModules, match=r"no line 'x = 1  # gone'.*as it now reads"):
        mutation_run.load(modules)


def test_a_missing_module_is_refused(tmp_path: Path) -> None:
    modules = tmp_path / "modules.toml"
    modules.write_text('[[module]]\npath = "verify/nowhere.py"\ntests = ["tests/unit"]\n')
    with pytest.raises(mutation_run.BadModules, match="no such module"):
        mutation_run.load(modules)
