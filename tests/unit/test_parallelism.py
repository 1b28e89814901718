"""Build parallelism from this machine's real cores and memory, and the override order."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from toolchain import parallelism
from toolchain.process_tree import PeakSampler, tree_rss_bytes


def test_host_resources_are_read_from_this_machine() -> None:
    res = parallelism.host_resources()
    assert res.cpus_affinity == len(os.sched_getaffinity(0))
    assert 1 <= res.cores <= res.cpus_affinity
    assert 0 < res.mem_available_gib < 1 << 20
    assert res.mem_source in ("MemAvailable", "cgroup limit")
    quota = parallelism.cgroup_cpu_quota()
    assert quota is None or quota > 0


def test_default_plan_fits_cores_and_memory_of_this_machine() -> None:
    res = parallelism.host_resources()
    plan = parallelism.plan(res, n_archs=1, n_extensions=12, env={})
    concurrent = plan.max_jobs * plan.apex_parallel_build * plan.nvcc_threads
    assert concurrent <= max(1, res.cores * parallelism.COMPILES_PER_CORE)
    assert concurrent * parallelism.GIB_PER_COMPILE <= max(parallelism.GIB_PER_COMPILE, res.mem_available_gib)
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
