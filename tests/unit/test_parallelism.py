"""Build parallelism from this machine's real cores and memory, and the override order."""

from __future__ import annotations

import math
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


def expected_compiles(plan: parallelism.Plan) -> int:
    """The concurrency model the rule sizes for: MAX_JOBS for the big extension plus ~TYPICAL files for
    each other extension built beside it (not the product: most extensions have 1-3 files), x nvcc threads."""
    per_thread = min(plan.max_jobs * plan.apex_parallel_build,
                     plan.max_jobs + (plan.apex_parallel_build - 1) * parallelism.TYPICAL_FILES_PER_EXTENSION)
    return per_thread * plan.nvcc_threads


def slots_of(res: parallelism.HostResources) -> tuple[int, int]:
    """(concurrent compile slots, compiles that fit in memory) for a host, by the documented facts."""
    fits = max(1, math.floor(res.mem_available_gib * parallelism.MEMORY_FRACTION / parallelism.GIB_PER_COMPILE))
    return min(res.cores * parallelism.COMPILES_PER_CORE, fits), fits


@pytest.mark.parametrize("cores", [2, 4, 16, 64])
@pytest.mark.parametrize("mem_gib", [500, 16, 2])  # plenty, scarce, almost none
@pytest.mark.parametrize("n_archs", [1, 3])
def test_default_plan_fits_the_slots_and_memory(cores: int, mem_gib: float, n_archs: int) -> None:
    res = parallelism.HostResources(cpus_affinity=cores, cpu_quota=None, mem_available_gib=mem_gib,
                                    mem_source="MemAvailable")
    plan = parallelism.plan(res, n_archs=n_archs, n_extensions=12, env={})
    slots, fits = slots_of(res)
    assert 1 <= expected_compiles(plan) <= slots
    assert expected_compiles(plan) <= fits
    assert plan.nvcc_threads == max(1, min(n_archs, parallelism.MAX_NVCC_THREADS, slots))
    # warned only where not even one compile fits
    assert ("WARNING" in plan.reason) == (mem_gib < parallelism.GIB_PER_COMPILE)


def test_default_plan_on_this_machine() -> None:
    res = parallelism.host_resources()
    plan = parallelism.plan(res, n_archs=1, n_extensions=12, env={})
    assert expected_compiles(plan) <= slots_of(res)[0]
    assert plan.nvcc_threads == 1, "one arch: nvcc --threads has nothing to split"
    assert "cores" in plan.reason and "GiB available" in plan.reason


def test_memory_limits_before_cores() -> None:
    small = parallelism.HostResources(cpus_affinity=64, cpu_quota=None, mem_available_gib=16, mem_source="MemAvailable")
    plan = parallelism.plan(small, n_archs=1, n_extensions=12, env={})
    assert plan.max_jobs * plan.apex_parallel_build == 5  # floor(16 * 0.8 / 2.5)
    assert "memory limit" in plan.reason


def test_big_host_builds_extensions_side_by_side() -> None:
    big = parallelism.HostResources(cpus_affinity=16, cpu_quota=None, mem_available_gib=500, mem_source="MemAvailable")
    plan = parallelism.plan(big, n_archs=1, n_extensions=12, env={})
    # 8 jobs for amp_C, the other 24 slots at ~2 files per extension: all 12 extensions side by side
    assert (plan.max_jobs, plan.apex_parallel_build, plan.nvcc_threads) == (8, 12, 1)
    three = parallelism.plan(big, n_archs=3, n_extensions=12, env={})
    assert three.nvcc_threads == 3


def test_cgroup_quota_caps_cores() -> None:
    res = parallelism.HostResources(cpus_affinity=64, cpu_quota=2.5, mem_available_gib=500, mem_source="MemAvailable")
    assert res.cores == 2


def test_overrides_win_in_order() -> None:
    res = parallelism.HostResources(cpus_affinity=16, cpu_quota=None, mem_available_gib=500, mem_source="MemAvailable")
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
    res = parallelism.HostResources(cpus_affinity=2, cpu_quota=None, mem_available_gib=4, mem_source="MemAvailable")
    plan = parallelism.plan(res, n_archs=1, n_extensions=12, env={"MAX_JOBS": "8", "APEX_PARALLEL_BUILD": "4"})
    assert "WARNING" in plan.reason


def test_peak_sampler_sees_a_real_child_tree() -> None:
    assert tree_rss_bytes(os.getpid()) > 10 << 20
    code = "import time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.5)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    with PeakSampler(proc.pid, interval=0.1) as sampler:
        proc.wait()
    assert sampler.peak_bytes > 250 << 20
