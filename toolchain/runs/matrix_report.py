"""The matrix report's rows: one per cell, collected from what the runs left (report_tables.py renders them).

Reads what the runs left behind: out/matrix-report.json (every cell a run selected, including those
not run or interrupted), out/cells/<id>/result.json (the truth for each cell built), and each cell's
verify report (schema v2; v1 still read) for the verdict, the extensions and the kernel timings, at the
path its result recorded (verify.report.read: the one reader, its shape the schema's).

Every file is read through verify's bounded reader and each field it uses is type-checked (a result by
cell_result.read, a report by verify.report.read). A file that cannot be used is one problem line naming
it; the table still shows every cell that could be read (a corrupt result.json falls back to the run's
overview entry for that cell, else a row marked `unreadable`), and `build.py report` exits 2 after
writing it. A stored report path whose file is gone is such a line too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from toolchain.runs import cell_result
from toolchain.runs.cell_result import BuildRecord, CellFields, CellResult, CellStatus, VerifyRecord
from verify.report import reader as verify_report
from verify.report.reader import VerifyReport
from verify.runtime import field_types as ft
from verify.runtime import input_files

# matrix-report.json apart from its "cells" (each entry is checked on its own: see overview_entries)
OVERVIEW_SHAPE = ft.Record({"report_version": ft.STR, "runs": ft.MapOf(ft.ANY), "status": ft.STR})


@dataclasses.dataclass(frozen=True)
class Row:
    """One cell of the matrix report, as collected (report_tables.py renders it)."""

    id: str
    name: str
    status: CellStatus | None  # None: the cell's own result could not be read (`error` says why)
    cell: CellFields
    build: BuildRecord | None
    verify: VerifyRecord | None
    report: VerifyReport | None  # the verify report, when one was written and is readable
    report_path: str | None
    error: str | None = None  # why this cell's own result could not be read (the row shows what is known)

    @classmethod
    def of(cls, result: CellResult, report: VerifyReport | None, report_path: str | None) -> Row:
        return cls(
            id=result.id,
            name=result.name or result.id,
            status=result.status,
            cell=result.cell,
            build=result.build,
            verify=result.verify,
            report=report,
            report_path=report_path,
        )

    @property
    def ok(self) -> bool:
        return self.status is not None and self.status.ok


# --- collecting -------------------------------------------------------------------------------


def overview_entries(data: Any, source: str) -> tuple[list[dict[str, Any]] | None, list[str]]:
    """The cell entries of a decoded matrix-report.json that fit ENTRY_SHAPE, and one line per problem:
    a document of the wrong shape yields None; an entry of the wrong shape is dropped alone."""
    cells = data.get("cells", []) if isinstance(data, dict) else None
    head = ft.check(
        {k: v for k, v in data.items() if k != "cells"} if isinstance(data, dict) else data,
        OVERVIEW_SHAPE,
        source,
    )
    if isinstance(data, dict) and not isinstance(cells, list):
        head.append(ft.FieldProblem(f"{source}.cells", f"expected a list, got {ft.type_word(cells)}"))
    if head:
        return None, [ft.summary(head)]
    entries, problems = [], []
    for index, entry in enumerate(cells or []):  # a list here: head has no problem
        found = cell_result.problems(entry, f"{source}.cells[{index}]")
        if found:
            problems.append(ft.summary(found))
        else:
            entries.append(entry)
    return entries, problems


def _load_result(path: Path, problems: list[str]) -> CellResult | None:
    """out/cells/<id>/result.json as the record, else None with one line in `problems` naming the file."""
    kind = input_files.CELL_RESULT
    data = _read(path, kind, problems)
    if data is None:
        return None
    result = cell_result.read(data, path.name)
    if isinstance(result, list):
        problems.append(f"{kind.name} {path}: {ft.summary(result)}; {kind.fix}")
        return None
    return result


def _read(path: Path, kind: input_files.InputKind, problems: list[str], *, missing_ok: bool = False) -> Any:
    """The decoded file, or None with one line in `problems` naming it, what is wrong and the fix."""
    try:
        return input_files.read_json(path, kind)
    except input_files.InputFileError as exc:
        if not (missing_ok and exc.reason == "missing"):
            problems.append(f"{kind.name} {exc}")
        return None


def _load_report(path: Path, problems: list[str]) -> VerifyReport | None:
    """The verify report at `path` (verify.report.read), else None with one line in `problems` naming the
    file, what is wrong and the fix (a stored path whose file is gone: "does not exist")."""
    try:
        return verify_report.read(path)
    except input_files.InputFileError as exc:
        problems.append(f"{input_files.VERIFY_REPORT.name} {exc}")
        return None


def collect(out: Path, problems: list[str] | None = None) -> list[Row]:
    """One row per cell from what the runs left under `out`; every input that could not be used is
    one line appended to `problems` (the rows still hold every cell that could be read)."""
    problems = [] if problems is None else problems
    entries: dict[str, CellResult] = {}
    unreadable: dict[str, str] = {}  # cell id (its directory) -> why its result.json is not used
    overview_path = out / "matrix-report.json"
    overview = _read(overview_path, input_files.MATRIX_REPORT, problems, missing_ok=True)
    if overview is not None:
        good, bad = overview_entries(overview, overview_path.name)
        entries.update((entry["id"], CellResult.from_json(entry)) for entry in good or [])
        problems += [
            f"{input_files.MATRIX_REPORT.name} {overview_path}: {p}; {input_files.MATRIX_REPORT.fix}"
            for p in bad
        ]
    for result_file in sorted((out / "cells").glob("*/result.json")):
        before = len(problems)
        result = _load_result(result_file, problems)
        if result is None:
            unreadable[result_file.parent.name] = problems[before]
            continue
        known = entries.get(result.id)
        # the later state wins: a result file over its run's "pending", a later "interrupted" over both
        if known is None or (result.finished_at or "") >= (known.finished_at or ""):
            entries[result.id] = result
    rows = []
    for result in entries.values():
        stored = result.verify.report_path if result.verify else None  # as its writer named it: read it there
        report = _load_report(Path(stored), problems) if stored else None
        rows.append(Row.of(result, report, stored if report is not None else None))
    rows += _verify_image_rows(out, {row.id for row in rows}, problems)
    for cell_id, why in unreadable.items():
        if cell_id not in entries:  # nothing else known about it: a row that says so
            rows.append(
                Row(
                    id=cell_id,
                    name=cell_id,
                    status=None,
                    cell=CellFields(),
                    build=None,
                    verify=None,
                    report=None,
                    report_path=None,
                    error=why,
                )
            )
    return sorted(rows, key=lambda r: (_version_key(r.cell.cuda), _version_key(r.cell.torch), r.id))


def _verify_image_rows(out: Path, known: set[str], problems: list[str]) -> list[Row]:
    """Rows for `build.py verify IMAGE` runs (OUT/verify/<image>/report.json) of images no matrix run has a
    row for: the image is the row's id, torch and CUDA are what the report found in the image; no build column."""
    rows = []
    for report_file in sorted((out / "verify").glob("*/report.json")):
        image = report_file.parent.name
        if image in known:
            continue
        report = _load_report(report_file, problems)
        if report is None:
            continue
        cell = CellFields(torch=report.torch_version or "", cuda=report.torch_cuda or "")
        status = CellStatus.VERIFIED if report.exit_code == 0 else CellStatus.VERIFY_FAILED
        rows.append(
            Row(
                id=image,
                name=image,
                status=status,
                cell=cell,
                build=None,
                verify=VerifyRecord(exit_code=report.exit_code, report_path=str(report_file)),
                report=report,
                report_path=str(report_file),
            )
        )
    return rows


def _version_key(text: str) -> tuple[int, ...]:
    # ASCII digits only: "²".isdigit() is True, int("²") a ValueError (a result.json's cuda = "1².4")
    return tuple(int(p) for p in str(text).split(".") if p.isascii() and p.isdigit())
