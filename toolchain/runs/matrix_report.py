"""The matrix report's rows: one per cell, collected from what the runs left (report_tables.py renders them).

Reads what the runs left behind: out/matrix-report.json (every cell a run selected, including those
not run or interrupted), out/cells/<id>/result.json (the truth for each cell built), and each cell's
verify report (schema v2; v1 still read) for the verdict, the extensions and the kernel timings.

Every file is read through verify's bounded reader and each field it uses is type-checked (the shapes
below). A file that cannot be used is one problem line naming it; the table still shows every cell
that could be read (a corrupt result.json falls back to the run's overview entry for that cell, else a
row marked `unreadable`), and `build.py report` exits 2 after writing it.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from toolchain.runs.cell_result import CellResult, CellStatus
from verify.runtime import field_types as ft
from verify.runtime import input_files
from verify.runtime.messages import shown

OK_STATUSES = ("built", "verified")

# The fields this report reads, as the matrix run (toolchain/runs/run_loop.py) and verify write them;
# other keys are allowed (within the checker's limits).
_TEXT = ft.Nullable(ft.STR)
_BUILD = ft.Record({"ok": ft.BOOL, "tag": ft.STR, "status": ft.STR, "stage_failed": _TEXT, "error": ft.STR,
                    "summary": ft.STR, "log_tail": ft.ListOf(ft.STR), "duration_s": ft.Nullable(ft.FLOAT),
                    "exit_code": ft.Nullable(ft.INT)})
_VERIFY = ft.Record({"exit_code": ft.Nullable(ft.INT), "report_path": _TEXT, "error": ft.STR, "status": ft.STR,
                     "verdict": _TEXT, "mode": _TEXT})
_CELL = ft.Record({"cuda": ft.STR, "torch": ft.STR, "python": ft.STR, "os": ft.STR, "archs": ft.ListOf(ft.STR),
                   "extras": ft.ListOf(ft.STR)})
ENTRY_SHAPE = ft.Record({"id": ft.STR, "name": ft.STR, "status": ft.STR, "run_id": _TEXT, "cell": _CELL,
                         "build": ft.Nullable(_BUILD), "verify": ft.Nullable(_VERIFY),
                         "started_at": _TEXT, "finished_at": _TEXT}, required=("id", "name", "status"))
_STATUSES = tuple(s.value for s in CellStatus)
# matrix-report.json apart from its "cells" (each entry is checked on its own: see overview_entries)
OVERVIEW_SHAPE = ft.Record({"report_version": ft.STR, "runs": ft.MapOf(ft.ANY), "status": ft.STR})
_GPU = ft.Record({"name": _TEXT})
REPORT_SHAPE = ft.Record({
    "verdict": ft.STR, "mode": ft.STR, "summary": ft.MapOf(ft.INT),
    "environment": ft.Record({"torch": ft.Nullable(ft.Record({"gpu": ft.Nullable(_GPU)}))}),
    "extensions": ft.ListOf(ft.Record({"module": ft.STR, "status": ft.STR}, required=("module", "status"))),
    "checks": ft.ListOf(ft.Record({"id": ft.STR, "name": ft.STR, "status": ft.STR, "summary": ft.STR})),
    "timings": ft.ListOf(ft.Record({"kernel": ft.STR, "speedup": ft.Nullable(ft.Float(finite=False))})),
})


@dataclasses.dataclass
class Row:
    id: str
    name: str
    status: str
    cell: dict[str, Any]
    build: dict[str, Any] | None
    verify: dict[str, Any] | None
    report: dict[str, Any] | None  # the verify report, when one was written and is readable
    report_path: str | None
    error: str | None = None  # why this cell's own result could not be read (the row shows what is known)

    @classmethod
    def of(cls, result: CellResult, report: dict[str, Any] | None, report_path: str | None) -> Row:
        return cls(id=result.id, name=result.name or result.id, status=result.status.value, cell=result.cell,
                   build=result.build, verify=result.verify or None, report=report, report_path=report_path)

    @property
    def ok(self) -> bool:
        return self.status in OK_STATUSES

    def build_text(self) -> str:
        if self.error and self.build is None:
            return "unreadable"
        if self.build is None and self.status in ("verified", "verify_failed"):
            return "-"  # `build.py verify IMAGE` of an image built elsewhere
        build = self.build or {}
        if build.get("ok"):
            return f"ok ({build.get('duration_s', 0):.0f} s)" if build.get("duration_s") is not None else "ok"
        if self.status in ("pending", "not_run", "interrupted", "skipped", "building"):
            return self.status.replace("_", " ")
        if build.get("status") == "environment_unavailable":
            return "environment unavailable"
        stage = build.get("stage_failed")
        return f"FAILED in {stage}" if stage else "FAILED"

    def verify_text(self) -> str:
        if self.report is not None:
            summary = self.report.get("summary") or {}
            counts = ", ".join(f"{n} {k}" for k, n in summary.items() if n and k in ("FAIL", "WARN", "SKIP"))
            gpu = _gpu_name(self.report)
            where = f"{self.report.get('mode', '?')}" + (f", {gpu}" if gpu else "")
            return f"{self.report.get('verdict', '?')} ({where})" + (f": {counts}" if counts else "")
        if self.verify:
            if self.verify.get("error"):
                return f"exit {self.verify.get('exit_code')}: {self.verify['error']}"
            return f"exit {self.verify.get('exit_code')}"
        return "-"

    def extensions_text(self) -> str:
        if self.report is None:
            return "-"
        extensions = self.report.get("extensions") or []
        bad = [f"{e['module']} ({e['status'].replace('_', ' ')})" for e in extensions if e.get("status") != "ok"]
        text = f"{len(extensions) - len(bad)}/{len(extensions)} ok"
        return text + (f"; {', '.join(bad)}" if bad else "")

    def speedups(self) -> dict[str, float]:
        """kernel -> geometric mean over its cases of the kernel-time speedup (native / Apex); >1: Apex faster.

        Schema v2 keeps it in timing["kernel_time"]["speedup"]; a v1 report had one top-level "speedup"."""
        by_kernel: dict[str, list[float]] = {}
        for timing in (self.report or {}).get("timings") or []:
            ratio = (timing.get("kernel_time") or {}).get("speedup", timing.get("speedup"))
            if isinstance(ratio, (int, float)) and math.isfinite(ratio) and ratio > 0:
                by_kernel.setdefault(timing.get("kernel", "?"), []).append(float(ratio))
        return {k: math.exp(sum(map(math.log, v)) / len(v)) for k, v in by_kernel.items()}

    def kernels_text(self) -> str:
        speedups = self.speedups()
        return "; ".join(f"{k} {v:.2f}x" for k, v in speedups.items()) or "-"

    def details_text(self) -> str:
        if self.error:
            return self.error
        build = self.build or {}
        if build.get("error"):
            return str(build["error"])
        if build and not build.get("ok") and (build.get("summary") or build.get("log_tail")):
            return str(build.get("summary") or build["log_tail"][-1])
        if self.report is not None:
            fails = [c for c in self.report.get("checks") or [] if c.get("status") == "FAIL"]
            if fails:
                first = fails[0]
                more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
                return f"{first.get('id') or first.get('name', '')}: {first.get('summary', '')}{more}"
        return ""


def _gpu_name(report: dict[str, Any]) -> str | None:
    torch = (report.get("environment") or {}).get("torch") or {}
    gpu = torch.get("gpu") or {}
    return gpu.get("name")


# --- collecting -------------------------------------------------------------------------------


def overview_entries(data: Any, source: str) -> tuple[list[dict[str, Any]] | None, list[str]]:
    """The cell entries of a decoded matrix-report.json that fit ENTRY_SHAPE, and one line per problem:
    a document of the wrong shape yields None; an entry of the wrong shape is dropped alone."""
    cells = data.get("cells", []) if isinstance(data, dict) else None
    head = ft.check({k: v for k, v in data.items() if k != "cells"} if isinstance(data, dict) else data,
                    OVERVIEW_SHAPE, source)
    if isinstance(data, dict) and not isinstance(cells, list):
        head.append(ft.FieldProblem(f"{source}.cells", f"expected a list, got {ft.type_word(cells)}"))
    if head:
        return None, [ft.summary(head)]
    entries, problems = [], []
    for index, entry in enumerate(cells):
        found = entry_problems(entry, f"{source}.cells[{index}]")
        if found:
            problems.append(ft.summary(found))
        else:
            entries.append(entry)
    return entries, problems


def entry_problems(entry: Any, where: str) -> list[ft.FieldProblem]:
    """What keeps a decoded result (or overview entry) from being a CellResult: a field of the wrong type,
    or a status that is none of CellStatus's."""
    found = ft.check(entry, ENTRY_SHAPE, where)
    if not found and entry["status"] not in _STATUSES:
        found = [ft.FieldProblem(f"{where}.status", f"{shown(entry['status'])} is not a cell status "
                                 f"(one of {', '.join(_STATUSES)})")]
    return found


def _load_result(path: Path, problems: list[str]) -> CellResult | None:
    """out/cells/<id>/result.json as the record, else None with one line in `problems` naming the file."""
    kind = input_files.CELL_RESULT
    data = _read(path, kind, problems)
    if data is None:
        return None
    found = entry_problems(data, path.name)
    if found:
        problems.append(f"{kind.name} {path}: {ft.summary(found)}; {kind.fix}")
        return None
    return CellResult.from_json(data)


def _read(path: Path, kind: input_files.InputKind, problems: list[str], *, missing_ok: bool = False) -> Any:
    """The decoded file, or None with one line in `problems` naming it, what is wrong and the fix."""
    try:
        return input_files.read_json(path, kind)
    except input_files.InputFileError as exc:
        if not (missing_ok and exc.reason == "missing"):
            problems.append(f"{kind.name} {exc}")
        return None


def _load(path: Path, kind: input_files.InputKind, shape: ft.Record, problems: list[str]) -> dict[str, Any] | None:
    """The file's data if it can be read and every field this report uses has the right type; else
    None, with one line in `problems` naming the file, what is wrong and the fix."""
    data = _read(path, kind, problems)
    if data is None:
        return None
    found = ft.check(data, shape, path.name)
    if found:
        problems.append(f"{kind.name} {path}: {ft.summary(found)}; {kind.fix}")
        return None
    return data


def _find(path_text: str | None, out: Path) -> Path | None:
    """A report path as recorded (relative to where the run started), else relative to out/."""
    if not path_text:
        return None
    path = Path(path_text)
    for candidate in (path, out / path, out.parent / path):
        if candidate.is_file():
            return candidate
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
        problems += [f"{input_files.MATRIX_REPORT.name} {overview_path}: {p}; {input_files.MATRIX_REPORT.fix}"
                     for p in bad]
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
        report_file = _find((result.verify or {}).get("report_path"), out)
        report = _load(report_file, input_files.VERIFY_REPORT, REPORT_SHAPE, problems) if report_file else None
        rows.append(Row.of(result, report, str(report_file) if report_file and report is not None else None))
    rows += _verify_image_rows(out, {row.id for row in rows}, problems)
    for cell_id, why in unreadable.items():
        if cell_id not in entries:  # nothing else known about it: a row that says so
            rows.append(Row(id=cell_id, name=cell_id, status="unreadable", cell={}, build=None, verify=None,
                            report=None, report_path=None, error=why))
    return sorted(rows, key=lambda r: (_version_key(r.cell.get("cuda", "")), _version_key(r.cell.get("torch", "")), r.id))


def _verify_image_rows(out: Path, known: set[str], problems: list[str]) -> list[Row]:
    """Rows for `build.py verify IMAGE` runs (OUT/verify/<image>/report.json) of images no matrix run has a
    row for: the image is the row's id, torch and CUDA are what the report found in the image; no build column."""
    rows = []
    for report_file in sorted((out / "verify").glob("*/report.json")):
        image = report_file.parent.name
        if image in known:
            continue
        report = _load(report_file, input_files.VERIFY_REPORT, REPORT_SHAPE, problems)
        if report is None:
            continue
        torch = (report.get("environment") or {}).get("torch")
        torch = torch if isinstance(torch, dict) else {}
        cell = {k: v for k, v in (("torch", torch.get("version")), ("cuda", torch.get("cuda"))) if isinstance(v, str)}
        rows.append(Row(id=image, name=image, status="verified" if report.get("exit_code") == 0 else "verify_failed",
                        cell=cell, build=None, verify={"exit_code": report.get("exit_code"),
                                                       "report_path": str(report_file)},
                        report=report, report_path=str(report_file)))
    return rows


def _version_key(text: str) -> tuple[int, ...]:
    # ASCII digits only: "²".isdigit() is True, int("²") a ValueError (a result.json's cuda = "1².4")
    return tuple(int(p) for p in str(text).split(".") if p.isascii() and p.isdigit())
