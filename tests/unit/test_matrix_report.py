"""The matrix report: per-cell results as the runs write them, a real verify report (verify --static on
this machine, where Apex is absent), the merged overview, and the Markdown/HTML tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, cell_result, matrix_cells, static_verify_report
from toolchain.runs import matrix_report, report_tables
from toolchain.runs.cell_result import BuildRecord, CellFields, CellStatus
from toolchain.runs.run_loop import result_path, save_result
from toolchain.runs.run_overview import MatrixReport
from verify.report import reader as report_reader


@pytest.fixture(scope="module")
def verify_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return static_verify_report(tmp_path_factory.mktemp("verify") / "report.json")


def cells():
    return matrix_cells("12.4", "12.6", "12.8")


def test_report_from_real_result_files(tmp_path: Path, verify_report: Path) -> None:
    out = tmp_path / "out"
    verified, failed, never = cells()
    overview = MatrixReport(out, REPO / "matrix.toml", "run1")
    overview.start([verified, failed, never])
    copy = out / "cells" / verified.id / "verify" / "report.json"
    copy.parent.mkdir(parents=True)
    copy.write_text(verify_report.read_text())
    done = save_result(
        cell_result(
            verified,
            "verify_failed",
            {"ok": True, "tag": verified.id, "duration_s": 312.4, "log_path": "logs/x/build.log"},
            {"exit_code": 1, "report_path": str(copy), "status": "verify_failed"},
            run_id="run1",
        ),
        out,
    )
    overview.update(done)
    broken = save_result(
        cell_result(
            failed,
            "build_failed",
            {
                "ok": False,
                "tag": failed.id,
                "stage_failed": "apex-build",
                "duration_s": 40.0,
                "log_tail": ["building amp_C", "error: nvcc fatal | Unsupported gpu"],
            },
            run_id="run1",
        ),
        out,
    )
    overview.update(broken)
    overview.finish("interrupted", leftover=[never])

    data = json.loads((out / "matrix-report.json").read_text())
    assert data["status"] == "interrupted" and data["runs"]["run1"]["status"] == "interrupted"
    assert {c["id"]: c["status"] for c in data["cells"]} == {
        verified.id: "verify_failed",
        failed.id: "build_failed",
        never.id: "not_run",
    }
    assert result_path(out, failed.id).is_file()

    md_path, html_path, rows = report_tables.write(out)
    md = md_path.read_text()
    line = report_tables.table_row(rows[1])  # the columns by name, as the table shows them
    assert (line.cell, line.cuda, line.build) == (failed.id, "12.6", "FAILED in apex-build")
    assert "| " + " | ".join(report_tables.COLUMNS) + " |" in md
    assert [r.id for r in rows] == [verified.id, failed.id, never.id]  # ordered by CUDA
    row_line = next(line for line in md.splitlines() if line.startswith(f"| {verified.id} "))
    assert "ok (312 s)" in row_line and "FAIL (static)" in row_line
    assert "amp_C (missing)" in row_line and "identity.apex" in row_line
    failed_line = next(line for line in md.splitlines() if line.startswith(f"| {failed.id} "))
    assert "**FAILED in apex-build**" in failed_line
    assert "nvcc fatal \\| Unsupported gpu" in failed_line  # the last log line, table-safe
    assert f"| {never.id} " in md and "not run" in md
    html = html_path.read_text()
    assert html.startswith("<!doctype html>") and 'class="bad"' in html and "FAILED in apex-build" in html
    assert html.count("<tr class=") == 3


def test_speedups_and_bars_from_timings(tmp_path: Path, verify_report: Path) -> None:
    report = json.loads(verify_report.read_text())
    report["timings"] = [  # schema v2 rows (kernel_time) and a v1 row (top-level speedup) read alike
        {
            "kernel": "FusedAdam",
            "case": "a",
            "kernel_time": {"speedup": 2.0},
            "host_inclusive": {"speedup": 9.0},
        },
        {"kernel": "FusedAdam", "case": "b", "kernel_time": {"speedup": 8.0}, "host_inclusive": None},
        {"kernel": "FusedLayerNorm", "case": "a", "speedup": 0.5},
    ]
    row = matrix_report.Row(
        id="x",
        name="x",
        status=CellStatus.VERIFIED,
        cell=CellFields(),
        build=BuildRecord(ok=True),
        verify=None,
        report=report_reader.parse(report, "report.json"),
        report_path=None,
    )
    assert report_tables.speedups(row) == pytest.approx({"FusedAdam": 4.0, "FusedLayerNorm": 0.5})
    assert report_tables.kernels_text(row) == "FusedAdam 4.00x; FusedLayerNorm 0.50x"
    assert "bar slow" in report_tables._bars(row)


def test_two_runs_at_once_keep_each_others_cells(tmp_path: Path) -> None:
    out = tmp_path / "out"
    a, b, _ = cells()
    first, second = MatrixReport(out, None, "run-a"), MatrixReport(out, None, "run-b")
    first.start([a])
    second.start([b])
    first.update(cell_result(a, "built", {"ok": True, "tag": a.id}, run_id="run-a"))
    second.finish("complete")
    first.finish("complete")
    data = json.loads((out / "matrix-report.json").read_text())
    assert {c["id"] for c in data["cells"]} == {a.id, b.id}
    assert set(data["runs"]) == {"run-a", "run-b"}


def test_a_second_run_does_not_reset_or_void_cells_another_run_finished(tmp_path: Path) -> None:
    out = tmp_path / "out"
    a, b, _ = cells()
    first, second = MatrixReport(out, None, "run-a"), MatrixReport(out, None, "run-b")
    first.start([a, b])
    first.update(cell_result(a, "built", {"ok": True, "tag": a.id}, run_id="run-a"))
    first.finish("complete")
    second.start([a, b])  # pending placeholders: a keeps run-a's result, b was never finished: pending
    by_id = {c["id"]: c for c in json.loads((out / "matrix-report.json").read_text())["cells"]}
    assert (by_id[a.id]["status"], by_id[a.id]["run_id"]) == ("built", "run-a")
    assert (by_id[b.id]["status"], by_id[b.id]["run_id"]) == ("pending", "run-b")
    second.update(
        cell_result(a, "interrupted", {"ok": False, "interrupted": True}, run_id="run-b")
    )  # Ctrl-C in a
    second.finish("interrupted", leftover=[b])
    by_id = {c["id"]: c for c in json.loads((out / "matrix-report.json").read_text())["cells"]}
    assert (by_id[a.id]["status"], by_id[a.id]["run_id"]) == ("built", "run-a")
    assert by_id[b.id]["status"] == "not_run"
    second.update(
        cell_result(a, "verified", {"ok": True, "tag": a.id}, run_id="run-b")
    )  # a real newer result wins
    by_id = {c["id"]: c for c in json.loads((out / "matrix-report.json").read_text())["cells"]}
    assert (by_id[a.id]["status"], by_id[a.id]["run_id"]) == ("verified", "run-b")


def test_report_command_with_nothing_run(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "report", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no cells run yet" in (tmp_path / "out" / "matrix-report.md").read_text()
    assert (tmp_path / "out" / "matrix-report.html").is_file()
