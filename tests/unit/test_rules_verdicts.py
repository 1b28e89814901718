"""Verdicts across processes, each rule on both sides: per-rank views merged into one check (a FAIL on one
rank is never outranked), and a foreign GPU process judged idle or working (one busy reading is work; a
process that has exited by the time of judging still counted). The manifest's expected modules reaching the
extensions layer: tests/unit/test_rules_manifest_modules.py."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verify.checks import Check, Status
from verify.distributed.merge import merge
from verify.gpu import device_load
from verify.gpu.device_load import DeviceLoad, GpuProcess, LoadSample

# worst first: the order the merged check must follow whatever the ranks' order
WORST_FIRST = (Status.FAIL, Status.WARN, Status.INFO, Status.PASS, Status.SKIP)


def _view(rank: int, status: Status, summary: str = "", duration: float = 1.0, **details) -> Check:
    return Check(
        "distributed", "all_reduce", status, summary or f"{status.value} on {rank}", details, duration
    )


@pytest.mark.parametrize(("worse", "better"), list(itertools.combinations(WORST_FIRST, 2)))
def test_the_worse_view_speaks_for_the_check_whichever_rank_has_it(worse: Status, better: Status) -> None:
    for views in (
        {0: _view(0, worse), 1: _view(1, better), 2: _view(2, better)},
        {0: _view(0, better), 1: _view(1, better), 2: _view(2, worse)},
    ):
        merged = merge("all_reduce", views, 3)
        (odd,) = [r for r, v in views.items() if v.status is worse]
        assert merged.status is worse
        assert merged.summary == f"rank {odd} {worse.value}: {worse.value} on {odd}"


def test_one_failing_rank_among_many_passing_ones_fails_and_is_named() -> None:
    views = {r: _view(r, Status.PASS, "sum ok", 0.5) for r in range(8)}
    views[5] = _view(5, Status.FAIL, "wrong sum on rank 5", 0.2)
    merged = merge("all_reduce", views, 8)
    assert (merged.status, merged.summary) == (Status.FAIL, "rank 5 FAIL: wrong sum on rank 5")
    assert [r["status"] for r in merged.details["ranks"]] == ["PASS"] * 5 + ["FAIL"] + ["PASS"] * 2
    assert merged.details["world_size"] == 8 and merged.duration_s == 0.5


def test_when_several_ranks_fail_the_first_to_fail_speaks_and_the_others_are_listed() -> None:
    views = {
        0: _view(0, Status.FAIL, "timed out waiting", 4.0),
        1: _view(1, Status.FAIL, "injected fault", 0.25),
        2: _view(2, Status.FAIL, "timed out waiting", 4.0),
    }
    merged = merge("all_reduce", views, 3)
    assert merged.summary == "injected fault (rank 1, the first to fail; ranks 0, 2 FAILed too)"
    tie = merge("x", {3: _view(3, Status.FAIL, "b", 1.0), 2: _view(2, Status.FAIL, "a", 1.0)}, 4)
    assert tie.summary == "a (rank 2, the first to fail; rank 3 FAILed too)"  # equal times: the lower rank
    two = merge("x", {0: _view(0, Status.FAIL, "a", 1.0), 1: _view(1, Status.FAIL, "b", 2.0)}, 2)
    assert two.summary == "a (rank 0, the first to fail; rank 1 FAILed too)"


def test_agreeing_ranks_and_their_figures() -> None:
    same = merge("x", {0: _view(0, Status.PASS, "fine"), 1: _view(1, Status.PASS, "fine")}, 2)
    assert (same.status, same.summary) == (Status.PASS, "fine (all 2 ranks)")
    skipped = merge("x", {0: _view(0, Status.SKIP, "no nccl"), 1: _view(1, Status.SKIP, "no nccl")}, 2)
    assert skipped.status is Status.SKIP
    figures = {"busbw_gbs": 310.5}
    two = {0: _view(0, Status.INFO, "310 GB/s", 2.5, figures=figures), 1: _view(1, Status.PASS, "ok", 3.5)}
    shown = merge("bandwidth", two, 2)
    assert shown.status is Status.INFO and shown.details["figures"] == figures and shown.duration_s == 3.5
    assert shown.summary == "rank 0 INFO: 310 GB/s"
    warned = merge("x", {0: _view(0, Status.WARN, "w"), 1: _view(1, Status.WARN, "w")}, 2)
    assert warned.summary == "w (all 2 ranks)"  # several ranks alike, not a FAIL: no "first to fail"
    assert merge("x", {0: _view(0, Status.PASS, "a")}, 1).summary == "a (all 1 ranks)"
    assert [r["duration_s"] for r in shown.details["ranks"]] == [2.5, 3.5]


def test_several_ranks_alike_below_fail_speak_through_the_lowest_rank_and_are_all_named() -> None:
    views = {
        0: _view(0, Status.WARN, "slow link 0-1", 3.0),
        1: _view(1, Status.PASS, "ok", 0.5),
        2: _view(2, Status.WARN, "slow link 2-3", 1.0),
        3: _view(3, Status.PASS, "ok", 0.5),
    }
    merged = merge("bandwidth", views, 4)  # not a FAIL: no "first to fail", the lowest rank speaks
    assert (merged.status, merged.summary) == (Status.WARN, "ranks 0, 2 WARN: slow link 0-1")


def test_a_large_world_that_agrees_is_summed_up_as_all_ranks() -> None:
    views = {r: _view(r, Status.PASS, "fine", 1.23456) for r in range(300)}
    merged = merge("all_reduce", views, 300)
    assert merged.summary == "fine (all 300 ranks)"
    assert {r["duration_s"] for r in merged.details["ranks"]} == {1.2346}


# --- the device-load judge -----------------------------------------------------------------------------------

OWN = GpuProcess(os.getpid(), 900, "python")  # verify's own process, seen in every sample


def _judge(*samples: LoadSample) -> DeviceLoad:
    return DeviceLoad(True, "nvidia-smi, GPU 0", samples, (os.getpid(),))


def _around(other: GpuProcess | None, *during: GpuProcess | None, before: int = 0, after: int = 0):
    seen = lambda p: (OWN, p) if p else (OWN,)  # noqa: E731
    return (
        LoadSample("before", seen(other), before, 1980),
        *(LoadSample("during", seen(p), 99, 1980) for p in during),
        LoadSample("after", seen(other), after, 1980),
    )


def _other(sm_pct: int | None, pid: int = 1, used_mib: int | None = 512) -> GpuProcess:
    return GpuProcess(pid, used_mib, "/usr/bin/python3", sm_pct)


def test_one_busy_reading_among_idle_ones_is_work() -> None:
    quiet = _other(0)
    load = _judge(*_around(quiet, quiet, _other(device_load.BUSY_UTILIZATION_PCT), quiet))
    (reason,) = load.reasons()
    assert f"its own SM utilization {device_load.BUSY_UTILIZATION_PCT}% during timing" in reason
    assert load.idle_others() == []
    below = _judge(*_around(quiet, quiet, _other(device_load.BUSY_UTILIZATION_PCT - 1), quiet))
    assert below.reasons() == [] and len(below.idle_others()) == 1
    assert "9% at most in 5 samples" in below.idle_others()[0]


def test_a_process_that_did_work_and_has_exited_still_counts() -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(gone.stdout)
    assert not Path(f"/proc/{pid}").exists()  # exited before the judge looks
    worked = _judge(*_around(None, _other(80, pid=pid), None))
    (reason,) = worked.reasons()
    assert f"pid {pid} python3" in reason and "working: its own SM utilization 80%" in reason
    grew = _judge(*_around(None, _other(None, pid=pid, used_mib=100), _other(None, pid=pid, used_mib=900)))
    assert "its memory changed (100-900 MiB)" in (grew.shared_reason() or "")


def test_without_per_process_figures_a_process_counts_unless_there_throughout_on_an_idle_gpu() -> None:
    held = _other(None)
    assert _judge(*_around(held, held)).reasons() == []
    only_before = (LoadSample("before", (OWN, held), 0, 1980), LoadSample("after", (OWN,), 0, 1980))
    assert "not there throughout" in (_judge(*only_before).shared_reason() or "")
    busy_before = _judge(*_around(held, held, before=device_load.BUSY_UTILIZATION_PCT))
    assert len(busy_before.reasons()) == 2
    no_reading = _judge(
        LoadSample("before", (OWN, held), None, None), LoadSample("after", (OWN, held), None, None)
    )
    assert "not there throughout with the GPU idle" in (no_reading.shared_reason() or "")
    idle_at_threshold = _judge(*_around(held, held, after=device_load.BUSY_UTILIZATION_PCT - 1))
    assert idle_at_threshold.reasons() == []


def test_utilization_is_judged_only_outside_timing() -> None:
    at = device_load.BUSY_UTILIZATION_PCT
    assert _judge(*_around(None, None, before=at - 1, after=at - 1)).reasons() == []
    (after,) = _judge(*_around(None, None, after=at)).reasons()
    assert after.startswith(f"GPU utilization {at}% after timing")
    during_only = _judge(LoadSample("during", (OWN,), 100, 1980))
    assert during_only.reasons() == [] and during_only.shared_reason() is None


def test_in_another_pid_namespace_exactly_one_unknown_process_is_left_to_verify() -> None:
    far = [GpuProcess(4_000_000 + i, 900, "python") for i in range(3)]  # no such pids here
    alone = DeviceLoad(True, "nvidia-smi", (LoadSample("during", (far[0],), 99, 1980),), (os.getpid(),))
    assert alone.reasons() == []
    two = DeviceLoad(True, "nvidia-smi", (LoadSample("during", tuple(far[:2]), 99, 1980),), (os.getpid(),))
    assert len(two.reasons()) == 1 and "pid 4000001" in two.reasons()[0]
    three = DeviceLoad(True, "nvidia-smi", (LoadSample("during", tuple(far), 99, 1980),), (os.getpid(),))
    assert len(three.reasons()) == 2
    # verify's own worker seen by its pid: every unknown pid is another's
    seen = DeviceLoad(True, "nvidia-smi", (LoadSample("during", (OWN, far[0]), 99, 1980),), (os.getpid(),))
    assert len(seen.reasons()) == 1


def test_nothing_is_judged_when_nothing_was_observed() -> None:
    load = DeviceLoad(False, "nvidia-smi not found", _around(_other(90), _other(90), before=100))
    assert load.reasons() == [] and load.idle_others() == [] and load.shared_reason() is None
    assert load.summary().startswith("not observed (nvidia-smi not found)")
