"""Progress lines while Apex compiles: a cold build runs for minutes and ninja prints a unit only when it
ends, so every INTERVAL_S the builder prints units done of total and an estimate of the time left:

    [apex-builder] progress: 17/37 units done; 3m30s so far, about 1m05s left

Units done/total: ninja's own `[n/N]` lines in the build's output, summed over the extensions' ninjas
(ninja_status.py). Time left, in three parts:
  1. the plan: each unit's predicted CPU seconds (toolchain/data/apex_unit_costs.json at this build's
     arch count), its nvcc threads and niceness (the unit schedule's, or the plain plan's), the cores and
     the queue limits go through a fluid model of the kernel's sharing (unit_simulation.py), which gives
     every unit's predicted end f (seconds after the first `building ... extension` line);
  2. the speed: the machine runs s times slower than predicted (measured s: 0.5-1.26 on the same H200 on
     one day, 2026-12-03), so each unit ends at about s x f. s = observed end / f of the LATEST_UNITS nvcc
     units that ended last (the latest: the ratio drifts during a build); before any nvcc unit ended,
     CPP_SCALE x the ratio of the g++ units (they ran 1.1-1.3x the nvcc units' ratio); before any unit
     ended, PRIOR_SCALE. Never below now / f of the first unit still compiling (it has not ended yet);
  3. left = s x (the last unit's f) - time since the compile started + TAIL_S (link, packing the wheel,
     the builder's renaming); after the last unit, what is left of TAIL_S, at least a third of it.
Checked by replaying the five recorded 2026-12-03 builds (tests/unit/test_build_progress_replay.py):
every estimate after the first minute within 0.5-2x of the real time left. Stdlib only; the clock and
the wait are injected (unit tests drive them).
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
# nvcc units whose ratio gives the speed: the latest, since the ratio drifts (0.83 -> 0.94 in one build).
LATEST_UNITS = 2
# from the last unit's [n/N] line to the command's end: 12.3-19.0 s (link, wheel packing, renaming).
TAIL_S = 15.0


@dataclasses.dataclass(frozen=True)
class UnitPlan:
    """The units this build compiles as the cost table predicts them, and when each would end."""

    predicted_end_s: dict[str, float]  # unit key: modelled end after the compile's start, at speed 1
    nvcc: frozenset[str]  # unit keys compiled by nvcc (their costs are measured CPU seconds)
    expected_units: dict[str, int]  # extension: units the table lists
    extensions: frozenset[str]  # every extension the build compiles (some may be missing from the table)

    @property
    def last_end_s(self) -> float:
        return max(self.predicted_end_s.values())

    @classmethod
    def of(
        cls,
        costs: dict[str, unit_schedule.UnitCost],
        extensions: set[str],
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
        ends = unit_simulation.finish_times(units, cores, at_once, extensions_at_once)
        expected: dict[str, int] = {}
        for unit in units:
            expected[unit.extension] = expected.get(unit.extension, 0) + 1
        nvcc = frozenset(k for k, c in costs.items() if c.nvcc and k in ends)
        return cls(ends, nvcc, expected, frozenset(extensions))


@dataclasses.dataclass(frozen=True)
class Estimate:
    left_s: float
    scale: float  # observed / predicted speed used
    scale_from: str  # "prior", "g++ units", "nvcc units", "still compiling"


def speed_scale(plan: UnitPlan, ended: dict[str, float], since_compile_s: float) -> tuple[float, str]:
    """s: how many times slower than the plan this build runs (see the module's docstring, part 2)."""
    known = {k: t for k, t in ended.items() if k in plan.predicted_end_s}
    nvcc = sorted((k for k in known if k in plan.nvcc), key=lambda k: known[k])[-LATEST_UNITS:]
    cpp = [k for k in known if k not in plan.nvcc]
    if nvcc:
        scale, source = _ratio(plan, known, nvcc), "nvcc units"
    elif cpp:
        scale, source = CPP_SCALE * _ratio(plan, known, cpp), "g++ units"
    else:
        scale, source = PRIOR_SCALE, "prior"
    waiting = [end for k, end in plan.predicted_end_s.items() if k not in known]
    floor = since_compile_s / min(waiting) if waiting else 0.0  # the first of them has not ended yet
    return (floor, "still compiling") if floor > scale else (scale, source)


def _ratio(plan: UnitPlan, ended: dict[str, float], keys: list[str]) -> float:
    return sum(ended[k] for k in keys) / max(1e-9, sum(plan.predicted_end_s[k] for k in keys))


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
    return Estimate(max(0.0, scale * plan.last_end_s - elapsed) + TAIL_S, scale, source)


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
