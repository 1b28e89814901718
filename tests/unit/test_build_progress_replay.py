"""The progress lines replayed on recorded cold builds: five on an H200 (five archs, 2026-12-03: the unit
schedule and the plain plan, two of each plus one more schedule run) and two on the shared 2-core machine
(sm_90, one extension at a time: build-progress-2core/README.md). Every estimate after the first minute is
within 0.5-2x of the real time left to the command's end, and units done/total only grow and end at N/N
(at the last line of the 2-core build that was cut at 32/37).

Fixtures (tests/fixtures/build-progress-*/*.console.txt): the recorded consoles trimmed to the `[n/N]` and
`building '...' extension` lines with their seconds since the command started; the first line is a JSON
header with the plan, the whole command's wall and when the progress reporter started (and, for a cut
log, recorded_until_s). The clock is injected: the replay feeds each line at its recorded second and ticks
every 30 s from the reporter's start to pip's end (or the cut), as the builder does. No sleeping.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from toolchain.builder import build_progress, unit_schedule

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# the H200 builds of 2026-12-03, then the 2-core builds (build-progress-2core/README.md)
BUILDS = sorted(
    f"{folder}/{p.name.split('.')[0]}"
    for folder in ("build-progress-2026-12-03", "build-progress-2core")
    for p in (FIXTURES / folder).glob("*.console.txt")
)
FIRST_MINUTE_S = 60.0


@dataclasses.dataclass(frozen=True)
class Tick:
    at_s: float
    done: int
    total: int
    left_s: float
    real_left_s: float

    @property
    def ratio(self) -> float:
        return self.left_s / self.real_left_s


def _load(build: str) -> tuple[dict, list[tuple[float, str]]]:
    head, *rest = (FIXTURES / f"{build}.console.txt").read_text().splitlines()
    lines = []
    for line in rest:
        seconds, text = re.match(r"^\s*([\d.]+)\s(.*)$", line).groups()  # type: ignore[union-attr]
        lines.append((float(seconds), text))
    return json.loads(head.removeprefix("# ")), lines


def _plan(header: dict) -> build_progress.UnitPlan | None:
    schedule = None
    if header["plan"] == "schedule":
        units = {k: (int(t), int(n)) for k, (t, n) in header["schedule"].items()}
        default = tuple(header["schedule_default"])
        schedule = unit_schedule.Schedule(units, (int(default[0]), int(default[1])), 0.0, 0.0, 16, "replay")
    return build_progress.UnitPlan.of(
        unit_schedule.load_costs(),
        list(header["extensions"]),
        len(header["archs"].split(";")),
        schedule,
        bulk_threads=header["nvcc_threads"],
        cores=header["cores"],
        at_once=header["max_jobs"],
        extensions_at_once=header["apex_parallel_build"],
    )


def replay(build: str) -> tuple[list[Tick], build_progress.Reporter]:
    header, lines = _load(build)
    now = [0.0]
    reporter = build_progress.Reporter(
        _plan(header), lambda _: None, started_monotonic_s=0.0, clock=lambda: now[0]
    )
    ticks, at = [], header["progress_started_s"] + build_progress.INTERVAL_S
    pending = list(lines)
    # a cut log (recorded_until_s) is replayed to its last line only
    while at < min(header["pip_ended_s"], header.get("recorded_until_s", math.inf)):
        while pending and pending[0][0] <= at:
            now[0], text = pending.pop(0)
            reporter.feed(text)
        now[0] = at
        shot = reporter.snapshot()
        assert shot.left is not None
        wall = header["whole_command_wall_s"]
        ticks.append(Tick(at, shot.count.done, shot.count.total, shot.left.left_s, wall - at))
        at += build_progress.INTERVAL_S
    for now[0], text in pending:
        reporter.feed(text)
    return ticks, reporter


def violations(ticks: list[Tick]) -> list[str]:
    return [
        f"at {t.at_s:.0f} s: about {t.left_s:.0f} s left, really {t.real_left_s:.0f} s ({t.ratio:.2f}x)"
        for t in ticks
        if t.at_s >= FIRST_MINUTE_S and not 0.5 <= t.ratio <= 2.0
    ]


@pytest.mark.parametrize("build", BUILDS)
def test_every_estimate_after_the_first_minute_is_within_half_and_twice_the_time_left(build: str) -> None:
    ticks, _ = replay(build)
    assert len([t for t in ticks if t.at_s >= FIRST_MINUTE_S]) >= 3, ticks
    assert violations(ticks) == [], build


@pytest.mark.parametrize("build", BUILDS)
def test_units_done_and_total_only_grow_and_end_at_n_of_n(build: str) -> None:
    ticks, reporter = replay(build)
    pairs = [(t.done, t.total) for t in ticks]
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(pairs, pairs[1:], strict=False)), pairs
    assert all(done <= total for done, total in pairs), pairs
    end = reporter.tally.count()
    if "recorded_until_s" in _load(build)[0]:  # the cut build
        assert (end.done, end.total, end.uncounted) == (32, 37, ()) and not reporter.tally.all_done()
    else:
        assert (end.done, end.total, end.uncounted) == (37, 37, ()) and reporter.tally.all_done()
    assert ticks[0].total == 37  # extensions that had not printed yet count with the table's units


def test_the_replay_fails_an_estimator_that_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: the estimator before this one (time so far x predicted cost left / predicted
    cost done) said "about 19m04s left" with ~70 s left; it fails on every recorded build."""
    costs = {k: c.cpu_s(5) for k, c in unit_schedule.load_costs().items()}

    def time_so_far_x_cost_left(plan, ended, since_compile_s, since_last_unit_s, all_done):  # noqa: ANN001
        done = sum(costs[k] for k in ended if k in costs)
        left = sum(c for k, c in costs.items() if k not in ended)
        so_far = since_compile_s or 0.0
        return build_progress.Estimate(so_far * left / done if done else 1e6, 1.0, "old")

    monkeypatch.setattr(build_progress, "estimate", time_so_far_x_cost_left)
    failed = {build: violations(replay(build)[0]) for build in BUILDS}
    assert all(failed.values()), failed
    monkeypatch.undo()
    monkeypatch.setattr(build_progress, "PRIOR_SCALE", 3.0)  # a broken constant fails too
    assert any(violations(replay(build)[0]) for build in BUILDS)
