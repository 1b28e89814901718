"""When each compile unit would finish if its predicted CPU seconds were right: a fluid model of how the
kernel shares the cores among the units in flight, for the progress lines' estimate (build_progress.py).

The model (reports/h200-2026-12-01-buildspeed-i16/simulate_schedule.py, within 5% of the measured builds
there; here exact between events instead of 0.25 s steps): a unit runs one thread during its host phases
(half of host_s before the device work, half after) and its nvcc threads in between; the cores go to the
runnable threads by CFS weight (1.25 ** -nice per thread), no thread above one core (water-filling).
Queueing follows the plan: at most `per_extension` units of one extension at once (ninja -j MAX_JOBS) and
`extensions_at_once` extensions (APEX_PARALLEL_BUILD), opened in `order` (setup.py's: the order of its
`building` lines), then any others costliest first; each extension's units costliest first.
Every finish time scales with the units' costs, so a build running s times slower than predicted ends
each unit at s x its time here: build_progress.py measures s from the units that have finished.
Stdlib only: runs inside the build image (Python 3.10).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

_EPS = 1e-9


@dataclasses.dataclass(frozen=True)
class SimUnit:
    key: str  # extension/object, as unit_runner.unit_key names it
    cost_s: float  # predicted CPU seconds
    host_s: float  # of which single-threaded (the whole cost for a g++ unit)
    threads: int  # nvcc --threads during the device phase
    weight: float  # CFS weight per thread (1.25 ** -nice)

    @property
    def extension(self) -> str:
        return self.key.split("/", 1)[0]

    def phase_ends(self) -> tuple[float, float, float]:
        half = min(self.host_s, self.cost_s) / 2
        return half, self.cost_s - half, self.cost_s

    def threads_at(self, done_s: float) -> int:
        first, second, _ = self.phase_ends()
        return self.threads if first - _EPS <= done_s < second - _EPS else 1


def _shares(running: list[tuple[SimUnit, int]], cores: float) -> dict[str, float]:
    """CPU seconds per second for each running unit: weighted fair shares, no thread above one core."""
    left, rate = list(running), {}
    while left:
        total = sum(unit.weight * n for unit, n in left)
        capped = [(unit, n) for unit, n in left if cores * unit.weight / total >= 1]
        if not capped:
            rate.update({unit.key: n * cores * unit.weight / total for unit, n in left})
            break
        for unit, n in capped:
            rate[unit.key] = float(n)
            cores -= n
        left = [x for x in left if x not in capped]
    return rate


class _Queue:
    """Which units run: at most `per_extension` of an extension, `extensions_at_once` extensions."""

    def __init__(
        self, units: Sequence[SimUnit], per_extension: int, extensions_at_once: int, order: Sequence[str] = ()
    ) -> None:
        self.waiting: dict[str, list[SimUnit]] = {ext: [] for ext in order}
        for unit in sorted(units, key=lambda u: -u.cost_s):  # costliest first within an extension
            self.waiting.setdefault(unit.extension, []).append(unit)
        self.waiting = {ext: queued for ext, queued in self.waiting.items() if queued}
        self.per_extension, self.extensions_at_once = max(1, per_extension), max(1, extensions_at_once)
        self.open: list[str] = []

    def admit(self, running: dict[str, SimUnit]) -> list[SimUnit]:
        """Close the extensions with nothing left, open the next, and start what fits."""
        for ext in list(self.open):
            if not self.waiting[ext] and all(u.extension != ext for u in running.values()):
                self.open.remove(ext)
                del self.waiting[ext]
        for ext in self.waiting:  # in order of first appearance, while there is room
            if ext not in self.open and len(self.open) < self.extensions_at_once:
                self.open.append(ext)
        started = []
        for ext in self.open:
            room = self.per_extension - sum(1 for u in running.values() if u.extension == ext)
            started += self.waiting[ext][: max(0, room)]
            del self.waiting[ext][: max(0, room)]
        return started


def finish_times(
    units: Sequence[SimUnit],
    cores: int,
    per_extension: int = 10**6,
    extensions_at_once: int = 10**6,
    order: Sequence[str] = (),
) -> dict[str, float]:
    """{unit key: seconds from the first unit's start to its end} under the model above."""
    # no zero-length phase: a unit costs at least 10 ms
    queue = _Queue(
        [dataclasses.replace(u, cost_s=max(u.cost_s, 0.01)) for u in units],
        per_extension,
        extensions_at_once,
        order,
    )
    running: dict[str, SimUnit] = {}
    done: dict[str, float] = {}
    finished: dict[str, float] = {}
    now = 0.0
    for unit in queue.admit(running):
        running[unit.key], done[unit.key] = unit, 0.0
    while running:
        live = [(u, u.threads_at(done[u.key])) for u in running.values()]
        rate = _shares(live, float(max(1, cores)))
        step = min(
            (next(b for b in u.phase_ends() if b > done[u.key] + _EPS) - done[u.key]) / rate[u.key]
            for u, _ in live
        )
        now += step
        for unit, _ in live:
            done[unit.key] += rate[unit.key] * step
            if done[unit.key] >= unit.cost_s - 1e-6:
                finished[unit.key] = now
                del running[unit.key]
        for unit in queue.admit(running):
            running[unit.key], done[unit.key] = unit, 0.0
    return finished
