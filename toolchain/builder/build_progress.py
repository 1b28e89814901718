"""Progress lines while Apex compiles: a cold build runs for many minutes with no output of its own (ninja
prints a unit only when it ends), so at least every INTERVAL_S the builder prints units done of total,
the slowest unit in flight, and an estimate of what is left:

    [apex-builder] progress: 41/112 nvcc units done, 6 in flight (slowest: amp_C/multi_tensor_adam.o, 212 s); 9m30s so far, about 14m left

Where the figures come from: unit_runner.py appends each unit's start to STARTS (TIMES + ".starts") and
its end to TIMES; the total and the predicted cost per unit are the schedule's (unit_schedule.py, costs
from toolchain/data/apex_unit_costs.json). The estimate is time so far x predicted cost left / predicted
cost done: costs, not counts, since the costliest units run first. Stdlib only; the clock and the wait
are injected (unit tests drive them).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

INTERVAL_S = 30.0
STARTS_SUFFIX = ".starts"


def starts_path(times_path: Path) -> Path:
    return times_path.with_name(times_path.name + STARTS_SUFFIX)


def _records(path: Path) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being appended right now
        if isinstance(record, dict) and "key" in record:
            found.append(record)
    return found


@dataclasses.dataclass(frozen=True)
class Snapshot:
    done: int
    total: int
    in_flight: int
    slowest: str | None  # the unit in flight the longest
    slowest_s: float
    elapsed_s: float
    left_s: float | None  # None until a unit with a known cost has ended

    def line(self) -> str:
        slowest = f" (slowest: {self.slowest}, {self.slowest_s:.0f} s)" if self.slowest else ""
        left = (
            f", about {_minutes(self.left_s)} left"
            if self.left_s is not None
            else ", estimate after the first unit"
        )
        return (
            f"progress: {self.done}/{self.total} nvcc units done, {self.in_flight} in flight{slowest}; "
            f"{_minutes(self.elapsed_s)} so far{left}"
        )


def _minutes(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


def snapshot(costs: dict[str, float], times_path: Path, started_at: float, now: float) -> Snapshot:
    """costs: {unit key: predicted CPU seconds} for the units of this build (the schedule's)."""
    ended = {str(r["key"]) for r in _records(times_path)}
    begun = {str(r["key"]): float(r.get("start_s", now)) for r in _records(starts_path(times_path))}
    flying = {k: now - start for k, start in begun.items() if k not in ended}
    slowest = max(flying, key=lambda k: flying[k]) if flying else None
    total = len(set(costs) | ended | set(begun))
    done_cost = sum(costs.get(k, 0.0) for k in ended)
    left_cost = sum(c for k, c in costs.items() if k not in ended)
    elapsed = now - started_at
    left = elapsed * left_cost / done_cost if done_cost > 0 else None
    return Snapshot(
        done=len(ended),
        total=total,
        in_flight=len(flying),
        slowest=slowest,
        slowest_s=flying.get(slowest, 0.0) if slowest else 0.0,
        elapsed_s=elapsed,
        left_s=left,
    )


class Reporter:
    """Prints a snapshot every `interval_s` from a thread until stopped (a context manager)."""

    def __init__(
        self,
        costs: dict[str, float],
        times_path: Path,
        say: Callable[[str], None],
        *,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.time,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        self._costs, self._times, self._say, self._interval, self._clock = (
            costs,
            times_path,
            say,
            interval_s,
            clock,
        )
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait  # returns True when stopped
        self._thread = threading.Thread(target=self._run, name="apex-build-progress", daemon=True)
        self._started = 0.0

    def tick(self) -> str:
        line = snapshot(self._costs, self._times, self._started, self._clock()).line()
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
        self._started = self._clock()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
