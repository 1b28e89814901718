"""The build plan's limits, each on both sides: a cgroup memory limit below the host's free memory is what the
build may use (read from files in the kernel's formats under a test root); the unit schedule's extra nvcc
threads are held to the memory budget; a flag whose setup.py block builds nothing is refused (exit 2)."""

from __future__ import annotations

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
