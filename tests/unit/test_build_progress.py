"""The progress line's parts: ninja's [n/N] lines told apart by extension, the fluid model, the estimate,
the reporter's timing (injected clock and wait), and the command clock the wall is measured on."""

from __future__ import annotations

import pytest

from toolchain.builder import build_progress, command_clock, ninja_status, unit_schedule, unit_simulation

AMP = "/tmp/apex/build/temp.linux-x86_64-cpython-312/amp_C"
NVCC = "  [{n}/{N}] /venv/bin/python3 /t/unit_runner.py /w/s.json /o/t.jsonl -- nvcc -MD -MF {o}.d -c x.cu -o {o} -O3"


def test_a_step_line_names_its_extension_and_unit_and_other_lines_are_not_steps() -> None:
    step = ninja_status.parse_step(NVCC.format(n=3, N=15, o=f"{AMP}/csrc/multi_tensor_adam.o"))
    assert step == ninja_status.NinjaStep(3, 15, "amp_C/multi_tensor_adam.o") and step.extension == "amp_C"
    assert ninja_status.parse_step("  [1/2] g++ -MMD -MF /b/temp.x/syncbn/csrc/syncbn.o.d -c s.cpp") is None
    assert ninja_status.parse_step("  copying apex/mlp.py -> build/lib") is None
    assert ninja_status.parse_step("[0/3] nothing -o /b/temp.x/e/a.o") is None
    assert ninja_status.building_extension("  building 'amp_C' extension") == "amp_C"


def test_the_tally_sums_interleaved_ninjas_and_counts_the_silent_ones_from_the_table() -> None:
    tally = ninja_status.StatusTally({"amp_C": 15, "syncbn": 2}, {"amp_C", "syncbn", "xentropy_cuda"})
    assert tally.count().text() == "0/17 units done (+1 extension(s) not counted yet)"
    tally.feed("  building 'amp_C' extension", 10.0)
    tally.feed("  building 'syncbn' extension", 12.0)
    tally.feed(NVCC.format(n=1, N=15, o=f"{AMP}/a.o"), 50.0)
    tally.feed(NVCC.format(n=1, N=3, o="/b/temp.linux/xentropy_cuda/csrc/x.o"), 60.0)
    tally.feed(NVCC.format(n=2, N=15, o=f"{AMP}/b.o"), 70.0)
    count = tally.count()
    assert (count.done, count.total, count.uncounted) == (3, 20, ())
    assert tally.ended() == {"amp_C/a.o": 50.0, "xentropy_cuda/x.o": 60.0, "amp_C/b.o": 70.0}
    assert tally.compile_started() == 10.0 and not tally.all_done()
    assert tally.started() == ["amp_C", "syncbn"]


def test_the_model_shares_the_cores_by_weight_and_scales_with_the_costs() -> None:
    def unit(key: str, cost: float, nice: int = 0) -> unit_simulation.SimUnit:
        return unit_simulation.SimUnit(key, cost, cost, 1, unit_schedule.NICE_STEP**-nice)

    # two single-threaded units on one core, equal weights: the short one ends at 2 x its cost
    ends = unit_simulation.finish_times([unit("e/a.o", 10.0), unit("e/b.o", 30.0)], cores=1)
    assert ends == pytest.approx({"e/a.o": 20.0, "e/b.o": 40.0})
    # twice the costs: every end twice as late (what the estimate's speed factor relies on)
    double = unit_simulation.finish_times([unit("e/a.o", 20.0), unit("e/b.o", 60.0)], cores=1)
    assert double == pytest.approx({k: 2 * v for k, v in ends.items()})
    # one unit at a time per extension: the second waits for the first
    queued = unit_simulation.finish_times(
        [unit("e/a.o", 10.0), unit("e/b.o", 30.0)], cores=4, per_extension=1
    )
    assert queued == pytest.approx({"e/b.o": 30.0, "e/a.o": 40.0})
    # one extension at a time: they open in the order given, not costliest first
    one_by_one = [unit("big/a.o", 30.0), unit("small/b.o", 10.0)]
    assert unit_simulation.finish_times(one_by_one, cores=2, extensions_at_once=1) == pytest.approx(
        {"big/a.o": 30.0, "small/b.o": 40.0}
    )
    in_order = unit_simulation.finish_times(one_by_one, cores=2, extensions_at_once=1, order=["small"])
    assert in_order == pytest.approx({"small/b.o": 10.0, "big/a.o": 40.0})


def _plan() -> build_progress.UnitPlan:
    costs = {
        "e/a.o": unit_schedule.UnitCost(10.0, 20.0, True),  # 110 CPU s at 5 archs
        "e/f.o": unit_schedule.UnitCost(40.0, 0.0, False),  # g++
    }
    plan = build_progress.UnitPlan.of(costs, {"e"}, 5, None, bulk_threads=2, cores=16)
    assert plan is not None
    return plan


def test_the_estimate_matches_ends_by_rank_and_never_below_what_is_still_compiling() -> None:
    plan = _plan()
    f_nvcc, f_cpp = plan.predicted_end_s["e/a.o"], plan.predicted_end_s["e/f.o"]
    prior = build_progress.estimate(plan, {}, 0.0, None, False)
    assert prior.scale == build_progress.PRIOR_SCALE and prior.scale_from == "prior"
    assert prior.left_s == pytest.approx(build_progress.PRIOR_SCALE * plan.last_end_s + build_progress.TAIL_S)
    cpp = build_progress.estimate(plan, {"e/f.o": f_cpp}, f_cpp, 0.0, False)
    assert cpp.scale == pytest.approx(build_progress.CPP_SCALE) and cpp.scale_from == "g++ units"
    late = build_progress.estimate(plan, {}, 3 * f_cpp, None, False)  # nothing ended at 3x the model
    assert late.scale_from == "still compiling" and late.scale == pytest.approx(3.0)
    # the g++ unit ended where the model has the nvcc unit and the other way round: by rank, on time
    swapped = build_progress.estimate(plan, {"e/a.o": f_cpp}, f_cpp, 0.0, False)
    assert swapped.scale == pytest.approx(1.0) and swapped.scale_from == "units"
    assert swapped.left_s == pytest.approx(plan.last_end_s - f_cpp + build_progress.TAIL_S)
    # long after the latest end, the unit after it has not ended: at least the model's time after it
    overdue = build_progress.estimate(plan, {"e/f.o": f_cpp}, 10 * f_nvcc, 0.0, False)
    assert overdue.left_s == pytest.approx(build_progress.TAIL_S)
    done = build_progress.estimate(plan, {"e/f.o": 1.0, "e/a.o": 2.0}, 2.0, 12.0, True)
    assert done.left_s == pytest.approx(build_progress.TAIL_S / 3)
    assert build_progress.UnitPlan.of({}, {"e"}, 5, None, bulk_threads=1, cores=4) is None


def test_the_plan_opens_the_extensions_in_the_order_the_build_does() -> None:
    """One extension at a time (APEX_PARALLEL_BUILD 1): the model follows the `building` lines; before this,
    it opened the costliest first and waited on a unit the build compiles last (ratios of 20-160x)."""
    costs = {
        "big/a.o": unit_schedule.UnitCost(30.0, 0.0, True),
        "small/b.o": unit_schedule.UnitCost(10.0, 0.0, True),
        "mid/c.o": unit_schedule.UnitCost(20.0, 0.0, True),
    }
    plan = build_progress.UnitPlan.of(
        costs, ["small", "big", "mid"], 1, None, bulk_threads=1, cores=1, extensions_at_once=1
    )
    assert plan is not None and plan.order == ("small", "big", "mid")
    assert plan.predicted_end_s == pytest.approx({"small/b.o": 10.0, "big/a.o": 40.0, "mid/c.o": 60.0})
    assert plan.in_order(["small"]) is plan  # as planned: not modelled again
    moved = plan.in_order(["small", "mid"])
    assert moved.order == ("small", "mid", "big")
    assert moved.predicted_end_s == pytest.approx({"small/b.o": 10.0, "mid/c.o": 30.0, "big/a.o": 60.0})


def test_the_reporter_prints_every_interval_from_the_commands_start_until_stopped() -> None:
    said: list[str] = []
    now = [100.0]
    waits: list[float] = []

    def wait(seconds: float) -> bool:  # the injected wait: three intervals pass, then the build ends
        waits.append(seconds)
        now[0] += seconds
        return len(waits) > 3

    with build_progress.Reporter(
        _plan(), said.append, started_monotonic_s=95.0, clock=lambda: now[0], wait=wait
    ):
        pass
    assert waits == [30.0] * 4 and len(said) == 3
    assert said[-1].startswith("progress: 0/2 units done; 1m35s so far, about ")


def test_the_command_clock_starts_at_the_process_start() -> None:
    ticks = command_clock.os.sysconf("SC_CLK_TCK")
    stat = f"4242 (python3 (x) y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 {int(1000 * ticks)} 0 0"
    clock = command_clock.of_this_process(
        read_stat=lambda: stat, boottime=lambda: 1012.5, monotonic=lambda: 500.0, epoch=lambda: 1.7e9
    )
    assert clock.started_monotonic_s == pytest.approx(487.5) and clock.started_epoch_s == pytest.approx(
        1.7e9 - 12.5
    )
    assert clock.elapsed_s(510.0) == pytest.approx(22.5) and "/proc/self/stat" in clock.source

    def unreadable() -> str:
        raise OSError("no /proc")

    fallback = command_clock.of_this_process(
        read_stat=unreadable, monotonic=lambda: 500.0, epoch=lambda: 1.7e9
    )
    assert fallback.started_monotonic_s == 500.0 and "unreadable" in fallback.source
    real = command_clock.of_this_process()
    assert 0 < real.elapsed_s() < 3600 and "/proc/self/stat" in real.source
