"""Build parallelism from this machine's real cores and memory, and the override order."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from toolchain.builder import parallelism
from toolchain.builder.process_tree import PeakSampler, tree_rss_bytes


def test_host_resources_are_read_from_this_machine() -> None:
    res = parallelism.host_resources()
    assert res.cpus_affinity == len(os.sched_getaffinity(0))
    assert 1 <= res.cores <= res.cpus_affinity
    assert 0 < res.mem_available_gib < 1 << 20
    assert res.mem_source in ("MemAvailable", "cgroup limit")
    quota = parallelism.cgroup_cpu_quota()
    assert quota is None or quota > 0


def expected_units(plan: parallelism.Plan) -> int:
    """The concurrency model the rule sizes for: MAX_JOBS for the big extension plus ~TYPICAL files for
    each other extension built beside it (not the product: most extensions have 1-3 files)."""
    return min(
        plan.max_jobs * plan.apex_parallel_build,
        plan.max_jobs + (plan.apex_parallel_build - 1) * parallelism.TYPICAL_FILES_PER_EXTENSION,
    )


def modelled_peak(plan: parallelism.Plan) -> float:
    """GiB by the documented facts: host part + threads x device part, for every unit in flight."""
    return expected_units(plan) * (
        parallelism.GIB_PER_UNIT_HOST + plan.nvcc_threads * parallelism.GIB_PER_NVCC_THREAD
    )


def host(cores: int, mem_gib: float) -> parallelism.HostResources:
    return parallelism.HostResources(
        cpus_affinity=cores, cpu_quota=None, mem_available_gib=mem_gib, mem_source="MemAvailable"
    )


@pytest.mark.parametrize("cores", [2, 4, 16, 64])
@pytest.mark.parametrize("mem_gib", [500, 125, 16, 2])  # plenty, the H200 host, a CI runner, almost none
@pytest.mark.parametrize("n_archs", [1, 3, 5])
def test_default_plan_fits_the_memory_and_the_cores(cores: int, mem_gib: float, n_archs: int) -> None:
    res = host(cores, mem_gib)
    plan = parallelism.plan(res, n_archs=n_archs, n_extensions=12, env={})
    budget = mem_gib * parallelism.MEMORY_FRACTION
    assert 1 <= plan.nvcc_threads <= min(n_archs, parallelism.MAX_NVCC_THREADS)
    assert (
        1
        <= expected_units(plan)
        <= max(cores * parallelism.COMPILES_PER_CORE, cores * parallelism.MAX_UNITS_PER_CORE)
    )
    # warned only where not even one unit fits; else the modelled peak is inside the budget
    assert ("WARNING" in plan.reason) == (modelled_peak(plan) > mem_gib)
    if budget >= parallelism.GIB_PER_UNIT_HOST + parallelism.GIB_PER_NVCC_THREAD:
        assert modelled_peak(plan) <= budget
        # one more nvcc thread would not have fitted, unless there was no arch left to split
        more = dataclasses.replace(plan, nvcc_threads=plan.nvcc_threads + 1)
        assert plan.nvcc_threads == min(n_archs, parallelism.MAX_NVCC_THREADS) or modelled_peak(more) > budget


def test_the_h200_host_starts_every_unit_at_once_with_threads_from_the_archs() -> None:
    """16 cores / 125 GiB (reports/h200-2026-11-30): all 12 extensions at once, amp_C's 15 units at once."""
    one = parallelism.plan(host(16, 125), n_archs=1, n_extensions=12, env={})
    assert (one.max_jobs, one.apex_parallel_build, one.nvcc_threads) == (15, 12, 1)
    five = parallelism.plan(host(16, 125), n_archs=5, n_extensions=12, env={})
    # 37 units x (1.0 + 2 x 0.75) GiB = 92.5 GiB fits 100 GiB (80% of 125); 3 threads (120 GiB) would not
    assert (five.max_jobs, five.apex_parallel_build, five.nvcc_threads) == (15, 12, 2)
    assert modelled_peak(five) <= 0.8 * 125 and "every extension at once" in five.reason
    # a measured per-thread figure replaces the constant, and the record says where it came from
    lean = parallelism.plan(
        host(16, 125),
        n_archs=5,
        n_extensions=12,
        env={},
        gib_per_thread=0.4,
        gib_from="per-thread memory measured by the last build",
    )
    assert lean.nvcc_threads == 4 and "measured by the last build" in lean.reason


def test_a_4_core_16_gib_runner_builds_in_waves_inside_its_memory() -> None:
    """What `taskset -c 0-3 build.py wheel --memory-gib 16` sizes for on any host."""
    for n_archs in (1, 5):
        plan = parallelism.plan(host(4, 16), n_archs=n_archs, n_extensions=12, env={})
        # 7 units of 1.75 GiB fit 12.8 GiB, 8 would not; 4 ninja jobs + one more extension beside it
        assert (plan.max_jobs, plan.apex_parallel_build, plan.nvcc_threads) == (4, 2, 1)
        assert modelled_peak(plan) <= 0.8 * 16 and "every extension at once" not in plan.reason


def test_default_plan_on_this_machine() -> None:
    res = parallelism.host_resources()
    plan = parallelism.plan(res, n_archs=1, n_extensions=12, env={})
    assert modelled_peak(plan) <= res.mem_available_gib or "WARNING" in plan.reason
    assert plan.nvcc_threads == 1, "one arch: nvcc --threads has nothing to split"
    assert "cores" in plan.reason and "GiB available" in plan.reason


def test_memory_limits_before_cores() -> None:
    plan = parallelism.plan(host(64, 16), n_archs=1, n_extensions=12, env={})
    assert expected_units(plan) == 7  # floor(16 * 0.8 / 1.75), not 64 x 2


def test_cgroup_quota_caps_cores() -> None:
    res = parallelism.HostResources(
        cpus_affinity=64, cpu_quota=2.5, mem_available_gib=500, mem_source="MemAvailable"
    )
    assert res.cores == 2


def test_overrides_win_in_order() -> None:
    res = parallelism.HostResources(
        cpus_affinity=16, cpu_quota=None, mem_available_gib=500, mem_source="MemAvailable"
    )
    two = parallelism.plan(res, n_archs=1, n_extensions=12, jobs=2, env={})
    assert two.max_jobs * two.apex_parallel_build * two.nvcc_threads == 2
    env = {"MAX_JOBS": "3", "APEX_PARALLEL_BUILD": "5", "NVCC_APPEND_FLAGS": "-lineinfo --threads 2"}
    plan = parallelism.plan(res, n_archs=1, n_extensions=12, env=env)
    assert (plan.max_jobs, plan.apex_parallel_build, plan.nvcc_threads) == (3, 5, 2)
    assert parallelism.plan(res, n_archs=1, n_extensions=12, nvcc_threads=4, env=env).nvcc_threads == 4
    assert plan.env(env)["NVCC_APPEND_FLAGS"] == "-lineinfo --threads 2", "other nvcc flags are kept"
    only_jobs = parallelism.plan(res, n_archs=1, n_extensions=12, env={"MAX_JOBS": "16"})
    assert (only_jobs.max_jobs, only_jobs.apex_parallel_build) == (16, 2)


def test_bad_environment_value_is_named() -> None:
    res = parallelism.host_resources()
    with pytest.raises(ValueError, match="MAX_JOBS='many'"):
        parallelism.plan(res, n_archs=1, n_extensions=1, env={"MAX_JOBS": "many"})


def test_overcommit_by_override_is_warned() -> None:
    res = parallelism.HostResources(
        cpus_affinity=2, cpu_quota=None, mem_available_gib=4, mem_source="MemAvailable"
    )
    plan = parallelism.plan(
        res, n_archs=1, n_extensions=12, env={"MAX_JOBS": "8", "APEX_PARALLEL_BUILD": "4"}
    )
    assert "WARNING" in plan.reason


def test_peak_sampler_sees_a_real_child_tree() -> None:
    assert tree_rss_bytes(os.getpid()) > 10 << 20
    code = "import time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.5)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    with PeakSampler(proc.pid, interval=0.1) as sampler:
        proc.wait()
    assert sampler.peak_bytes > 250 << 20


def test_a_max_jobs_from_the_environment_still_fits_the_rest_into_memory() -> None:
    """MAX_JOBS=2 on 16 cores with 10 GiB: 3 compiles fit, so one extension at a time (32 slots by cores alone
    would run 10 extensions x 2 jobs, 20 compiles, 50 GiB)."""
    plan = parallelism.plan(host(16, 10), n_archs=1, n_extensions=10, env={"MAX_JOBS": "2"})
    assert (plan.max_jobs, plan.apex_parallel_build) == (2, 1), plan.reason
    assert "3 concurrent compiles (memory limit)" in plan.reason
    roomy = parallelism.plan(host(16, 500), n_archs=1, n_extensions=10, env={"MAX_JOBS": "2"})
    assert roomy.apex_parallel_build == 10  # the same request with memory to spare: cores decide


def test_one_job_from_the_environment_is_a_valid_choice() -> None:
    plan = parallelism.plan(
        host(16, 500), n_archs=1, n_extensions=12, env={"MAX_JOBS": "1", "APEX_PARALLEL_BUILD": "1"}
    )
    assert (plan.max_jobs, plan.apex_parallel_build) == (1, 1)


def test_apex_parallel_build_alone_divides_the_slots_into_ninja_jobs() -> None:
    # 16 cores x 2 = 32 compile slots at one nvcc thread: 4 extensions side by side get 8 jobs each
    plan = parallelism.plan(host(16, 500), n_archs=1, n_extensions=12, env={"APEX_PARALLEL_BUILD": "4"})
    assert (plan.max_jobs, plan.apex_parallel_build, plan.nvcc_threads) == (8, 4, 1)
    assert plan.env({})["MAX_JOBS"] == "8"  # a whole number, as setup.py and ninja read it
    # MAX_JOBS above the slots: still one extension at a time, never zero
    wide = parallelism.plan(host(16, 500), n_archs=1, n_extensions=12, env={"MAX_JOBS": "64"})
    assert (wide.max_jobs, wide.apex_parallel_build) == (64, 1)


def test_an_override_on_a_host_of_little_memory_gets_one_compile_and_says_which_limit() -> None:
    small = parallelism.plan(host(16, 1.0), n_archs=1, n_extensions=12, env={"APEX_PARALLEL_BUILD": "1"})
    assert small.max_jobs == 1
    assert "1 compiles of ~2.5 GiB fit in 80%; 1 concurrent compiles (memory limit)" in small.reason
    roomy = parallelism.plan(host(4, 500), n_archs=1, n_extensions=12, env={"APEX_PARALLEL_BUILD": "2"})
    assert "8 concurrent compiles (2 per core limit)" in roomy.reason
    default = parallelism.plan(host(4, 500), n_archs=1, n_extensions=12, env={})
    assert "per unit 1.0 GiB + 0.75 GiB per nvcc thread must fit in 80%" in default.reason


def test_the_reason_gives_the_modelled_peak_it_sized_for() -> None:
    # 4 ninja jobs x 6 extensions side by side: 4 + 5 x ~2 files = 14 units, not 24, at 1 + 0.75 GiB each
    waves = parallelism.plan(host(8, 32), n_archs=3, n_extensions=12, env={})
    assert (waves.max_jobs, waves.apex_parallel_build) == (4, 6)
    assert "modelled peak 24 GiB (14 units x 1.75 GiB)" in waves.reason
    # every unit in flight, and 8 threads more for the costliest: 37 x 1.75 + 8 x 0.75 GiB
    scheduled = parallelism.plan(host(64, 125), n_archs=3, n_extensions=12, env={}, scheduled_extra_threads=8)
    assert "modelled peak 71 GiB (37 units x 1.75 GiB + 8 scheduled threads)" in scheduled.reason


def test_an_override_past_the_memory_is_warned_with_its_peak() -> None:
    # 4 compiles x 1 thread x 2.5 GiB each: 10 GiB, more than the 8 available
    plan = parallelism.plan(
        host(4, 8), n_archs=1, n_extensions=12, env={"MAX_JOBS": "4", "APEX_PARALLEL_BUILD": "1"}
    )
    assert "WARNING: about 10 GiB may be needed at peak, more than is available" in plan.reason
