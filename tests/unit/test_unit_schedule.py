"""The unit schedule (who gets the CPU first) on the measured cost table, and the unit runner on real
processes and a real ninja build: niceness and nvcc --threads applied, CPU seconds recorded, the runner's
clock agreeing with the ninja logs'."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolchain.builder import build_timing, parallelism, unit_runner, unit_schedule
from verify.runtime import atomic

COSTS = unit_schedule.load_costs()
EXTENSIONS = {k.split("/", 1)[0] for k in COSTS}
TOP = "scaled_upper_triang_masked_softmax_cuda/scaled_upper_triang_masked_softmax_cuda.o"


def test_the_cost_table_is_apex_core_build() -> None:
    assert len(COSTS) == 37 and len(EXTENSIONS) == 12
    assert sum(c.nvcc for c in COSTS.values()) == 25
    assert max(COSTS, key=lambda k: COSTS[k].cpu_s(5)) == TOP


def _planned(
    costs: dict[str, unit_schedule.UnitCost],
    extensions: set[str],
    n_archs: int,
    cores: int,
    raise_threads: bool = True,
) -> unit_schedule.Schedule:
    """A schedule the table knows the units of (never None)."""
    plan = unit_schedule.schedule(costs, extensions, n_archs, cores, raise_threads=raise_threads)
    assert plan is not None
    return plan


@pytest.mark.parametrize("n_archs", [1, 5])
def test_each_thread_weight_follows_its_units_cost_per_thread_squared(n_archs: int) -> None:
    plan = unit_schedule.schedule(COSTS, EXTENSIONS, n_archs, cores=16)
    assert plan is not None and set(plan.units) == {k for k, c in COSTS.items() if c.nvcc}
    ratios = [
        unit_schedule.NICE_STEP**-nice
        / (COSTS[k].cpu_s(n_archs) / threads) ** unit_schedule.PRIORITY_EXPONENT
        for k, (threads, nice) in plan.units.items()
    ]
    # nice levels are whole numbers: a weight may be off by half a level (1.25 ** 0.5) either way
    assert max(ratios) / min(ratios) <= unit_schedule.NICE_STEP * 1.01
    assert plan.predicted_cpu_s == pytest.approx(sum(c.cpu_s(n_archs) for c in COSTS.values()))
    top = max(plan.units, key=lambda k: COSTS[k].cpu_s(n_archs) / plan.units[k][0])
    assert plan.units[top][1] == 0, "the unit with the most work per thread runs at nice 0"


def test_five_archs_give_the_costliest_units_more_threads_and_one_arch_none() -> None:
    five = _planned(COSTS, EXTENSIONS, 5, cores=16)
    assert five.units[TOP][0] >= 2 and five.units["amp_C/multi_tensor_adam.o"][0] == 1
    # a unit with t threads alone needs cost / t: none may need more than the work bound / the margin
    assert all(
        COSTS[k].cpu_s(5) / t <= five.target_s / unit_schedule.THREAD_MARGIN
        for k, (t, _) in five.units.items()
    )
    assert five.extra_threads == sum(t - 1 for t, _ in five.units.values()) > 0
    one = _planned(COSTS, EXTENSIONS, 1, cores=16)
    assert one.extra_threads == 0 and one.units[TOP] == (1, 0)
    # a 4-core runner's work bound is 4x longer: no unit needs a second thread there
    assert _planned(COSTS, EXTENSIONS, 5, cores=4).extra_threads == 0
    # the slot rule (raise_threads=False) keeps the plan's threads and ranks by niceness only
    assert _planned(COSTS, EXTENSIONS, 5, 16, raise_threads=False).extra_threads == 0


def test_a_build_the_table_does_not_know_gets_no_schedule() -> None:
    assert unit_schedule.schedule(COSTS, {"xentropy_cuda"}, 5, 16) is None
    assert unit_schedule.schedule(COSTS, {"apex_C"}, 5, 16) is None  # only a .cpp unit: nothing to wrap
    assert unit_schedule.schedule({}, EXTENSIONS, 5, 16) is None


def test_the_h200_plan_counts_the_scheduled_threads_in_its_memory() -> None:
    five = _planned(COSTS, EXTENSIONS, 5, cores=16)
    host = parallelism.HostResources(16, None, 125.0, "MemAvailable")
    plan = parallelism.plan(
        host, n_archs=5, n_extensions=12, env={}, scheduled_extra_threads=five.extra_threads
    )
    assert plan.scheduled and (plan.max_jobs, plan.apex_parallel_build, plan.nvcc_threads) == (15, 12, 1)
    assert f"+ {five.extra_threads} scheduled threads" in plan.reason
    # 16 GiB: the units do not all fit, the slot rule applies and the schedule may only rank
    small = parallelism.plan(
        parallelism.HostResources(4, None, 16.0, "--memory-gib"),
        n_archs=5,
        n_extensions=12,
        env={},
        scheduled_extra_threads=five.extra_threads,
    )
    assert not small.scheduled and (small.max_jobs, small.apex_parallel_build, small.nvcc_threads) == (
        4,
        2,
        1,
    )


def schedule_file(tmp_path: Path, units: dict, default: dict | None = None) -> Path:
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps({"default": default or {"threads": None, "nice": 0}, "units": units}))
    return path


PROBE = "import os, sys; print(os.nice(0), os.environ.get('NVCC_APPEND_FLAGS')); sum(range(3 * 10 ** 6))"


def run_runner(
    schedule: Path, times: Path, *cmd: str, env: dict | None = None
) -> subprocess.CompletedProcess:
    """As a bare-metal build runs it: by path, in a Python where the project is not importable (-S: no
    site-packages, so no editable install; no PYTHONPATH), from another folder."""
    plain = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-S", str(unit_schedule.RUNNER), str(schedule), str(times), "--", *cmd],
        capture_output=True,
        text=True,
        env={**plain, **(env or {})},
        cwd=schedule.parent,
        timeout=60,
    )


def test_the_runner_applies_nice_and_threads_and_records_the_cpu(tmp_path: Path) -> None:
    out = "/b/build/temp.linux-x86_64-cpython-311/mlp_cuda/csrc/mlp_cuda.o"
    schedule = schedule_file(tmp_path, {"mlp_cuda/mlp_cuda.o": {"threads": 3, "nice": 4}})
    times = tmp_path / "times.jsonl"
    done = run_runner(
        schedule,
        times,
        sys.executable,
        "-c",
        PROBE,
        "-o",
        out,
        env={"NVCC_APPEND_FLAGS": "-lineinfo --threads 1"},
    )
    assert done.returncode == 0, done.stderr
    base = os.nice(0)
    assert done.stdout.split(None, 1) == [str(base + 4), "-lineinfo --threads 3\n"]
    (record,) = [json.loads(line) for line in times.read_text().splitlines()]
    assert record["key"] == "mlp_cuda/mlp_cuda.o" and record["output"] == out
    assert (record["nice"], record["threads"], record["exit"]) == (4, 3, 0)
    assert 0 < record["cpu_s"] <= record["end_s"] - record["start_s"] + 0.05
    assert record["maxrss_mib"] > 1


def test_an_unknown_unit_gets_the_default_and_a_failure_keeps_its_exit_code(tmp_path: Path) -> None:
    schedule = schedule_file(tmp_path, {}, {"threads": None, "nice": 2})
    times = tmp_path / "times.jsonl"
    done = run_runner(schedule, times, "sh", "-c", "exit 3", "-o", "x/y.o")
    assert done.returncode == 3
    record = json.loads(times.read_text())
    assert (record["key"], record["nice"], record["threads"], record["exit"]) == ("y.o", 2, None, 3)
    assert record["output"] == str(tmp_path / "x/y.o")  # relative to where ninja ran it
    # an unusable schedule never fails the compile: it runs unscheduled and says so
    (tmp_path / "bad.json").write_text("{")
    done = run_runner(
        tmp_path / "bad.json",
        times,
        sys.executable,
        "-c",
        PROBE,
        "-o",
        "z.o",
        env={"NVCC_APPEND_FLAGS": "--threads 2"},
    )
    assert done.returncode == 0 and "runs unscheduled" in done.stderr
    assert done.stdout.split(None, 1)[1] == "--threads 2\n"
    # a schedule past the bound is not read whole: unscheduled too
    (tmp_path / "big.json").write_text(" " * (unit_runner.SCHEDULE_LIMIT + 1) + "{}")
    done = run_runner(tmp_path / "big.json", times, "true", "-o", "w.o")
    assert done.returncode == 0 and "over 1048576 bytes" in done.stderr


def test_the_runner_never_appends_through_a_link_and_the_builder_never_empties_through_one(
    tmp_path: Path,
) -> None:
    """unit-times.jsonl lies in --out, a folder the builder owns: a link planted there (to a file outside) is
    not followed by the runner's append (the unit still compiles, untimed) nor by route_nvcc's fresh file."""
    schedule = schedule_file(tmp_path, {}, {"threads": None, "nice": 0})
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    times = tmp_path / "out" / build_timing.TIMES_NAME
    times.parent.mkdir()
    times.symlink_to(outside)
    done = run_runner(schedule, times, "true", "-o", "x.o")
    assert done.returncode == 0 and "is not timed" in done.stderr
    assert outside.read_text() == "keep"
    plan = unit_schedule.for_build(["amp_C"], 1, 8)
    assert plan is not None
    with pytest.raises(atomic.LinkInOwnedTree, match="symbolic link"):
        unit_schedule.route_nvcc(plan, {}, "nvcc", None, tmp_path, times, user_threads=False)
    assert outside.read_text() == "keep"


@pytest.mark.parametrize(
    "output, key",
    [
        (
            "/s/build/temp.linux-x86_64-cpython-312/amp_C/csrc/multi_tensor_adam.o",
            "amp_C/multi_tensor_adam.o",
        ),
        ("build/temp.linux-x86_64-cpython-312/syncbn/csrc/welford.o", "syncbn/welford.o"),
        ("plain.o", "plain.o"),
    ],
)
def test_a_unit_is_named_by_its_extension_folder_and_object(output: str, key: str) -> None:
    assert unit_runner.unit_key(output) == key


@pytest.mark.skipif(
    shutil.which("ninja") is None or shutil.which("cc") is None, reason="ninja and cc are needed"
)
def test_a_ninja_build_through_the_runner_lines_up_both_clocks_and_bounds_by_cpu(tmp_path: Path) -> None:
    """PYTORCH_NVCC as the builder sets it, in a build.ninja of torch's shape (`nvcc = ...`), with cc inside."""
    build = tmp_path / "build"
    folder = build / "temp.linux-x86_64-cpython-311" / "softmax"
    folder.mkdir(parents=True)
    costs = {
        "softmax/big.o": unit_schedule.UnitCost(5.0, 1.0, True),
        "softmax/small.o": unit_schedule.UnitCost(1.0, 0.2, True),
    }
    plan = _planned(costs, {"softmax"}, n_archs=1, cores=2)
    times = tmp_path / "out" / build_timing.TIMES_NAME
    times.parent.mkdir()
    nvcc = unit_schedule.route_nvcc(plan, {}, "cc", None, tmp_path, times, user_threads=False)
    lines = [f"nvcc = {nvcc}", "rule cu", "  command = sleep $d && $nvcc -c $in -o $out"]
    for name, pause in (("big", 0.6), ("small", 0.1)):
        (folder / f"{name}.c").write_text(f"int {name}(void) {{ return 0; }}\n")
        lines += [f"build {name}.o: cu {name}.c", f"  d = {pause}"]
    (folder / "build.ninja").write_text("\n".join(lines) + "\n")
    started = time.time()
    subprocess.run(["ninja", "-j", "2"], cwd=folder, check=True, capture_output=True)
    stats = {"wall_s": time.time() - started, "started_epoch_s": started, "cpu_s": 0.5, "peak_rss_mb": 50.0}
    timing = build_timing.compile_timing(build, stats, cores=2, threads=1, times_path=times)
    rows = {Path(u["output"]).name: u for u in timing["units"]}
    assert rows["big.o"]["nice"] == 0 and rows["small.o"]["nice"] > 0  # small gets less CPU weight
    assert all(r["cpu_s"] is not None and r["threads"] == 1 for r in rows.values())
    assert timing["runner"]["units_timed"] == 2
    # the runner starts after the sleep but ends with the unit: its end is ninja's end, the same event on two
    # clocks (milliseconds apart on an idle machine; a loaded one delays ninja's note by a few hundred ms,
    # a wrong origin moves it by seconds, as the 83.5 s link of 2026-12-01 did)
    assert timing["runner"]["clock_skew_s"] < 0.5
    # the compile alone takes a few ms of CPU, far less than its 0.6 s wall (the sleep): the chain is the floor
    bound = timing["lower_bound"]
    assert bound["chain_from"] == "its CPU seconds / its nvcc threads" and bound["chain_s"] < 0.5
