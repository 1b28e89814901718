"""`build.py report`'s extensions column counts against the modules the cell's build manifest expected:
an optional module the cell never built is "not built (optional)", not missing (it said "12/35 ok" on a
PASS cell)."""

from __future__ import annotations

from typing import Any

from tests.support import cell_result, matrix_cells
from toolchain.runs import report_tables
from toolchain.runs.matrix_report import Row
from verify.report.reader import VerifyReport

CORE = ["amp_C", "fused_layer_norm_cuda"]
OPTIONAL = [f"contrib_{n}_cuda" for n in range(33)]


def row(extensions: dict[str, str], manifest: dict[str, Any] | None) -> Row:
    data = {"manifest": manifest, "extensions": [{"module": m, "status": s} for m, s in extensions.items()]}
    cell = matrix_cells("13.0")[0]
    return Row.of(
        cell_result(cell, "verified", {"ok": True, "tag": cell.id}), VerifyReport.from_json(data), None
    )


def test_a_pass_cell_counts_its_expected_modules_and_names_the_optional_ones_not_built() -> None:
    built = {**{m: "ok" for m in CORE}, **{m: "missing" for m in OPTIONAL}}
    text = report_tables.extensions_text(row(built, {"expected_modules": CORE}))
    assert text == "2/2 ok; 33 not built (optional)"
    assert "missing" not in text


def test_an_expected_module_missing_and_a_broken_optional_one_still_count() -> None:
    built = {"amp_C": "ok", "fused_layer_norm_cuda": "missing", "xentropy_cuda": "undefined_symbol"}
    text = report_tables.extensions_text(row(built, {"expected_modules": CORE}))
    assert text == "1/2 ok; fused_layer_norm_cuda (missing), xentropy_cuda (undefined symbol)"


def test_without_a_manifest_every_module_verify_looked_for_counts() -> None:
    text = report_tables.extensions_text(row({"amp_C": "ok", "xentropy_cuda": "missing"}, None))
    assert text == "1/2 ok; xentropy_cuda (missing)"
