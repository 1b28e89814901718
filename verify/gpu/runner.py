"""Run check groups in worker subprocesses, each check under a timeout, and keep whatever survives.

One group = one `python -m verify.gpu.worker GROUP` process. Its results stream back one check at a
time, so when the worker dies (signal, exit, CUDA context poisoned) or a check outlives its timeout,
the checks already reported stay, the check in flight becomes a FAIL carrying the error, the exit
signal and the tail of stderr, and the group's remaining checks go on in a fresh worker (at most
MAX_WORKERS_PER_GROUP processes per group). Standard library only.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import sys
import threading
import time
from typing import Any

from verify.checks import Check, Status
from verify.domain.report_json import TimingJSON
from verify.gpu import cases as case_table
from verify.gpu import device_load
from verify.runtime import child_processes
from verify.runtime.json_lines_child import TIMEOUT, JsonLinesChild, describe_exit, last_line, verify_env

MAX_WORKERS_PER_GROUP = 3  # the first worker plus two restarts after a crash, a hang or a poisoned context


@dataclasses.dataclass
class GroupResult:
    group: str
    checks: list[Check] = dataclasses.field(default_factory=list)
    timings: list[TimingJSON] = dataclasses.field(default_factory=list)
    workers: list[dict] = dataclasses.field(default_factory=list)  # one entry per process started
    wall_s: float = 0.0


def kill_all_workers() -> None:
    """Ctrl-C or a failure here: end every child this process started (verify.runtime.child_processes)."""
    child_processes.kill_all()


class _Worker(JsonLinesChild):
    """One worker process.

    hold=True: the worker sets up (imports, CUDA context) and then waits for release() before its
    first case, so an exclusive group's start-up overlaps the groups that run before it.
    """

    def __init__(
        self, group: str, seed: int, names: list[str], hold: bool = False, flags: tuple[str, ...] = ()
    ) -> None:
        argv = [
            sys.executable,
            "-m",
            "verify.gpu.worker",
            group,
            "--seed",
            str(seed),
            "--cases",
            ",".join(names),
        ]
        argv += ["--hold"] if hold else []
        argv += list(flags)
        super().__init__(argv, label=f"gpu-{group}", env=verify_env(), stdin_pipe=hold)

    def release(self) -> None:
        """Let a held worker start its cases (a closed stdin releases it too, as when this process dies)."""
        self.send_and_close(b"go\n")


def _fail(case: case_table.Case, summary: str, details: dict[str, object], duration_s: float = 0.0) -> Check:
    return Check(case.layer, case.name, Status.FAIL, summary, details, duration_s)


def run_group(
    group: str,
    seed: int,
    check_timeout_s: float,
    names: list[str] | None = None,
    stop: threading.Event | None = None,
    first_worker: _Worker | None = None,
    flags: tuple[str, ...] = (),
) -> GroupResult:
    """Run `names` (default: every case of the group) in worker processes; never raises for a bad worker.

    Once `stop` is set no further worker is started. first_worker: a worker already started for exactly
    these names (held, see _Worker); it is released here.
    """
    table = {c.name: c for c in case_table.cases_of(group)}
    pending = list(names) if names is not None else list(table)
    result = GroupResult(group)
    t0 = time.monotonic() if first_worker is None else first_worker.started
    last_death = ""
    while pending and len(result.workers) < MAX_WORKERS_PER_GROUP and not (stop and stop.is_set()):
        worker, first_worker = (first_worker or _Worker(group, seed, pending, flags=flags)), None
        worker.release()
        run = _WorkerRun({"pid": worker.pid, "cases": list(pending)})
        _read_events(worker, run, result, pending, check_timeout_s)
        returncode, stderr_tail = worker.finish()
        info = run.info
        info.update(exit=describe_exit(returncode), wall_s=round(time.monotonic() - worker.started, 3))
        result.workers.append(info)
        death = {"worker_exit": info["exit"], "stderr_tail": stderr_tail, "seed": seed}
        if run.current is not None:  # the case in flight when the worker stopped answering
            last_death = _fail_in_flight(
                run, run.current, table, result, pending, death, stderr_tail, check_timeout_s
            )
            continue
        if not run.ready:  # died or hung before running anything: retrying would do the same
            _fail_setup(group, run, table, result, pending, death, stderr_tail, check_timeout_s)
            pending = []
        elif pending:  # stopped between checks: a poisoned CUDA context, or an exit after a result
            last_death = (
                f"CUDA context broken: {info['poisoned']}"
                if "poisoned" in info
                else f"the worker ended ({info['exit']}) between checks"
            )
    if pending:
        result.checks.append(
            Check(
                table[pending[0]].layer,
                f"{group}.not_run",
                Status.FAIL,
                f"{len(pending)} {group} check(s) not run: {len(result.workers)} worker processes failed "
                f"(last: {last_death or 'see details'})",
                {"not_run": list(pending), "workers": result.workers, "seed": seed},
            )
        )
    order = {name: i for i, name in enumerate(table)}
    result.checks.sort(key=lambda c: order.get(c.name, len(order)))
    result.wall_s = round(time.monotonic() - t0, 3)
    return result


@dataclasses.dataclass
class _WorkerRun:
    """One worker process while its events are read: what it said, the case in flight, how it ended."""

    info: dict[str, object]
    current: str | None = None
    current_started: float = dataclasses.field(default_factory=time.monotonic)
    ready: bool = False
    outcome: str = "ended"  # or "timeout"


def _read_events(
    worker: _Worker, run: _WorkerRun, result: GroupResult, pending: list[str], check_timeout_s: float
) -> None:
    """Read the worker's events until it is done, stops answering or outlives the check timeout."""
    try:
        while True:
            event = worker.next_event(check_timeout_s)
            if event is TIMEOUT:
                run.outcome = "timeout"
                worker.kill()
                break
            if event is None:
                break
            if _on_event(event, run, result, pending):
                break
    except BaseException:
        worker.kill()  # Ctrl-C or a bug here: never leave a worker behind
        worker.finish(0)
        raise


def _on_event(event: dict[str, Any], run: _WorkerRun, result: GroupResult, pending: list[str]) -> bool:
    """Take one event of the worker's protocol; True when it is the last ("done")."""
    kind = event.get("event")
    if kind == "ready":
        run.ready = True
        run.info.update(device=event.get("device"), setup_s=event.get("setup_s"))
    elif kind == "start":
        run.current = event.get("case")
        run.current_started = time.monotonic()
    elif kind == "result":
        check = Check.from_json(event["check"])
        result.checks.append(check)
        result.timings.extend(event.get("timings") or [])
        if check.name in pending:
            pending.remove(check.name)
        run.current = None
    elif kind == "poisoned":
        run.info["poisoned"] = event.get("error")
    elif kind == "done":
        return True
    return False


def _fail_in_flight(
    run: _WorkerRun,
    current: str,
    table: dict[str, case_table.Case],
    result: GroupResult,
    pending: list[str],
    death: dict[str, object],
    stderr_tail: str,
    check_timeout_s: float,
) -> str:
    """The case in flight (`current`) when the worker hung or died becomes a FAIL; returns its summary."""
    case = table[current]
    spent = time.monotonic() - run.current_started
    if run.outcome == "timeout":
        summary = (
            f"{current} did not finish within {check_timeout_s:g} s: the worker was killed "
            "(a hang in the kernel or the driver)"
        )
    else:
        summary = f"{current}: the worker process died ({run.info['exit']}) while running it" + (
            f": {last_line(stderr_tail)}" if last_line(stderr_tail) else ""
        )
    result.checks.append(_fail(case, summary, {**death, "timeout_s": check_timeout_s}, spent))
    pending.remove(current)
    return summary


def _fail_setup(
    group: str,
    run: _WorkerRun,
    table: dict[str, case_table.Case],
    result: GroupResult,
    pending: list[str],
    death: dict[str, object],
    stderr_tail: str,
    check_timeout_s: float,
) -> None:
    """A worker that died or hung before running anything: one setup FAIL naming the cases not run."""
    why = (
        f"did not get ready within {check_timeout_s:g} s"
        if run.outcome == "timeout"
        else f"died during setup ({run.info['exit']})"
    )
    line = last_line(stderr_tail)
    result.checks.append(
        Check(
            table[pending[0]].layer,
            f"{group}.setup",
            Status.FAIL,
            f"the {group} worker {why}" + (f": {line}" if line else "") + f"; not run: {', '.join(pending)}",
            {**death, "not_run": list(pending)},
        )
    )


def _judge_load(result: GroupResult, load: device_load.DeviceLoad) -> None:
    """The timing group's verdicts stand only on a GPU verify had to itself (verify.gpu.device_load)."""
    device_load.withhold(result.checks, result.timings, load)
    shared = load.shared_reason() is not None
    result.checks.append(
        Check(
            "timing",
            "device_load",
            Status.WARN if shared else Status.INFO,
            f"GPU load during timing: {load.summary()}",
            load.to_json(),
        )
    )


def run_groups(
    groups: list[str],
    seed: int,
    check_timeout_s: float,
    names: dict[str, list[str]] | None = None,
    parallel: bool = True,
    flags: tuple[str, ...] = (),
) -> list[GroupResult]:
    """Groups not in EXCLUSIVE_GROUPS run side by side; exclusive ones (timing) alone, afterwards.
    flags: worker options every group gets (--no-compile)."""
    names = names or {}
    shared = [g for g in groups if g not in case_table.EXCLUSIVE_GROUPS]
    alone = [g for g in groups if g in case_table.EXCLUSIVE_GROUPS]
    results: dict[str, GroupResult] = {}
    stop = threading.Event()
    held: dict[str, _Worker] = {}
    pool = (
        concurrent.futures.ThreadPoolExecutor(max_workers=len(shared))
        if parallel and len(shared) > 1
        else None
    )
    try:
        if parallel and shared and alone:
            # the first exclusive group's worker starts now (Python, torch, CUDA context: seconds) and waits,
            # held, until the shared groups are done: no kernel of it runs beside them
            first = alone[0]
            first_names = names.get(first) or [c.name for c in case_table.cases_of(first)]
            held[first] = _Worker(first, seed, first_names, hold=True, flags=flags)
        if pool is not None:
            futures = {
                g: pool.submit(run_group, g, seed, check_timeout_s, names.get(g), stop, None, flags)
                for g in shared
            }
            results.update({g: f.result() for g, f in futures.items()})
        else:
            results.update(
                {g: run_group(g, seed, check_timeout_s, names.get(g), stop, flags=flags) for g in shared}
            )
        for g in alone:
            started = {
                w["pid"] for r in results.values() for w in r.workers
            }  # exited parity workers are verify's too
            watch = device_load.DeviceWatch.start(known=started) if g in case_table.WATCHED_GROUPS else None
            try:
                results[g] = run_group(
                    g, seed, check_timeout_s, names.get(g), stop, first_worker=held.pop(g, None), flags=flags
                )
            finally:
                load = watch.stop() if watch is not None else None
            if load is not None:
                _judge_load(results[g], load)
    except BaseException:  # before the pool waits for its threads: they must not start fresh workers
        stop.set()
        kill_all_workers()
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return [results[g] for g in groups]
