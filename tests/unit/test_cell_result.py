"""The per-cell result record and its typed parts: one to_json/from_json each, one status enum shared by
writer and reader, round trips on the files the run loop writes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.support import REPO, matrix_cells
from toolchain.console import Console
from toolchain.runs import cell_result, run_loop
from toolchain.runs.cell_result import (
    RESULT_VERSION,
    BuildRecord,
    CellFields,
    CellResult,
    CellStatus,
    VerifyRecord,
)
from toolchain.runs.run_request import RunRequest


def _result(status: CellStatus, **extra) -> CellResult:
    return CellResult(
        id="apex-x",
        name="x",
        run_id="r1",
        cell=CellFields.from_json({"cuda": "12.4"}),
        status=status,
        **extra,
    )


@pytest.mark.parametrize("status", list(CellStatus))
def test_round_trip_through_json_text(status: CellStatus) -> None:
    record = _result(
        status,
        started_at="2026-01-01T00:00:00+00:00",
        finished_at="2026-01-01T00:10:00+00:00",
        build=BuildRecord(ok=status is not CellStatus.BUILD_FAILED, tag="apex-x"),
        verify=None,
    )
    data = json.loads(json.dumps(record.to_json()))
    assert data["result_version"] == RESULT_VERSION and data["status"] == status.value
    assert CellResult.from_json(data) == record


def test_a_result_without_a_start_omits_the_key_as_before() -> None:
    assert "started_at" not in _result(CellStatus.INTERRUPTED).to_json()


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="'finished'"):
        CellResult.from_json({**_result(CellStatus.BUILT).to_json(), "status": "finished"})


def test_status_classes_decide_the_exit_code() -> None:
    assert {s for s in CellStatus if s.failed} == {
        CellStatus.BUILD_FAILED,
        CellStatus.VERIFY_FAILED,
        CellStatus.ERROR,
        CellStatus.INTERRUPTED,
    }
    assert {s for s in CellStatus if s.placeholder} == {
        CellStatus.PENDING,
        CellStatus.NOT_RUN,
        CellStatus.INTERRUPTED,
    }
    exit_of = run_loop._exit_code
    assert exit_of([_result(CellStatus.VERIFIED), _result(CellStatus.BUILT)]) == 0
    assert exit_of([_result(CellStatus.VERIFIED), _result(CellStatus.SKIPPED)]) == 1
    assert exit_of([_result(CellStatus.BUILD_FAILED), _result(CellStatus.ENVIRONMENT_UNAVAILABLE)]) == 3


def _written_by_a_run(tmp_path: Path) -> list[Path]:
    """result.json files the run loop itself writes without a build: a cell whose environment is missing
    (no base) and the cell in progress at Ctrl-C, whose log so far is kept."""
    out = tmp_path / "out"
    a, b = matrix_cells("12.4", "12.6")
    request = RunRequest(out=out, logs=tmp_path / "logs")
    code = run_loop.run_matrix(
        [a],
        request,
        Console(io.StringIO()),
        matrix_path=REPO / "matrix.toml",
        unavailable={a.name: "no base for it"},
    )
    assert code == 3
    (request.logs / b.id).mkdir(parents=True)
    (request.logs / b.id / "build.log").write_text("#5 building amp_C\n#5 error: nvcc fatal\n")
    run_loop.save_result(run_loop._interrupted(b, request, "r2"), out)
    return [run_loop.result_path(out, a.id), run_loop.result_path(out, b.id)]


def test_the_files_a_run_writes_read_back_into_records_that_write_them_unchanged(tmp_path: Path) -> None:
    for path in _written_by_a_run(tmp_path):
        data = json.loads(path.read_text())
        record = cell_result.read(data, path.name)
        assert isinstance(record, CellResult), record
        assert record.to_json() == data
        assert isinstance(record.build, BuildRecord) and isinstance(record.cell, CellFields)
        assert record.cell.archs == ("9.0",) and record.cell.data["apex_ref"]  # every key of the cell kept
    first = CellResult.from_json(json.loads(_written_by_a_run(tmp_path / "again")[0].read_text()))
    assert (
        first.build
        and first.build.status is CellStatus.ENVIRONMENT_UNAVAILABLE
        and first.build.exit_code == 3
    )


def test_a_result_of_an_earlier_release_reads_the_same(tmp_path: Path) -> None:
    """tests/fixtures/evidence holds a result.json written on a CUDA host before the records were typed: its nulls are
    not written back (an absent key and a null read alike), every other key is."""
    path = REPO / "tests" / "fixtures" / "evidence" / "result-2026-11-30.json"
    data = json.loads(path.read_text())
    record = cell_result.read(data, path.name)
    assert isinstance(record, CellResult)
    assert record.verify and record.verify.report_path
    assert record.verify.status is CellStatus.VERIFIED and record.verify.report_path.endswith("report.json")
    written = record.to_json()
    for part in ("build", "verify"):
        assert written[part] == {k: v for k, v in data[part].items() if v is not None}
    assert {k: v for k, v in written.items() if k not in ("build", "verify")} == {
        k: v for k, v in data.items() if k not in ("build", "verify")
    }


def test_a_verify_record_and_a_pulled_build_round_trip() -> None:
    verify = VerifyRecord(
        mode_requested="auto",
        exit_code=1,
        report_path="out/cells/x/verify/report.json",
        verdict="FAIL",
        mode="static",
        summary={"PASS": 1, "FAIL": 6},
        status=CellStatus.VERIFY_FAILED,
    )
    pulled = BuildRecord(
        ok=True,
        tag="reg/apex@sha256:" + "a" * 64,
        digest="sha256:" + "a" * 64,
        pulled=True,
        image_id="sha256:" + "b" * 64,
        signature={"checked": False, "policy": "off"},
    )
    for record in (verify, pulled):
        data = json.loads(json.dumps(record.to_json()))
        assert type(record).from_json(data) == record and type(record).from_json(data).to_json() == data
    assert "error" not in verify.to_json()
    newer = {**pulled.to_json(), "a_newer_key": 1}  # a newer writer's key: not read, the rest is
    assert (
        BuildRecord.from_json(newer) == pulled and "a_newer_key" not in BuildRecord.from_json(newer).to_json()
    )
