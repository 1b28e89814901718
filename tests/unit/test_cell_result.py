"""The per-cell result record: one to_json/from_json, one status enum shared by writer and reader."""

from __future__ import annotations

import json

import pytest

from toolchain.runs import run_loop
from toolchain.runs.cell_result import RESULT_VERSION, BuildRecord, CellFields, CellResult, CellStatus


def _result(status: CellStatus, **extra) -> CellResult:
    return CellResult(id="apex-x", name="x", run_id="r1", cell=CellFields.from_json({"cuda": "12.4"}), status=status,
                      **extra)


@pytest.mark.parametrize("status", list(CellStatus))
def test_round_trip_through_json_text(status: CellStatus) -> None:
    record = _result(status, started_at="2026-01-01T00:00:00+00:00", finished_at="2026-01-01T00:10:00+00:00",
                     build=BuildRecord(ok=status is not CellStatus.BUILD_FAILED, tag="apex-x"), verify=None)
    data = json.loads(json.dumps(record.to_json()))
    assert data["result_version"] == RESULT_VERSION and data["status"] == status.value
    assert CellResult.from_json(data) == record


def test_a_result_without_a_start_omits_the_key_as_before() -> None:
    assert "started_at" not in _result(CellStatus.INTERRUPTED).to_json()


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="'finished'"):
        CellResult.from_json({**_result(CellStatus.BUILT).to_json(), "status": "finished"})


def test_status_classes_decide_the_exit_code() -> None:
    assert {s for s in CellStatus if s.failed} == {CellStatus.BUILD_FAILED, CellStatus.VERIFY_FAILED,
                                                   CellStatus.ERROR, CellStatus.INTERRUPTED}
    assert {s for s in CellStatus if s.placeholder} == {CellStatus.PENDING, CellStatus.NOT_RUN,
                                                        CellStatus.INTERRUPTED}
    exit_of = run_loop._exit_code
    assert exit_of([_result(CellStatus.VERIFIED), _result(CellStatus.BUILT)]) == 0
    assert exit_of([_result(CellStatus.VERIFIED), _result(CellStatus.SKIPPED)]) == 1
    assert exit_of([_result(CellStatus.BUILD_FAILED), _result(CellStatus.ENVIRONMENT_UNAVAILABLE)]) == 3
