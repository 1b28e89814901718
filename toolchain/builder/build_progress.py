"""Progress lines while Apex compiles: a cold build runs for minutes and ninja prints a unit only when it
ends, so every INTERVAL_S the builder prints units done of total and an estimate of the time left:

    [apex-builder] progress: 17/37 units done; 3m30s so far, about 1m05s left

Units done/total: ninja's own `[n/N]` lines in the build's output, summed over the extensions' ninjas
(ninja_status.py). Time left, in three parts:
  1. the plan: each unit's predicted CPU seconds (toolchain/data/apex_unit_costs.json at this build's
     arch count), its nvcc threads and niceness (the unit schedule's, or the plain plan's), the cores and
     the queue limits go through a fluid model of the kernel's sharing (unit_simulation.py), which gives
     every unit's predicted end f (seconds after the first `building ... extension` line). The model
     opens the extensions in the order the build's `building` lines did (the rest in the expected list's):
     with fewer extensions at once than there are (APEX_PARALLEL_BUILD 1 on 2 cores) a unit's end
     depends on the extensions before it;
  2. the speed: the machine runs s times slower than predicted (0.5-1.26 on the same H200 on one day,
     2026-12-03; 0.8-1.9 on the shared 2-core machine). Ends are matched by rank, the n-th unit to end
     against the model's n-th end (ninja's order within an extension is not the model's); s is the
     observed / modelled time between the n-th end and the end at a quarter of the model time so far
     (RECENT). Before any nvcc unit ended, CPP_SCALE x that (g++ units ran 1.1-1.3x the nvcc units'
     ratio); before any unit ended, PRIOR_SCALE, or more while the model's first unit is overdue;
  3. left = the latest unit's end + s x (the model's time from its n-th end to its last) - time since
     the compile started, never below s x the model's time after its (n+1)-th end (that unit has not
     ended yet), + TAIL_S (link, packing the wheel, the builder's renaming); after the last unit, what
     is left of TAIL_S, at least a third of it.
Checked by replaying recorded builds (tests/unit/test_build_progress_replay.py): the five 2026-12-03 H200
builds and two cold builds on the shared 2-core machine (tests/fixtures/build-progress-2core): every
estimate after the first minute within 0.5-2x of the real time left. Stdlib only; the clock and the wait
are injected (unit tests drive them).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable

from toolchain.builder import unit_schedule, unit_simulation
from toolchain.builder.ninja_status import Count, StatusTally

INTERVAL_S = 30.0
# The constants below come from the 2026-12-03 H200 five-arch builds (/work/ab-keep, fixtures in
# tests/fixtures/build-progress-2026-12-03): the speed against the cost table (observed / modelled end of
# the last unit) was 0.59-0.94; 0.75 sits between them.
PRIOR_SCALE = 0.75
# g++ units ran 1.1-1.3x the nvcc units' observed / modelled ratio (their costs are older walls, not CPU
# seconds), so their ratio predicts the nvcc units' after this factor.
CPP_SCALE = 0.85
# The speed is measured over this latest part of the model time so far (the first quarter left out): the
# ratio drifts (0.83 -> 0.94 in one H200 build; on the 2-core builds amp_C's fifteen small units ran 1.6-1.9x
# the model, the extensions after it 0.8-1.6x).
RECENT = 0.75
# from the last unit's [n/N] line to the command's end: 12.3-19.0 s (link, wheel packing, renaming).
TAIL_S = 15.0


@dataclasses.dataclass(frozen=True)
class UnitPlan:
    """The units this build compiles as the cost table predicts them, and when each would end."""

    predicted_end_s: dict[str, float]  # unit key: modelled end after the compile's start, at speed 1
    nvcc: frozenset[str]  # unit keys compiled by nvcc (their costs are measured CPU seconds)
    expected_units: dict[str, int]  # extension: units the table lists
    extensions: frozenset[str]  # every extension the build compiles (some may be missing from the table)
    order: tuple[str, ...] = ()  # the order the model opens the extensions in
    sim: tuple[tuple[unit_simulation.SimUnit, ...], int, int, int] = ((), 1, 1, 1)  # to model again

    @property
    def last_end_s(self) -> float:
        return max(self.predicted_end_s.values())

    def in_order(self, started: list[str]) -> UnitPlan:
        """This plan with the extensions opened as the build opened them so far (`building` lines), the others
        after them in this plan's order. When fewer extensions run at once than there are (APEX_PARALLEL_BUILD
        1 on 2 cores), a unit's end depends on which extensions went before it."""
        order = tuple(dict.fromkeys([*started, *self.order]))
        if order[: len(started)] == self.order[: len(started)] or not self.sim[0]:
            return self
        units, cores, at_once, extensions_at_once = self.sim
        ends = unit_simulation.finish_times(units, cores, at_once, extensions_at_once, order)
        return dataclasses.replace(self, predicted_end_s=ends, order=order)

    @classmethod
    def of(
        cls,
        costs: dict[str, unit_schedule.UnitCost],
        extensions: list[str] | set[str],
        n_archs: int,
        schedule: unit_schedule.Schedule | None,
        *,
        bulk_threads: int,
        cores: int,
        at_once: int = 10**6,
        extensions_at_once: int = 10**6,
    ) -> UnitPlan | None:
        """None when the table knows no unit of these extensions (no estimate; counts only)."""
        units = []
        for key, cost in costs.items():
            if key.split("/", 1)[0] not in extensions:
                continue
            threads, nice = (1, 0)  # g++ units are not wrapped: one thread, nice 0
            if cost.nvcc:
                threads, nice = schedule.units.get(key, schedule.default) if schedule else (bulk_threads, 0)
            units.append(
                unit_simulation.SimUnit(
                    key,
                    cost.cpu_s(n_archs),
                    cost.host_s if cost.nvcc else cost.cpu_s(n_archs),
                    max(1, int(threads or bulk_threads)),
                    unit_schedule.NICE_STEP**-nice,
                )
            )
        if not units:
            return None
        order = tuple(extensions) if isinstance(extensions, list) else ()  # a set: costliest first
        ends = unit_simulation.finish_times(units, cores, at_once, extensions_at_once, order)
        expected: dict[str, int] = {}
        for unit in units:
            expected[unit.extension] = expected.get(unit.extension, 0) + 1
        nvcc = frozenset(k for k, c in costs.items() if c.nvcc and k in ends)
        sim = (tuple(units), cores, at_once, extensions_at_once)
        return cls(ends, nvcc, expected, frozenset(extensions), order, sim)


@dataclasses.dataclass(frozen=True)
class Estimate:
    left_s: float
    scale: float  # observed / predicted speed used
    scale_from: str  # "prior", "still compiling" (no unit ended yet), "g++ units", "units", "done"


def speed_scale(plan: UnitPlan, ended: dict[str, float], since_compile_s: float) -> tuple[float, str]:
    """s: how many times slower than the plan this build runs (see the module's docstring, part 2)."""
    known = {k: t for k, t in ended.items() if k in plan.predicted_end_s}
    model, seen = [0.0, *sorted(plan.predicted_end_s.values())], [0.0, *sorted(known.values())]
    n = len(seen) - 1
    if not n:
        floor = since_compile_s / model[1]  # the first unit has not ended yet
        return (floor, "still compiling") if floor > PRIOR_SCALE else (PRIOR_SCALE, "prior")
    # the n-th unit to end against the model's n-th end: ninja's order in an extension is not the model's
    start = max(i for i in range(n) if model[i] <= (1 - RECENT) * model[n])
    scale = (seen[n] - seen[start]) / max(1e-9, model[n] - model[start])
    if any(k in plan.nvcc for k in known):
        return scale, "units"
    return CPP_SCALE * scale, "g++ units"


def estimate(
    plan: UnitPlan,
    ended: dict[str, float],
    since_compile_s: float | None,
    since_last_unit_s: float | None,
    all_done: bool,
) -> Estimate:
    """Seconds left to the command's end. ended: unit key -> seconds after the compile's start at which
    its [n/N] line came; since_compile_s None: the compile has not started; all_done: every ninja at N/N."""
    if all_done:
        since = since_last_unit_s or 0.0
        return Estimate(max(TAIL_S - since, TAIL_S / 3), math.nan, "done")
    elapsed = since_compile_s or 0.0
    scale, source = speed_scale(plan, ended, elapsed)
    seen = sorted(t for k, t in ended.items() if k in plan.predicted_end_s)
    if seen:  # from the latest unit's end: the rest of the model at this speed
        model = sorted(plan.predicted_end_s.values())
        end = seen[-1] + scale * (plan.last_end_s - model[len(seen) - 1])
        if len(seen) < len(model):  # the next unit has not ended: what comes after it is still to do
            end = max(end, elapsed + scale * (plan.last_end_s - model[len(seen)]))
    else:
        end = scale * plan.last_end_s
    return Estimate(max(0.0, end - elapsed) + TAIL_S, scale, source)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    count: Count
    elapsed_s: float  # since the command started
    left: Estimate | None  # None: no predicted costs for this build

    def line(self) -> str:
        left = (
            f", about {_minutes(self.left.left_s)} left"
            if self.left
            else ", no estimate (no predicted unit costs)"
        )
        return f"progress: {self.count.text()}; {_minutes(self.elapsed_s)} so far{left}"


def _minutes(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Reporter:
    """Reads the build's output lines (`feed`) and prints a snapshot every `interval_s` from a thread until
    stopped (a context manager). Times are on `clock` (monotonic); `started_monotonic_s` is the command's
    start on it (command_clock.py), so "so far" and the estimate are the whole command's."""

    def __init__(
        self,
        plan: UnitPlan | None,
        say: Callable[[str], None],
        *,
        expected_units: dict[str, int] | None = None,
        started_monotonic_s: float | None = None,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        self._plan, self._say, self._interval, self._clock = plan, say, interval_s, clock
        expected = plan.expected_units if plan else (expected_units or {})
        self.tally = StatusTally(expected, plan.extensions if plan else frozenset())
        self._started = clock() if started_monotonic_s is None else started_monotonic_s
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait  # returns True when stopped
        self._thread = threading.Thread(target=self._run, name="apex-build-progress", daemon=True)

    def feed(self, line: str) -> None:
        self.tally.feed(line, self._clock())

    def snapshot(self) -> Snapshot:
        now = self._clock()
        count = self.tally.count()
        if self._plan is None:
            return Snapshot(count, now - self._started, None)
        began = self.tally.compile_started()
        origin = began if began is not None else now
        ended = {k: t - origin for k, t in self.tally.ended().items()}
        last = max(ended.values(), default=None)
        self._plan = self._plan.in_order(self.tally.started())
        left = estimate(
            self._plan,
            ended,
            None if began is None else now - began,
            None if last is None else now - origin - last,
            self.tally.all_done(),
        )
        return Snapshot(count, now - self._started, left)

    def tick(self) -> str:
        line = self.snapshot().line()
        self._say(line)
        return line

    def _run(self) -> None:
        while not self._wait(self._interval):
            try:
                self.tick()
            except Exception as error:  # a progress line must never fail the build
                self._say(f"progress: unavailable ({type(error).__name__}: {error})")
                return

    def __enter__(self) -> Reporter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
