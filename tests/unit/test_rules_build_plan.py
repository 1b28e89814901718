"""The build plan's limits, each on both sides: a cgroup memory limit below the host's free memory is what the
build may use (read from files in the kernel's formats under a test root); the unit schedule's extra nvcc
threads are held to the memory budget; a flag whose setup.py block builds nothing is refused (exit 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolchain.builder import apex_setup, parallelism
from toolchain.errors import UsageError
from verify.runtime import exit_codes

GIB = 2**30


def _host(root: Path, mem_available_gib: float, **cgroup: str) -> Path:
    """root/proc/meminfo and root/sys/fs/cgroup/<name> as the kernel writes them."""
    (root / "proc").mkdir(parents=True)
    kib = int(mem_available_gib * GIB / 1024)
    (root / "proc" / "meminfo").write_text(
        f"MemTotal:       {kib * 2} kB\nMemFree:        {kib // 2} kB\nMemAvailable:   {kib} kB\n"
    )
    for name, text in cgroup.items():
        path = root / "sys" / "fs" / "cgroup" / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


def test_a_cgroup_v2_limit_below_the_free_memory_is_what_the_build_gets(tmp_path: Path) -> None:
    root = _host(tmp_path, 64, **{"memory.max": str(8 * GIB), "memory.current": str(1 * GIB)})
    res = parallelism.host_resources(root, cpus=32)
    assert (res.mem_available_gib, res.mem_source) == (7.0, "cgroup limit")
    on_host = parallelism.HostResources(32, None, 64.0, "MemAvailable")
    limited = parallelism.plan(res, n_archs=1, n_extensions=12, env={})
    assert "7.0 GiB available (cgroup limit)" in limited.reason
    assert (
        limited.max_jobs * limited.apex_parallel_build
        < parallelism.plan(on_host, n_archs=1, n_extensions=12, env={}).max_jobs
        * parallelism.plan(on_host, n_archs=1, n_extensions=12, env={}).apex_parallel_build
    )


def test_a_cgroup_limit_above_the_free_memory_or_none_leaves_memavailable(tmp_path: Path) -> None:
    above = _host(tmp_path / "above", 6, **{"memory.max": str(8 * GIB), "memory.current": str(1 * GIB)})
    assert parallelism.host_resources(above, cpus=4).mem_source == "MemAvailable"
    assert parallelism.host_resources(above, cpus=4).mem_available_gib == 6.0
    unlimited = _host(tmp_path / "max", 6, **{"memory.max": "max", "memory.current": str(GIB)})
    assert parallelism.cgroup_memory_room(unlimited) is None
    assert parallelism.host_resources(unlimited, cpus=4).mem_available_gib == 6.0
    none = _host(tmp_path / "none", 6)
    assert parallelism.cgroup_memory_room(none) is None


def test_cgroup_v1_limits_count_and_its_unlimited_huge_number_does_not(tmp_path: Path) -> None:
    v1 = _host(
        tmp_path / "v1",
        64,
        **{"memory__memory.limit_in_bytes": str(4 * GIB), "memory__memory.usage_in_bytes": str(GIB // 2)},
    )
    res = parallelism.host_resources(v1, cpus=8)
    assert (res.mem_available_gib, res.mem_source) == (3.5, "cgroup limit")
    huge = _host(tmp_path / "huge", 64, **{"memory__memory.limit_in_bytes": str(1 << 62)})
    assert parallelism.cgroup_memory_room(huge) is None
    used_up = _host(tmp_path / "used", 64, **{"memory.max": str(GIB), "memory.current": str(2 * GIB)})
    assert parallelism.cgroup_memory_room(used_up) == 0  # over its limit already: no room, never negative


def test_cgroup_cpu_quota_v2_and_v1(tmp_path: Path) -> None:
    v2 = _host(tmp_path / "v2", 8, **{"cpu.max": "250000 100000"})
    assert parallelism.cgroup_cpu_quota(v2) == 2.5 and parallelism.host_resources(v2, cpus=64).cores == 2
    assert parallelism.cgroup_cpu_quota(_host(tmp_path / "v2max", 8, **{"cpu.max": "max 100000"})) is None
    v1 = _host(tmp_path / "v1", 8, **{"cpu__cpu.cfs_quota_us": "300000", "cpu__cpu.cfs_period_us": "100000"})
    assert parallelism.cgroup_cpu_quota(v1) == 3.0
    off = _host(tmp_path / "off", 8, **{"cpu__cpu.cfs_quota_us": "-1", "cpu__cpu.cfs_period_us": "100000"})
    assert parallelism.cgroup_cpu_quota(off) is None


def _budget_for(units: int, extra_threads: float) -> parallelism.HostResources:
    """A host whose memory budget holds every unit at one thread plus `extra_threads` more threads."""
    need = units * parallelism.unit_gib(1) + extra_threads * parallelism.GIB_PER_NVCC_THREAD
    return parallelism.HostResources(128, None, need / parallelism.MEMORY_FRACTION, "MemAvailable")


def test_the_schedules_extra_threads_are_held_to_the_memory_budget() -> None:
    n_ext = 12
    units = parallelism.LARGEST_EXTENSION_UNITS + (n_ext - 1) * parallelism.TYPICAL_FILES_PER_EXTENSION
    res = _budget_for(units, 10.5)
    fits = parallelism.all_in_flight(res, n_archs=4, n_extensions=n_ext, scheduled_extra_threads=10)
    assert fits is not None and fits[:3] == (parallelism.LARGEST_EXTENSION_UNITS, n_ext, 1)
    assert parallelism.all_in_flight(res, n_archs=4, n_extensions=n_ext, scheduled_extra_threads=11) is None
    scheduled = parallelism.plan(res, n_archs=4, n_extensions=n_ext, env={}, scheduled_extra_threads=10)
    assert scheduled.scheduled and scheduled.nvcc_threads == 1
    too_many = parallelism.plan(res, n_archs=4, n_extensions=n_ext, env={}, scheduled_extra_threads=11)
    assert not too_many.scheduled  # the plan falls back to the memory model instead of overcommitting
    heavier = parallelism.all_in_flight(
        res, n_archs=4, n_extensions=n_ext, scheduled_extra_threads=10, gib_per_thread=1.0
    )
    assert heavier is None  # a measured cost per thread counts in the same budget


def test_without_a_schedule_every_unit_gets_the_most_threads_that_fit() -> None:
    n_ext = 12
    units = parallelism.LARGEST_EXTENSION_UNITS + (n_ext - 1) * parallelism.TYPICAL_FILES_PER_EXTENSION
    res = _budget_for(units, units * 2.5)  # room for 3.5 threads per unit: 3
    assert parallelism.all_in_flight(res, n_archs=8, n_extensions=n_ext)[2] == 3  # type: ignore[index]  # fits
    assert parallelism.all_in_flight(res, n_archs=2, n_extensions=n_ext)[2] == 2  # type: ignore[index]  # archs
    starved = _budget_for(units, -0.5)  # not even one thread per unit
    assert parallelism.all_in_flight(starved, n_archs=1, n_extensions=n_ext) is None
    few_cores = parallelism.HostResources(4, None, res.mem_available_gib, "MemAvailable")
    assert parallelism.all_in_flight(few_cores, n_archs=1, n_extensions=n_ext) is None  # units crowd 4 cores


ARGV_SETUP = """
import sys
from setuptools import setup
from torch.utils.cpp_extension import CUDAExtension
ext_modules = []
if "--cpp_ext" in sys.argv:
    sys.argv.remove("--cpp_ext")
    ext_modules.append(CUDAExtension(name="apex_C", sources=["csrc/flatten_unflatten.cpp"]))
if "--xentropy" in sys.argv:
    sys.argv.remove("--xentropy")
    print("xentropy is built from apex/contrib now; this switch does nothing")
if "--fast_layer_norm" in sys.argv:
    sys.argv.remove("--fast_layer_norm")
    ext_modules.append(CUDAExtension(name="fast_layer_norm", sources=["ln_api.cpp"]))
setup(name="apex", ext_modules=ext_modules)
"""


def test_a_switch_whose_block_builds_nothing_is_refused_and_one_that_builds_is_taken(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(ARGV_SETUP)
    setup = apex_setup.read(tmp_path)
    assert setup.style == apex_setup.ARGV
    assert setup.speaks("APEX_FAST_LAYER_NORM", "--fast_layer_norm")
    assert not setup.speaks("APEX_XENTROPY", "--xentropy")  # tested in sys.argv, builds no extension
    apex_setup.check_flags(setup, {"APEX_CPP_EXT": "1", "APEX_FAST_LAYER_NORM": "1"}, tmp_path)
    with pytest.raises(UsageError) as caught:
        apex_setup.check_flags(setup, {"APEX_CPP_EXT": "1", "APEX_XENTROPY": "1"}, tmp_path)
    assert caught.value.exit_code == exit_codes.USAGE
    assert str(caught.value).startswith("APEX_XENTROPY (--xentropy): Apex at --apex-src")
    assert "no block tests '--xentropy' in sys.argv" in str(caught.value)
    every = apex_setup.flag_switches(setup, {"APEX_CPP_EXT": "1", "APEX_ALL_CONTRIB_EXT": "1"})
    assert "--fast_layer_norm" in every and "--xentropy" not in every


def test_in_the_env_era_a_flag_counts_only_when_env_to_flag_names_it(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(
        'ENV_TO_FLAG = {\n    "APEX_CPP_EXT": "--cpp_ext",\n    "APEX_CUDA_EXT": "--cuda_ext",\n}\n'
    )
    setup = apex_setup.read(tmp_path)
    assert setup.style == apex_setup.ENV and setup.env_vars == ("APEX_CPP_EXT", "APEX_CUDA_EXT")
    apex_setup.check_flags(setup, {"APEX_CUDA_EXT": "1"}, tmp_path)
    with pytest.raises(UsageError, match="ENV_TO_FLAG has no APEX_XENTROPY"):
        apex_setup.check_flags(setup, {"APEX_XENTROPY": "1"}, tmp_path)


def test_what_a_setup_py_of_no_known_style_and_the_pip_options_of_each_style_say(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='apex')\n")
    unknown = apex_setup.read(tmp_path)
    assert unknown.style == apex_setup.UNKNOWN and apex_setup.describe(unknown) == "no known flag style"
    with pytest.raises(UsageError, match="has no ENV_TO_FLAG and never tests") as caught:
        apex_setup.check_style(unknown, tmp_path)
    assert caught.value.exit_code == exit_codes.USAGE
    (tmp_path / "setup.py").write_text(ARGV_SETUP + '\nif "--parallel" in sys.argv:\n    pass\n')
    argv = apex_setup.read(tmp_path)
    apex_setup.check_style(argv, tmp_path)
    assert argv.parallel == apex_setup.ARGV and argv.all_modules() == ("apex_C", "fast_layer_norm")
    assert argv.dropped_archs("--cpp_ext", set()) == []
    assert apex_setup.pip_options(argv, ["--cpp_ext"], 4, compression="stored") == [
        "--use-pep517",
        "--config-settings=--build-option=--cpp_ext",
        "--config-settings=--build-option=--parallel",
        "--config-settings=--build-option=4",
        "--config-settings=--build-option=--compression=stored",
    ]
    assert apex_setup.pip_options(argv, ["--cpp_ext"], 1) == [
        "--use-pep517",
        "--config-settings=--build-option=--cpp_ext",
    ]
    apex_setup.check_flags(
        argv, {"APEX_ALL_CONTRIB_EXT": "1"}, tmp_path
    )  # the argv era's stand-in, not a switch


# The limits' edges, each pinned on the side it falls (a `<` that becomes `<=` moves a plan at the edge).
def _res(cores: int, mem_gib: float, quota: float | None = None) -> parallelism.HostResources:
    return parallelism.HostResources(cores, quota, mem_gib, "MemAvailable")


@pytest.mark.parametrize(
    ("affinity", "quota", "cores"),
    [(64, None, 64), (64, 2.5, 2), (64, 0.5, 1), (2, 8.0, 2)],  # a quota under one core still gets one core
)
def test_the_cores_are_the_affinity_held_to_the_whole_cores_of_the_quota(
    affinity: int, quota: float | None, cores: int
) -> None:
    assert _res(affinity, 8, quota).cores == cores


@pytest.mark.parametrize(
    ("limit", "usage", "room"),
    [
        (1 << 60, None, None),  # the edge of "unlimited": v1 writes 2**63 - 4096 for no limit
        ((1 << 60) - 1, None, (1 << 60) - 1),  # just under it is a limit; no usage file counts as none used
        (4 * GIB, str(GIB), 3 * GIB),
    ],
)
def test_the_cgroup_room_is_the_limit_less_what_is_used(
    tmp_path: Path, limit: int, usage: str | None, room: int | None
) -> None:
    files = {"memory__memory.limit_in_bytes": str(limit)}
    if usage is not None:
        files["memory__memory.usage_in_bytes"] = usage
    assert parallelism.cgroup_memory_room(_host(tmp_path, 64, **files)) == room


def test_a_cgroup_limit_equal_to_the_free_memory_names_memavailable(tmp_path: Path) -> None:
    res = parallelism.host_resources(_host(tmp_path, 8, **{"memory.max": str(8 * GIB)}), cpus=4)
    assert (res.mem_available_gib, res.mem_source) == (8.0, "MemAvailable")  # the cgroup did not limit it


def test_a_v1_quota_of_zero_is_no_quota_not_zero_cores(tmp_path: Path) -> None:
    root = _host(tmp_path, 8, **{"cpu__cpu.cfs_quota_us": "0", "cpu__cpu.cfs_period_us": "100000"})
    assert parallelism.cgroup_cpu_quota(root) is None
    assert parallelism.host_resources(root, cpus=4).cores == 4


def test_the_cpus_counted_are_this_process_affinity(tmp_path: Path) -> None:
    mine = os.sched_getaffinity(0)
    if len(mine) < 2:
        pytest.skip("one CPU: a narrower affinity cannot be told apart from the host's")
    os.sched_setaffinity(0, {min(mine)})
    try:
        res = parallelism.host_resources(_host(tmp_path, 8))
    finally:
        os.sched_setaffinity(0, mine)
    assert res.cpus_affinity == 1


@pytest.mark.parametrize("value", ["0", "-1", "2.5"])
def test_a_job_count_below_one_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match=f"MAX_JOBS={value!r}"):
        parallelism.plan(_res(16, 500), n_archs=1, n_extensions=12, env={"MAX_JOBS": value})


@pytest.mark.parametrize(
    ("cores", "mem_gib", "n_archs", "n_ext", "extra", "threads"),
    [
        (5, 500, 1, 1, None, 1),  # 15 units on 5 cores: exactly 3 per core is not crowding
        (4, 500, 1, 1, None, None),  # 15 units on 4 cores: crowded
        (13, 500, 1, 12, None, 1),  # 37 units on 13 cores
        (12, 500, 1, 12, None, None),  # 37 units on 12 cores: 36 is the most
        (64, 15 * 1.75 / 0.8, 1, 1, None, 1),  # 15 units x 1.75 GiB exactly the budget: fits
        (64, 37 * 1.75 / 0.8 - 0.01, 1, 12, None, None),  # a hair under it: not even one thread each
        (64, (37 * 1.75 + 10 * 0.75) / 0.8, 1, 12, 10, 1),  # the schedule's threads exactly the budget: fits
        (64, 37 * 2.5 / 0.8, 5, 12, None, 2),  # 2 threads per unit exactly the budget: 2, not 1
        (64, 500, 8, 12, None, 4),  # 8 archs: nvcc's threads stop at 4 (MAX_NVCC_THREADS)
        (64, 500, 0, 12, None, 1),  # no arch named: one thread, never none
    ],
)
def test_every_unit_at_once_at_its_edges(
    cores: int, mem_gib: float, n_archs: int, n_ext: int, extra: int | None, threads: int | None
) -> None:
    every = parallelism.all_in_flight(
        _res(cores, mem_gib), n_archs=n_archs, n_extensions=n_ext, scheduled_extra_threads=extra
    )
    assert (every and every[2]) == threads
    if every:
        assert every[:2] == (parallelism.LARGEST_EXTENSION_UNITS, n_ext)


@pytest.mark.parametrize(
    ("cores", "mem_gib", "n_archs", "n_ext", "jobs", "nvcc_threads", "expected"),
    [
        # the memory model (every unit at once does not fit or crowds the cores): (MAX_JOBS, parallel, threads)
        (16, 3, 1, 12, None, None, (1, 1, 1)),  # one unit fits 2.4 GiB: one job
        (4, 25, 2, 12, None, None, (4, 3, 2)),  # 8 units x 2.5 GiB is exactly the 20 GiB budget: 2 threads
        (
            11,
            500,
            1,
            12,
            None,
            None,
            (5, 9, 1),
        ),  # 22 units: 11 // 2 = 5 jobs, the other 17 in 8 more extensions
        (64, 500, 1, 1, None, None, (15, 1, 1)),  # one extension: amp_C's 15 units, one at a time
        (64, 500, 1, 0, None, None, (15, 1, 1)),  # none counted: still one
        (16, 500, 0, 12, None, None, (15, 12, 1)),  # no arch named: one nvcc thread
        # the slots (--jobs or --nvcc-threads given): ninja jobs first, the rest extensions side by side
        (4, 500, 1, 12, 11, None, (4, 4, 1)),  # 11 slots: 4 jobs, 7 more at ~2 files: 3 more extensions
        (17, 500, 1, 12, 40, None, (8, 12, 1)),  # 17 // 2 = 8 jobs; 32 more slots, only 11 more extensions
        (16, 500, 1, 12, 8, 2, (4, 1, 2)),  # 8 slots at 2 threads: 4 per thread
        (16, 500, 1, 12, 1, 4, (1, 1, 4)),  # 1 slot at 4 threads: still one job, never none
    ],
)
def test_the_split_at_its_edges(
    cores: int,
    mem_gib: float,
    n_archs: int,
    n_ext: int,
    jobs: int | None,
    nvcc_threads: int | None,
    expected: tuple[int, int, int],
) -> None:
    plan = parallelism.plan(
        _res(cores, mem_gib),
        n_archs=n_archs,
        n_extensions=n_ext,
        jobs=jobs,
        nvcc_threads=nvcc_threads,
        env={},
    )
    got = (plan.max_jobs, plan.apex_parallel_build, plan.nvcc_threads)
    assert got == expected and all(type(v) is int for v in got), (
        plan.reason
    )  # whole numbers, as ninja reads them


def test_apex_parallel_build_above_the_slots_leaves_one_job_each() -> None:
    plan = parallelism.plan(_res(16, 500), n_archs=1, n_extensions=12, env={"APEX_PARALLEL_BUILD": "64"})
    assert (plan.max_jobs, plan.apex_parallel_build) == (1, 64)


@pytest.mark.parametrize(
    ("kwargs", "env", "text"),
    [
        ({"jobs": 4}, {}, "compiles of ~2.5 GiB fit in 80%"),  # --jobs alone overrides
        ({"nvcc_threads": 2}, {}, "compiles of ~2.5 GiB fit in 80%"),  # --nvcc-threads alone overrides
        ({}, {"APEX_PARALLEL_BUILD": "2"}, "20 concurrent compiles (memory limit)"),  # 20 fit, 32 by cores
        ({}, {}, "modelled peak 92 GiB (37 units x 2.50 GiB); "),  # every unit at once, no schedule
    ],
)
def test_the_reason_names_what_sized_the_plan(kwargs: dict, env: dict[str, str], text: str) -> None:
    # 16 cores, 62.5 GiB: 50 GiB fit 20 compiles of 2.5; 37 units x (1 + 2 x 0.75) GiB = 92.5 of 100 needs more
    mem = 125 if not env and not kwargs else 62.5
    plan = parallelism.plan(_res(16, mem), n_archs=5, n_extensions=12, env=env, **kwargs)
    assert text in plan.reason + "; ", plan.reason


@pytest.mark.parametrize(
    ("mem_gib", "threads", "warned"),
    [
        (15, "2", "WARNING: about 20 GiB may be needed"),  # 4 jobs x 2 threads x 2.5 GiB
        (10, "1", ""),  # 4 x 1 x 2.5 GiB is exactly what is available: no warning
        (9.9, "1", "WARNING: about 10 GiB may be needed"),
    ],
)
def test_an_override_is_warned_only_past_the_memory(mem_gib: float, threads: str, warned: str) -> None:
    env = {"MAX_JOBS": "4", "APEX_PARALLEL_BUILD": "1", "NVCC_APPEND_FLAGS": f"--threads {threads}"}
    plan = parallelism.plan(_res(4, mem_gib), n_archs=1, n_extensions=12, env=env)
    assert (warned in plan.reason) and (("WARNING" in plan.reason) == bool(warned)), plan.reason
