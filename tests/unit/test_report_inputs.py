"""`build.py report` over an out/ directory with corrupt inputs, made by the real writers (MatrixReport,
save_result, verify --static) and then damaged for real: truncated JSON, wrong field types, a FIFO,
non-UTF-8 bytes, deep nesting. Each file is named, every readable cell still rendered, exit 2 at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO, cell_result, matrix_cells, static_verify_report
from toolchain.runs.run_loop import result_path, save_result
from toolchain.runs.run_overview import MatrixReport
from verify.runtime import atomic


@pytest.fixture(scope="module")
def verify_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return static_verify_report(tmp_path_factory.mktemp("verify") / "report.json")


def _cells() -> list:
    return matrix_cells("12.4", "12.6", "12.8", "13.0")


def _report(out: Path) -> subprocess.CompletedProcess:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "report", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert time.monotonic() - start < 60 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


def _row(md: str, cell_id: str) -> str:
    return next(line for line in md.splitlines() if line.startswith(f"| {cell_id} "))


@pytest.mark.slow
def test_corrupt_results_are_named_and_the_readable_cells_rendered(
    tmp_path: Path, verify_report: Path
) -> None:
    out = tmp_path / "out"
    good, cut, typed, fifo = _cells()
    overview = MatrixReport(out, REPO / "matrix.toml", "run1")
    overview.start([good, cut])  # `typed` and `fifo` come from another run that left no overview entry
    copy = out / "cells" / good.id / "verify" / "report.json"
    copy.parent.mkdir(parents=True)
    copy.write_text(verify_report.read_text())
    overview.update(
        save_result(
            cell_result(
                good,
                "verify_failed",
                {"ok": True, "tag": good.id, "duration_s": 300.0},
                {"exit_code": 1, "report_path": str(copy), "status": "verify_failed"},
            ),
            out,
        )
    )
    overview.update(
        save_result(cell_result(cut, "built", {"ok": True, "tag": cut.id, "duration_s": 120.0}), out)
    )
    overview.finish("complete")
    text = result_path(out, cut.id).read_text()
    result_path(out, cut.id).write_text(text[: len(text) // 2])  # cut mid-write by something else
    broken = cell_result(typed, "built", None).to_json()
    broken["build"] = "ok"  # build must be an object
    broken["cell"]["archs"] = "9.0"
    broken["verify"] = {"exit_code": "1"}
    atomic.write_json(result_path(out, typed.id), broken)  # the record refuses none of it: write it raw
    result_path(out, fifo.id).parent.mkdir(parents=True)
    os.mkfifo(result_path(out, fifo.id))  # no writer: reading it would hang

    proc = _report(out)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 4 and all(line.startswith("error: ") for line in errors)
    assert f"cell result {result_path(out, cut.id)}: is not valid JSON" in proc.stderr
    assert (
        f"cell result {result_path(out, typed.id)}: result.json.cell.archs: expected a list, got a string;"
        " result.json.build: expected an object or null, got a string; result.json.verify.exit_code:"
        " expected an integer or null, got a string"
    ) in proc.stderr
    assert f"cell result {result_path(out, fifo.id)}: is a FIFO (named pipe)" in proc.stderr
    assert errors[-1].startswith(f"error: 3 input file(s) under {out} could not be used")

    md = (out / "matrix-report.md").read_text()
    assert "FAIL (static)" in _row(md, good.id) and "amp_C (missing)" in _row(md, good.id)
    assert "ok (120 s)" in _row(md, cut.id)  # its result is cut, the run's overview kept a copy
    assert "unreadable" in _row(md, typed.id) and "expected a list, got a string" in _row(md, typed.id)
    assert "is a FIFO" in _row(md, fifo.id)
    assert (out / "matrix-report.html").read_text().count("<tr class=") == 4


def test_a_corrupt_overview_or_verify_report_still_renders_every_cell(
    tmp_path: Path, verify_report: Path
) -> None:
    out = tmp_path / "out"
    first, second, *_ = _cells()
    report = out / "cells" / first.id / "verify" / "report.json"
    report.parent.mkdir(parents=True)
    data = json.loads(verify_report.read_text())
    data["extensions"][0]["status"] = ["ok"]
    report.write_text(json.dumps(data))
    save_result(
        cell_result(
            first,
            "verify_failed",
            {"ok": True, "tag": first.id},
            {"exit_code": 1, "report_path": str(report), "status": "verify_failed"},
        ),
        out,
    )
    (out / "matrix-report.json").write_bytes(b'{"report_version": "1", "cells": [\xff]}')
    proc = _report(out)
    assert proc.returncode == 2
    assert (
        f"matrix report {out / 'matrix-report.json'}: is not UTF-8 text (unreadable byte 0xff" in proc.stderr
    )
    assert (
        f"verify report {report}: report.json.extensions[0].status: expected a string, got a list"
        in proc.stderr
    )
    assert "exit 1" in _row(
        (out / "matrix-report.md").read_text(), first.id
    )  # the result's own verify record

    overview = {
        "report_version": "1",
        "runs": {},
        "cells": [
            cell_result(second, "built", {"ok": True, "tag": second.id}).to_json(),
            {"id": "x" * 10, "status": 3},
            json.loads("[" * 50 + "]" * 50),
        ],
    }
    (out / "matrix-report.json").write_text(json.dumps(overview))
    report.write_text(verify_report.read_text())
    proc = _report(out)
    assert proc.returncode == 2
    assert "cells[1].status: expected a string, got an integer" in proc.stderr
    assert "cells[2]: expected an object, got a list" in proc.stderr
    md = (out / "matrix-report.md").read_text()
    assert "FAIL (static)" in _row(md, first.id) and "ok" in _row(md, second.id)


def test_a_valid_out_directory_still_reports_exit_0(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cell = _cells()[0]
    overview = MatrixReport(out, None, "run1")
    overview.start([cell])
    overview.update(
        save_result(cell_result(cell, "built", {"ok": True, "tag": cell.id, "duration_s": None}), out)
    )
    overview.finish("complete")
    proc = _report(out)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "ok" in _row((out / "matrix-report.md").read_text(), cell.id)


def test_a_run_keeps_going_over_a_corrupt_overview(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    a, b, *_ = _cells()
    wrongs: list[dict[str, object]] = [
        {"runs": [], "cells": []},
        {"runs": {}, "cells": "x"},
        {"cells": [{"id": 7}], "runs": {"r": 1}},
    ]
    for wrong in wrongs:
        (out / "matrix-report.json").write_text(json.dumps({"report_version": "1", **wrong}))
        MatrixReport(out, None, "run1").start([a])  # a wrong shape, a bad entry: never a TypeError
        data = json.loads((out / "matrix-report.json").read_text())
        assert [c["id"] for c in data["cells"]] == [a.id] and "run1" in data["runs"]
    data["runs"] = {"run1": data["runs"]["run1"]}
    data["cells"].append({"id": 7})
    (out / "matrix-report.json").write_text(json.dumps(data))
    MatrixReport(out, None, "run2").start([b])  # one bad entry is dropped, the others kept
    data = json.loads((out / "matrix-report.json").read_text())
    assert [c["id"] for c in data["cells"]] == [a.id, b.id] and list(data["runs"]) == ["run1", "run2"]


def test_a_result_with_a_status_no_cell_has_is_named_and_its_overview_entry_shown(tmp_path: Path) -> None:
    """The report reads each result as a CellResult: a status outside CellStatus is that file's problem."""
    out = tmp_path / "out"
    cell = _cells()[0]
    MatrixReport(out, REPO / "matrix.toml", "run1").start([cell])  # the overview says "pending"
    save_result(cell_result(cell, "built", {"ok": True, "tag": cell.id}), out)
    path = result_path(out, cell.id)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "status": "finished"}))
    proc = _report(out)
    assert proc.returncode == 2
    assert f"{path}: result.json.status: 'finished' is not a cell status (one of pending," in proc.stderr
    # the row falls back to what the run's overview knew: the cell was pending, never built
    assert "| pending |" in _row((out / "matrix-report.md").read_text(), cell.id)


def test_a_huge_speedup_and_a_non_ascii_digit_render(tmp_path: Path, verify_report: Path) -> None:
    """A kernel-time speedup of 1e308 (int(60 * ratio) was int(inf)) and a result's cuda of
    "1².4" ("²".isdigit() but int("²") fails) crashed `build.py report`."""
    out = tmp_path / "out"
    cell = _cells()[0]
    overview = MatrixReport(out, None, "run1")
    overview.start([cell])
    copy = out / "cells" / cell.id / "verify" / "report.json"
    copy.parent.mkdir(parents=True)
    report = json.loads(verify_report.read_text())
    report["timings"] = [{"kernel": "FusedAdam", "kernel_time": {"speedup": 1e308}}]
    copy.write_text(json.dumps(report))
    overview.update(
        save_result(
            cell_result(
                cell,
                "verified",
                {"ok": True, "tag": cell.id, "duration_s": 1.0},
                {"exit_code": 0, "report_path": str(copy), "status": "verified"},
            ),
            out,
        )
    )
    overview.finish("complete")
    result = json.loads(result_path(out, cell.id).read_text())
    result["cell"]["cuda"] = "1\u00b2.4"
    result_path(out, cell.id).write_text(json.dumps(result))
    proc = _report(out)
    assert proc.returncode in (0, 2), proc.stderr
    assert (out / "matrix-report.html").is_file() and "FusedAdam" in (out / "matrix-report.html").read_text()


def test_a_stored_report_path_whose_file_is_gone_is_named_not_searched_for(
    tmp_path: Path, verify_report: Path
) -> None:
    """The report is read where the result says it was written (a relative path: from where `build.py` runs);
    a file of that name under out/, where the old lookup also tried, is not used in its place."""
    out = tmp_path / "out"
    cell = _cells()[0]
    stored = f"{tmp_path.name}-gone/report.json"  # relative to the repository, where _report runs build.py
    (out / stored).parent.mkdir(parents=True)
    (out / stored).write_text(verify_report.read_text())
    save_result(
        cell_result(
            cell,
            "verify_failed",
            {"ok": True, "tag": cell.id},
            {"exit_code": 1, "report_path": stored, "status": "verify_failed"},
        ),
        out,
    )
    proc = _report(out)
    assert proc.returncode == 2
    assert f"error: verify report {stored}: does not exist; check the path; run verify again" in proc.stderr
    row = _row((out / "matrix-report.md").read_text(), cell.id)
    assert "exit 1" in row and "FAIL (static)" not in row  # the result's own verify record, no other report
