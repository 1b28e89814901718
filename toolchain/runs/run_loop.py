"""Build (and verify) cells one after another, as a RunRequest says; a failed cell does not stop the others.

Each cell gets logs/<cell id>/build.log and out/cells/<cell id>/result.json; out/matrix-report.json
(run_overview.py) is updated after every cell, and Ctrl-C still leaves it saying which cells were
interrupted or never ran. --logs and --out are folders the tool owns: every file there (a cell's lock and
log included) is opened by atomic's owned-tree rule, so a link planted in them is refused, never followed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolchain.console import Console
from toolchain.errors import EnvironmentUnavailable, ToolchainError, UsageError
from toolchain.runs.cell_result import BuildRecord, CellFields, CellResult, CellStatus, VerifyRecord
from toolchain.runs.run_overview import MatrixReport
from toolchain.runs.run_request import RunRequest
from toolchain.spec.cell import Cell
from toolchain.timestamps import now
from verify.report import reader as verify_report
from verify.runtime import atomic, exit_codes, input_files
from verify.runtime.messages import printable

LOG_TAIL_LINES = 40
LOG_NAME = "build.log"  # LOGS/<cell id>/build.log


def result_path(out: Path, cell_id: str) -> Path:
    return out / "cells" / cell_id / "result.json"


# --- one cell ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _cell_lock(logs: Path, cell_id: str) -> Iterator[bool]:
    """True when this run holds the cell; False when another run is building it right now. The lock is
    LOGS/<cell id>/.lock, opened by the owned-tree rule: a link at the cell's folder or the lock is refused."""
    logs.mkdir(parents=True, exist_ok=True)
    lock = atomic.open_append_in_tree(logs, f"{cell_id}/.lock")
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    finally:
        os.close(lock)


def check_logs(request: RunRequest, cells: list[Cell]) -> None:
    """Before any build: a link or special file where a cell's log goes in --logs (the cell's folder, its
    build.log, its lock) is refused, naming it (exit 2); each write checks again at its own time."""
    try:
        atomic.refuse_links_in_tree(request.logs, only=tuple(cell.id for cell in cells))
        for cell in cells:
            if (request.logs / cell.id).is_dir():  # not a link: checked just above
                atomic.refuse_links_in_tree(request.logs / cell.id, only=(LOG_NAME, ".lock"))
    except atomic.LinkInOwnedTree as error:
        raise UsageError(f"--logs {request.logs}: {error.filename}: {error.strerror}") from None


def _tail(lines: Any) -> list[str]:
    if lines is None:
        return []
    if isinstance(lines, str):
        lines = lines.splitlines()
    return [str(line) for line in list(lines)[-LOG_TAIL_LINES:]]


_NOISE = re.compile(
    r"executor failed running|^#\d+ (ERROR|CANCELED)|^-+$|^ > \[|did not complete successfully"
)
_ERRORISH = re.compile(r"(?i)\b(fatal|error|failed|no such|not found|denied|unable)\b")


def failure_line(lines: list[str]) -> str:
    """The log line that says why: the last error-looking line that is not BuildKit's own wrapper."""
    for line in reversed(lines):
        text = re.sub(r"^#\d+ [\d.]+ ", "", line).strip()  # drop BuildKit's "#14 0.487 " prefix
        if text and _ERRORISH.search(text) and not _NOISE.search(line.strip()):
            return text
    return lines[-1].strip() if lines else "(empty log)"


def run_cell(
    cell: Cell, request: RunRequest, console: Console, *, verify_mode: str, run_id: str
) -> CellResult:
    """Build one cell, verify it if asked; never raises for a cell's own failure (Ctrl-C excepted)."""
    log_dir = request.logs / cell.id
    log_path = log_dir / LOG_NAME
    result = CellResult(
        id=cell.id,
        name=cell.name,
        run_id=run_id,
        cell=_fields(cell),
        status=CellStatus.BUILDING,
        started_at=now(),
    )
    with _cell_lock(request.logs, cell.id) as held:
        if not held:
            result = result.replace(
                status=CellStatus.SKIPPED,
                finished_at=now(),
                build=BuildRecord(
                    ok=False, error=f"another run is building {cell.id} (lock {log_dir / '.lock'})"
                ),
            )
            console.status("SKIP", "warn", f"{cell.name}: another run is building it")
            return save_result(result, request.out)
        build = _build(cell, request, console, log_path)
        tag = build.tag or cell.id
        if not build.ok:
            result = result.replace(build=build, status=build.status or CellStatus.BUILD_FAILED)
        elif verify_mode == "none":  # the build's own gate still reaches the report
            result = result.replace(build=build, status=CellStatus.BUILT, verify=_gate(tag, request, cell))
        else:
            verify = _verify(tag, request, console, verify_mode, cell)
            result = result.replace(build=build, verify=verify, status=verify.status)
    return save_result(result.replace(finished_at=now()), request.out)


def save_result(result: CellResult, out: Path) -> CellResult:
    # --out is the run's folder, which the tool owns: a link planted there is refused, never followed
    data = (atomic.json_dumps(result.to_json()) + "\n").encode("utf-8")
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_in_tree(out, f"cells/{result.id}/result.json", data)
    return result


def _fields(cell: Cell) -> CellFields:
    return CellFields.from_json(cell.to_json())


def _build(cell: Cell, request: RunRequest, console: Console, log_path: Path) -> BuildRecord:
    from toolchain.image import buildkit_build

    start = time.monotonic()
    build = BuildRecord(ok=False, tag=cell.id, target=request.target, log_path=str(log_path))
    with console.group(f"build {cell.name}: {cell.id}"):
        try:
            outcome = buildkit_build.build_image(
                cell,
                target=request.target,
                log_path=log_path,
                apex_src=request.apex_src,
                wheelhouse=request.wheelhouse,
                extra_ca=request.extra_ca,
                progress=request.progress,
                ccache_dir=request.ccache_dir,
                ccache_mount=request.ccache_mount,
                apex_index=request.apex_index,
                log_root=request.logs,
            )
            tail = _tail(outcome.log_tail)
            build = build.replace(
                ok=bool(outcome.ok),
                tag=outcome.tag or cell.id,
                ccache_carried=getattr(outcome, "ccache_carried", None) or None,
                stage_failed=outcome.stage_failed,
                step_failed=getattr(outcome, "step_failed", None),
                log_tail=tuple(tail),
                duration_s=round(float(outcome.duration_s), 1),
                summary=None if outcome.ok else failure_line(tail),
            )
        except EnvironmentUnavailable as err:
            build = build.replace(
                status=CellStatus.ENVIRONMENT_UNAVAILABLE, error=str(err), exit_code=err.exit_code
            )
        except ToolchainError as err:
            build = build.replace(error=str(err), exit_code=err.exit_code)
        except atomic.LinkInOwnedTree:  # a link planted in --logs: the whole run's bad input (exit 2)
            raise
        except Exception as err:  # a bug in one cell's build must not lose the other cells
            build = build.replace(status=CellStatus.ERROR, error=f"{type(err).__name__}: {err}")
            relpath = log_path.relative_to(request.logs).as_posix()
            with os.fdopen(atomic.open_append_in_tree(request.logs, relpath), "a", encoding="utf-8") as log:
                log.write(traceback.format_exc())
    if build.duration_s is None:
        build = build.replace(duration_s=round(time.monotonic() - start, 1))
    if build.ok:
        console.status("OK", "ok", f"{cell.name}: built {build.tag} in {build.duration_s:.0f} s")
    else:
        stage = f" in stage {build.stage_failed}" if build.stage_failed else ""
        why = build.error or build.summary or "(no log)"
        where = "" if str(log_path) in why else f" (log: {log_path})"
        console.error(f"{cell.name}: build failed{stage}: {why}{where}", title=f"build {cell.id}")
    return build


def _verify(tag: str, request: RunRequest, console: Console, mode: str, cell: Cell) -> VerifyRecord:
    from toolchain.image import container_verify

    out_dir = request.out / "cells" / cell.id / "verify"
    verify = VerifyRecord(mode_requested=mode, out_dir=str(out_dir))
    with console.group(f"verify {cell.name}: {tag}"):
        try:
            # the image was just built by Docker: verify it there, whatever APEX_CONTAINER_ENGINE says
            code, report_path = container_verify.verify_image(
                tag, out_dir=out_dir, gpu=mode, engine="docker", out_root=request.out
            )
            verify = with_report(verify.replace(exit_code=code), report_path)
        except ToolchainError as err:
            code = err.exit_code
            verify = verify.replace(exit_code=code, error=str(err))
        except Exception as err:
            code = exit_codes.FAILED
            verify = verify.replace(exit_code=code, error=f"{type(err).__name__}: {err}")
    verify = verify.replace(
        status={
            exit_codes.OK: CellStatus.VERIFIED,
            exit_codes.ENVIRONMENT: CellStatus.ENVIRONMENT_UNAVAILABLE,
        }.get(code, CellStatus.VERIFY_FAILED)
    )
    if code == exit_codes.OK:
        console.status("PASS", "ok", f"{cell.name}: verify {verify.mode or ''} passed")
    else:
        console.error(
            f"{cell.name}: verify exit {code}: {verify.error or verify.report_path}",
            title=f"verify {cell.id}",
        )
    return verify


def _gate(tag: str, request: RunRequest, cell: Cell) -> VerifyRecord | None:
    """The static gate's report that the build left in the image (/opt/apex/verify-static.json), copied next
    to the cell's result, so `build.py report` shows it for an image built with --verify none."""
    from toolchain.image import inspect_image
    from toolchain.spec.targets import APEX_TARGETS

    if request.target not in APEX_TARGETS or request.target == "apex-build":
        return None
    try:
        report = inspect_image.inspect(tag).get("static_report")
    except ToolchainError as err:
        return VerifyRecord(
            mode_requested="none", error=f"the gate's report could not be read from {tag}: {err}"
        )
    embedded = inspect_image.EMBEDDED["static_report"]
    try:
        parsed = (
            verify_report.parse(report, embedded)
            if isinstance(report, dict) and "verdict" in report
            else None
        )
    except input_files.InputFileError as err:
        return VerifyRecord(mode_requested="none", error=f"{tag} holds no readable {embedded}: {err.problem}")
    if parsed is None:
        return VerifyRecord(mode_requested="none", error=f"{tag} holds no readable {embedded}")
    relpath = f"cells/{cell.id}/verify/gate-report.json"
    data = (atomic.json_dumps(parsed.to_json()) + "\n").encode("utf-8")
    request.out.mkdir(parents=True, exist_ok=True)
    atomic.write_in_tree(request.out, relpath, data)  # the run's folder: a link planted there is refused
    path = request.out / relpath
    gate = VerifyRecord(
        mode_requested="none",
        source=f"the build's gate ({embedded})",
        report_path=str(path),
        exit_code=exit_codes.OK if parsed.verdict == "PASS" else exit_codes.FAILED,
    )
    return _summarized(gate, parsed)


def with_report(verify: VerifyRecord, report_path: Path | str | None) -> VerifyRecord:
    """The record with where its report was written (stored: `build.py report` reads it there) and what
    the report says (verdict, mode, summary), or why it cannot be read."""
    if not report_path:
        return verify.replace(report_path=None)
    verify = verify.replace(report_path=str(report_path))
    try:
        report = verify_report.read(report_path)
    except input_files.InputFileError as exc:
        return verify.replace(error=f"verify report unreadable: {exc}")
    return _summarized(verify, report)


def _summarized(verify: VerifyRecord, report: verify_report.VerifyReport) -> VerifyRecord:
    return verify.replace(
        verdict=report.verdict, mode=report.mode, summary={s.value: n for s, n in report.summary.items()}
    )


# --- commands ---------------------------------------------------------------------------------


def check_inputs(request: RunRequest) -> None:
    """Local inputs that every cell uses: missing ones are bad input (exit 2), caught before any build."""
    from toolchain.errors import UsageError

    for option, path, want_dir in (
        ("--apex-src", request.apex_src, True),
        ("--wheelhouse", request.wheelhouse, True),
        ("--extra-ca", request.extra_ca, False),
    ):
        if path is None:
            continue
        if want_dir and not Path(path).is_dir():
            raise UsageError(f"{option} {path}: no such directory; pass an existing directory")
        # what the build would find out only after the devel stage: caught here, before any build
        if option == "--apex-src":
            from verify.domain.apex_tree import check_apex_tree
            from verify.domain.problem import ValueProblem

            try:
                check_apex_tree(Path(path))
            except ValueProblem as bad:
                raise UsageError(f"--apex-src {path}: {bad}") from None
        # what --wheelhouse must hold is checked per cell (toolchain/image/wheelhouse.py: names the cell's values);
        # one with no wheel at all is wrong for every cell, so it is refused here, before the bases are asked for
        if option == "--wheelhouse" and not any(Path(path).glob("*.whl")):
            raise UsageError(
                f"--wheelhouse {path}: no .whl files there; pass the folder `pip download` filled"
            )
        if not want_dir and not Path(path).is_file():
            raise UsageError(f"{option} {path}: no such file; pass the CA bundle file (PEM)")
    if request.ccache_dir is not None:  # may be missing (a first run), not something else
        from toolchain.image import ccache_carry

        ccache_carry.check_dir(Path(request.ccache_dir))


def verify_mode_for(request: RunRequest, *, every_target: bool = False) -> str:
    """`build.py image`'s --verify auto verifies an image that holds Apex (runtime, runtime-devel, runtime-slim); a
    stage without it (devel, torch, apex-src, verify-runtime) is only built, unless --verify require insists.
    `build.py matrix` (every_target) verifies what it builds, as before: verify-runtime's FAIL is CPU CI's check."""
    from toolchain.spec.targets import APEX_TARGETS

    shipped = request.target in APEX_TARGETS and request.target != "apex-build"
    return request.verify if shipped or every_target or request.verify != "auto" else "none"


def build_one(cell: Cell, request: RunRequest, console: Console) -> int:
    """`build.py image`: one cell, recorded in the matrix report like any other."""
    run_id = uuid.uuid4().hex[:12]
    report = MatrixReport(request.out, None, run_id)
    report.start([cell])
    try:
        result = run_cell(cell, request, console, verify_mode=verify_mode_for(request), run_id=run_id)
    except KeyboardInterrupt:
        report.update(save_result(_interrupted(cell, request, run_id), request.out))
        report.finish("interrupted")
        raise
    report.update(result)
    report.finish("complete")
    return _exit_code([result])


def run_matrix(
    cells: list[Cell],
    request: RunRequest,
    console: Console,
    *,
    matrix_path: Path,
    unavailable: dict[str, str] | None = None,
) -> int:
    """`unavailable`: {cell name: why} for cells whose environment is missing before any build (no base:
    toolchain/image/base_route.py); they are recorded as such and the others still run."""
    run_id = uuid.uuid4().hex[:12]
    report = MatrixReport(request.out, matrix_path, run_id)
    report.start(cells)
    console.line(
        printable(f"matrix: {len(cells)} cells; report {report.path}; logs under {request.logs}/<cell>/")
    )
    results: list[CellResult] = []
    for index, cell in enumerate(cells):
        if cell.name in (unavailable or {}):
            why = (unavailable or {})[cell.name]
            build = BuildRecord(
                ok=False,
                tag=cell.id,
                status=CellStatus.ENVIRONMENT_UNAVAILABLE,
                error=why,
                exit_code=exit_codes.ENVIRONMENT,
            )
            result = save_result(
                CellResult(
                    id=cell.id,
                    name=cell.name,
                    run_id=run_id,
                    cell=_fields(cell),
                    status=CellStatus.ENVIRONMENT_UNAVAILABLE,
                    started_at=now(),
                    finished_at=now(),
                    build=build,
                ),
                request.out,
            )
            results.append(result)
            report.update(result)
            continue
        try:
            result = run_cell(
                cell, request, console, verify_mode=verify_mode_for(request, every_target=True), run_id=run_id
            )
        except KeyboardInterrupt:
            report.update(save_result(_interrupted(cell, request, run_id), request.out))
            report.finish("interrupted", leftover=cells[index + 1 :])
            console.error(f"interrupted during {cell.name}; partial report in {report.path}")
            return exit_codes.FAILED
        results.append(result)
        report.update(result)
    report.finish("complete")
    _summary(results, console)
    return _exit_code(results)


def _interrupted(cell: Cell, request: RunRequest, run_id: str) -> CellResult:
    """The cell in progress at Ctrl-C, with what its log had so far (the build was stopped)."""
    log_path = request.logs / cell.id / LOG_NAME
    try:
        lines = input_files.read_log_tail(log_path)  # what the log had so far: its tail
    except input_files.InputFileError:
        lines = []
    build = BuildRecord(ok=False, interrupted=True, log_path=str(log_path), log_tail=tuple(_tail(lines)))
    return CellResult(
        id=cell.id,
        name=cell.name,
        run_id=run_id,
        cell=_fields(cell),
        status=CellStatus.INTERRUPTED,
        finished_at=now(),
        build=build,
    )


def _summary(results: list[CellResult], console: Console) -> None:
    console.line()
    for result in results:
        word, kind = _STATUS_WORDS.get(result.status, ("FAIL", "fail"))
        console.status(
            word, kind, f"{result.name:<12} {result.id}  ({result.status.value.replace('_', ' ')})"
        )


_STATUS_WORDS = {
    CellStatus.BUILT: ("BUILT", "ok"),
    CellStatus.VERIFIED: ("PASS", "ok"),
    CellStatus.SKIPPED: ("SKIP", "warn"),
    CellStatus.ENVIRONMENT_UNAVAILABLE: ("ENV", "warn"),
    CellStatus.NOT_RUN: ("-", "warn"),
}


def _exit_code(results: list[CellResult]) -> int:
    statuses = {r.status for r in results}
    if CellStatus.ENVIRONMENT_UNAVAILABLE in statuses:
        return exit_codes.ENVIRONMENT
    if any(s.failed for s in statuses) or CellStatus.SKIPPED in statuses:
        return exit_codes.FAILED
    return exit_codes.OK


__all__ = ["build_one", "check_inputs", "check_logs", "result_path", "run_cell", "run_matrix", "save_result"]
