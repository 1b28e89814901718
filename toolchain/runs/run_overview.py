"""out/matrix-report.json: one entry per cell of every run, merged by cell id under a file lock, so that
two runs at once do not clobber each other and Ctrl-C still leaves a file that says which cells were
interrupted or never ran. Written atomically (verify/runtime/atomic.py); `build.py report` renders it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from toolchain.runs import matrix_report
from toolchain.runs.cell_result import RESULT_VERSION, CellFields, CellResult, CellStatus
from toolchain.spec.cell import Cell
from toolchain.timestamps import now
from verify.runtime import atomic, input_files

REPORT_NAME = "matrix-report.json"


class MatrixReport:
    """out/matrix-report.json: one entry per cell, merged by cell id across concurrent runs."""

    def __init__(self, out: Path, matrix_path: Path | None, run_id: str) -> None:
        self.path = out / REPORT_NAME
        self.lock_path = out / f".{REPORT_NAME}.lock"
        self.matrix_path = matrix_path
        self.run_id = run_id

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # --out is the run's folder, which the tool owns: neither file is opened through a link planted there
        lock = atomic.open_lock_in_tree(self.path.parent, self.lock_path.name)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # held only for a read-modify-write, never during a build
            data = self._read()
            yield data
            data["updated_at"] = now()
            text = atomic.json_dumps(data) + "\n"
            atomic.write_in_tree(self.path.parent, self.path.name, text.encode("utf-8", "backslashreplace"))
        finally:
            os.close(lock)  # closing releases the lock

    def _read(self) -> dict[str, object]:
        """The overview so far. Absent, unreadable, of another version or the wrong shape: a fresh one
        (the per-cell result files remain; `build.py report` names a corrupt file). A cell entry of the
        wrong shape is dropped, the others kept."""
        try:
            data = input_files.read_json(self.path, input_files.MATRIX_REPORT)
        except input_files.InputFileError:
            data = None
        if isinstance(data, dict) and data.get("report_version") == RESULT_VERSION:
            entries, _ = matrix_report.overview_entries(data, REPORT_NAME)
            if entries is not None:  # None: the document itself has the wrong shape
                data.update(cells=entries, runs=data.get("runs", {}))
                return data
        return {"report_version": RESULT_VERSION, "created_at": now(), "runs": {}, "cells": []}

    def start(self, cells: list[Cell]) -> None:
        with self._locked() as data:
            data["matrix"] = str(self.matrix_path) if self.matrix_path else None
            data["runs"][self.run_id] = {
                "started_at": now(),
                "status": "running",
                "cells": [c.id for c in cells],
            }
            for cell in cells:
                _merge(data, _placeholder(cell, CellStatus.PENDING, self.run_id))

    def update(self, result: CellResult) -> None:
        with self._locked() as data:
            _merge(data, result.to_json())

    def finish(self, status: str, leftover: Sequence[Cell] = ()) -> None:
        with self._locked() as data:
            run = data["runs"].setdefault(self.run_id, {})
            run.update(status=status, finished_at=now())
            for cell in leftover:
                _merge(data, _placeholder(cell, CellStatus.NOT_RUN, self.run_id))
            data["status"] = status


def _placeholder(cell: Cell, status: CellStatus, run_id: str) -> dict[str, object]:
    return CellResult(
        id=cell.id, name=cell.name, run_id=run_id, cell=CellFields.from_json(cell.to_json()), status=status
    ).to_json()


def _is_placeholder(status: Any) -> bool:
    return status in {s.value for s in CellStatus if s.placeholder}


def _merge(data: dict[str, Any], entry: dict[str, Any]) -> None:
    for index, existing in enumerate(data["cells"]):
        if existing.get("id") == entry["id"]:
            # a concurrent run's start() or Ctrl-C must not wipe a cell another run finished
            if (
                existing.get("finished_at")
                and existing.get("run_id") != entry.get("run_id")
                and _is_placeholder(entry.get("status"))
            ):
                return
            data["cells"][index] = entry
            return
    data["cells"].append(entry)
