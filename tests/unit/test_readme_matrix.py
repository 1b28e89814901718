"""The README's matrix table is `build.py plan --markdown`: the cells as plan resolves them from matrix.toml and
compat.toml, through the real CLI. A cell added or a fact changed without the README pasted again fails here."""

from __future__ import annotations

import json

from tests.support import REPO, run_build
from toolchain.commands import matrix_table


def readme_table() -> str:
    """The README's table: the header line and every table line after it."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    header = matrix_table.HEADER.splitlines()[0]
    assert header in lines, f"README.md has no matrix table (no line {header!r})"
    start = lines.index(header)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[start:end])


def test_the_readme_matrix_table_is_plans_output() -> None:
    proc = run_build("plan", "--markdown", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    planned = proc.stdout.rstrip("\n")
    assert planned.count("\n") >= 2, planned  # the header, its rule and at least one cell
    assert readme_table() == planned, (
        "README.md's matrix table is stale: paste the output of `python3 build.py plan --markdown` over it\n"
        + planned
    )


def test_every_matrix_cell_has_one_row() -> None:
    proc = run_build("plan", "--json", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    names = [plan["cell"] for plan in json.loads(proc.stdout)]
    rows = readme_table().splitlines()[2:]
    assert [row.split("|")[1].strip() for row in rows] == names
