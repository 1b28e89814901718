"""How many compilers an Apex build may run at once, sized from cores AND available memory.

Apex compiles with three nested knobs: `APEX_PARALLEL_BUILD` (extensions built at once, setuptools
threads), `MAX_JOBS` (ninja jobs inside one extension) and `NVCC_APPEND_FLAGS="--threads T"` (nvcc
compiles the -gencode targets of one file in T threads). Peak host memory grows with their product,
so a build that only counts cores runs out of memory on big hosts (upstream PR #1882: 24 GiB
serial, 58 GiB at --parallel 16, 91 GiB at --threads 8). Stdlib only: runs inside the build image.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path

from verify.runtime import input_files

# Facts behind the sizing rule, in one place.
# One compile stream (one nvcc process, one thread) peaks at ~2.3 GiB: PR #1882 went from 24 to
# 58 GiB when 15 more extension builds ran at once ((58 - 24) / 15). Rounded up for headroom.
GIB_PER_COMPILE = 2.5
# Leave a fifth of the available memory to the rest of the machine (page cache, other jobs).
MEMORY_FRACTION = 0.8
# Up to two compiles per core when memory allows: extensions finish at different times, and the
# last big one (amp_C, 15 .cu files) should not run alone on a few jobs while cores sit idle.
COMPILES_PER_CORE = 2
# ninja jobs per extension: at least this many, or half the cores; the rest of the slots go to
# building extensions side by side (APEX_PARALLEL_BUILD). Most extensions have 1-3 files.
MIN_JOBS_PER_EXTENSION = 4
# Most extensions have 1-3 source files, so one extension's build rarely fills its ninja jobs; only
# amp_C (16 files) does. Expected concurrent compiles ~= MAX_JOBS + (APEX_PARALLEL_BUILD - 1) * this.
# Measured on the H200 host (reports/h200-2026-11-30/README.md): MAX_JOBS=8 x APEX_PARALLEL_BUILD=4 peaked
# at 15 GiB summed RSS and left cores idle behind 4-wide extension waves.
TYPICAL_FILES_PER_EXTENSION = 2
# nvcc --threads only splits a file's -gencode targets: more threads than archs buy nothing.
MAX_NVCC_THREADS = 4

# Many archs (reports/h200-2026-12-01-buildspeed/): the rule above left the five-arch core build at 2.2 compiles in flight on 16
# cores (560 s, not finished): one extension at a time. The default now starts every extension at once
# (APEX_PARALLEL_BUILD = extensions) with MAX_JOBS = the largest extension's units, so every unit, the
# slowest included, is in flight from the start and the kernel shares the cores among them (no unit waits
# in a queue behind faster ones); nvcc --threads then takes whatever memory is left, which shortens the
# tail where the last slow units run alone. Memory per compile unit, modelled as host part + threads x
# device part, from two measurements on the H200 host (Apex 6424da3b, torch 2.11, nvcc 13.0):
# - five archs, MAX_JOBS=8 x nvcc --threads 4 (amp_C: 8 units of 4 threads at once): 24 GiB summed RSS
#   peak, 0.75 GiB per nvcc thread;
GIB_PER_NVCC_THREAD = 0.75
# - one arch, 32 units at --threads 1: 41.4 GiB summed RSS, 1.3 GiB per unit (reports/h200-2026-11-30,
#   manifest-9.0-cold.json), so ~0.55 GiB host part; rounded up to 1.0 because the largest single
#   process (a .cpp with torch/extension.h) reached 2.7 GiB. The model overestimates both runs by ~35%.
GIB_PER_UNIT_HOST = 1.0
# amp_C has 15 units (14 .cu + 1 .cpp at 6424da3b), the most of any core extension; MAX_JOBS this high
# lets them all run at once. The other extensions have 1-2 (TYPICAL_FILES_PER_EXTENSION).
LARGEST_EXTENSION_UNITS = 15
# Every unit in flight means many units per core on a small host: beyond 3 per core the cores gain
# nothing and memory pays for each; such hosts fall back to the slot rule (extensions in waves).
MAX_UNITS_PER_CORE = 3

_THREADS_FLAG = re.compile(r"(?:--threads|-t)[ =](\d+)")


@dataclasses.dataclass(frozen=True)
class HostResources:
    """What this process may use: CPU affinity and cgroup quota, MemAvailable and cgroup limit."""

    cpus_affinity: int
    cpu_quota: float | None  # cgroup CPU quota in cores, None when unlimited
    mem_available_gib: float
    mem_source: str  # which number limited memory: "MemAvailable" or "cgroup limit"

    @property
    def cores(self) -> int:
        if self.cpu_quota is None:
            return self.cpus_affinity
        return max(1, min(self.cpus_affinity, math.floor(self.cpu_quota)))


@dataclasses.dataclass(frozen=True)
class Plan:
    max_jobs: int
    nvcc_threads: int
    apex_parallel_build: int
    reason: str
    # every unit in flight with the unit schedule's extra threads counted (they may be given); plan() sets it
    scheduled: bool

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """The environment variables that carry this plan to Apex's setup.py and torch."""
        flags = _THREADS_FLAG.sub("", base.get("NVCC_APPEND_FLAGS", "")).strip()
        flags = f"{flags} --threads {self.nvcc_threads}".strip()
        return {
            "MAX_JOBS": str(self.max_jobs),
            "APEX_PARALLEL_BUILD": str(self.apex_parallel_build),
            "NVCC_APPEND_FLAGS": flags,
        }

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


# `root` is where /proc and /sys are read from: "/" on a real host; tests hand a folder holding the same files
ROOT = Path("/")


def _read(path: str, root: Path = ROOT) -> str | None:
    try:
        return input_files.read_system_text(root / path.lstrip("/")).strip()
    except input_files.InputFileError:
        return None


def cgroup_cpu_quota(root: Path = ROOT) -> float | None:
    """CPU quota in cores from cgroup v2 (cpu.max) or v1 (cfs_quota/period); None if unlimited."""
    v2 = _read("/sys/fs/cgroup/cpu.max", root)
    quota: str | None
    period: str | None
    if v2:
        quota, _, period = v2.partition(" ")
        if quota != "max" and period:
            return int(quota) / int(period)
        return None
    quota = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", root) or _read(
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", root
    )
    period = _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us", root) or _read(
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", root
    )
    if quota and period and int(quota) > 0:
        return int(quota) / int(period)
    return None


def mem_available_bytes(root: Path = ROOT) -> int:
    for line in input_files.read_system_text(root / "proc" / "meminfo").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable line")


def cgroup_memory_room(root: Path = ROOT) -> int | None:
    """Bytes left under the cgroup memory limit (v2 memory.max, v1 limit_in_bytes); None if unlimited."""
    for limit_path, usage_path in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        limit = _read(limit_path, root)
        if limit is None:
            continue
        if limit == "max" or int(limit) >= 1 << 60:  # v1 reports "unlimited" as a huge number
            return None
        usage = int(_read(usage_path, root) or 0)
        return max(0, int(limit) - usage)
    return None


def host_resources(root: Path = ROOT, cpus: int | None = None) -> HostResources:
    """This process's share of the host: the smaller of MemAvailable and the room under the cgroup memory
    limit (a container's limit below the host's free memory is what the build may use)."""
    cpus = len(os.sched_getaffinity(0)) if cpus is None else cpus
    available = mem_available_bytes(root)
    source = "MemAvailable"
    room = cgroup_memory_room(root)
    if room is not None and room < available:
        available, source = room, "cgroup limit"
    return HostResources(cpus, cgroup_cpu_quota(root), available / 2**30, source)


def _env_int(env: dict[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name}={value!r} is not a positive integer; set it to e.g. {name}=4 or unset it")
    return int(value)


def env_nvcc_threads(env: Mapping[str, str]) -> int | None:
    match = _THREADS_FLAG.search(env.get("NVCC_APPEND_FLAGS", ""))
    return int(match.group(1)) if match else None


def unit_gib(threads: int, gib_per_thread: float | None = None) -> float:
    """Modelled peak memory of one compile unit running nvcc with --threads `threads`."""
    return GIB_PER_UNIT_HOST + threads * (GIB_PER_NVCC_THREAD if gib_per_thread is None else gib_per_thread)


def _most_threads(n_archs: int) -> int:
    """The most nvcc --threads worth giving: one per arch, at most MAX_NVCC_THREADS, at least one."""
    return max(1, min(n_archs, MAX_NVCC_THREADS))


def all_in_flight(
    res: HostResources,
    *,
    n_archs: int,
    n_extensions: int,
    gib_per_thread: float | None = None,
    scheduled_extra_threads: int | None = None,
) -> tuple[int, int, int, str] | None:
    """(MAX_JOBS, APEX_PARALLEL_BUILD, nvcc threads, why) that start every unit at once; None where even
    one thread per unit does not fit, or the units would crowd the cores (the slot rule applies).
    scheduled_extra_threads: a unit schedule (unit_schedule.py) gives the costliest units more threads and
    the rest one, so the bulk runs at --threads 1 and the model adds those threads; without one, every
    unit gets the most threads (at most one per arch) whose modelled peak fits the budget."""
    units = LARGEST_EXTENSION_UNITS + (n_extensions - 1) * TYPICAL_FILES_PER_EXTENSION
    budget = res.mem_available_gib * MEMORY_FRACTION
    per_thread = GIB_PER_NVCC_THREAD if gib_per_thread is None else gib_per_thread
    if units > res.cores * MAX_UNITS_PER_CORE or units * unit_gib(1, gib_per_thread) > budget:
        return None
    if scheduled_extra_threads is not None:
        peak = units * unit_gib(1, gib_per_thread) + scheduled_extra_threads * per_thread
        if peak > budget:
            return None
        why = (
            f"every extension at once, MAX_JOBS = amp_C's {LARGEST_EXTENSION_UNITS} units: ~{units} units in "
            f"flight, ranked by the unit schedule; --threads 1 for the bulk, {scheduled_extra_threads} more "
            f"threads for the costliest units: modelled {peak:.0f} GiB of {budget:.0f}"
        )
        return LARGEST_EXTENSION_UNITS, n_extensions, 1, why
    top = _most_threads(n_archs)
    threads = max(t for t in range(1, top + 1) if units * unit_gib(t, gib_per_thread) <= budget)
    why = (
        f"every extension at once, MAX_JOBS = amp_C's {LARGEST_EXTENSION_UNITS} units: ~{units} units in flight, "
        f"the slowest from the start; --threads {threads} is the most of {top} whose modelled peak fits "
        f"{budget:.0f} GiB"
    )
    return LARGEST_EXTENSION_UNITS, n_extensions, threads, why


def plan(
    res: HostResources,
    *,
    n_archs: int,
    n_extensions: int,
    jobs: int | None = None,
    nvcc_threads: int | None = None,
    env: Mapping[str, str] | None = None,
    gib_per_thread: float | None = None,
    gib_from: str = "",
    scheduled_extra_threads: int | None = None,
) -> Plan:
    """Size the three knobs. Explicit arguments win, then MAX_JOBS / APEX_PARALLEL_BUILD /
    NVCC_APPEND_FLAGS from `env`, then the memory-and-cores rule. Raises ValueError on bad env values."""
    env = dict(os.environ if env is None else env)
    fits = max(1, math.floor(res.mem_available_gib * MEMORY_FRACTION / GIB_PER_COMPILE))
    overridden = (
        jobs is not None
        or nvcc_threads is not None
        or any(env.get(k, "").strip() for k in ("MAX_JOBS", "APEX_PARALLEL_BUILD"))
        or env_nvcc_threads(env) is not None
    )
    why = _host_reasons(res, fits, overridden, gib_per_thread)
    slots = _slots(res, jobs, fits, overridden, why)
    threads, threads_from = _nvcc_threads(nvcc_threads, env, n_archs, slots)
    sized_here = jobs is None and nvcc_threads is None and env_nvcc_threads(env) is None
    split = _split(
        res,
        env,
        threads=threads,
        threads_from=threads_from,
        per_thread=max(1, slots // threads),
        n_archs=n_archs,
        n_extensions=n_extensions,
        sized_here=sized_here,
        gib_per_thread=gib_per_thread,
        gib_from=gib_from,
        scheduled_extra_threads=scheduled_extra_threads,
    )
    why.append(
        f"nvcc --threads {split.threads} ({split.threads_from}); MAX_JOBS={split.max_jobs} x "
        f"APEX_PARALLEL_BUILD={split.parallel} ({split.split_from})"
    )
    why += _peak_reasons(res, split, gib_per_thread)
    return Plan(
        max_jobs=split.max_jobs,
        nvcc_threads=split.threads,
        apex_parallel_build=split.parallel,
        reason="; ".join(why),
        scheduled=split.scheduled,
    )


@dataclasses.dataclass(frozen=True)
class _Split:
    """How the compile slots split into ninja jobs x extensions side by side, and why."""

    max_jobs: int
    parallel: int
    split_from: str
    threads: int
    threads_from: str
    extra_threads: int = (
        0  # the unit schedule's threads above --threads, where the all-in-flight rule counted them
    )
    scheduled: bool = False


def _host_reasons(res: HostResources, fits: int, overridden: bool, gib_per_thread: float | None) -> list[str]:
    """The reason's opening: the cores and the memory the plan was sized from."""
    return [
        f"{res.cores} cores (affinity {res.cpus_affinity}, cgroup quota "
        f"{'none' if res.cpu_quota is None else f'{res.cpu_quota:g}'})",
        f"{res.mem_available_gib:.1f} GiB available ({res.mem_source})"
        + (
            f": {fits} compiles of ~{GIB_PER_COMPILE} GiB fit in {int(MEMORY_FRACTION * 100)}%"
            if overridden
            else f": per unit {GIB_PER_UNIT_HOST} GiB + {gib_per_thread or GIB_PER_NVCC_THREAD:.2f} GiB per nvcc thread "
            f"must fit in {int(MEMORY_FRACTION * 100)}%"
        ),
    ]


def _slots(res: HostResources, jobs: int | None, fits: int, overridden: bool, why: list[str]) -> int:
    """Concurrent compiles: --jobs, else cores x COMPILES_PER_CORE within what memory fits."""
    if jobs is not None:
        why.append(f"--jobs {jobs} sets {jobs} concurrent compiles")
        return jobs
    slots = min(res.cores * COMPILES_PER_CORE, fits)
    if overridden:
        limit = "memory" if fits < res.cores * COMPILES_PER_CORE else f"{COMPILES_PER_CORE} per core"
        why.append(f"{slots} concurrent compiles ({limit} limit)")
    return slots


def _nvcc_threads(nvcc_threads: int | None, env: dict[str, str], n_archs: int, slots: int) -> tuple[int, str]:
    """(nvcc --threads, where it came from): --nvcc-threads, NVCC_APPEND_FLAGS, else one per arch."""
    if nvcc_threads is not None:
        return nvcc_threads, "--nvcc-threads"
    threads = env_nvcc_threads(env)
    if threads is not None:
        return threads, "NVCC_APPEND_FLAGS"
    return max(1, min(n_archs, MAX_NVCC_THREADS, slots)), f"{n_archs} arch(s)"


def _split(
    res: HostResources,
    env: dict[str, str],
    *,
    threads: int,
    threads_from: str,
    per_thread: int,
    n_archs: int,
    n_extensions: int,
    sized_here: bool,
    gib_per_thread: float | None,
    gib_from: str,
    scheduled_extra_threads: int | None,
) -> _Split:
    """MAX_JOBS x APEX_PARALLEL_BUILD: from the environment, else every extension at once when it fits,
    else the memory model (nothing given), else the slots (--jobs or --nvcc-threads given)."""
    n_ext = max(1, n_extensions)
    from_env = _split_from_env(env, n_ext, per_thread)
    if from_env is not None:
        return _Split(*from_env, threads, threads_from)
    if not sized_here:
        return _split_by_slots(res, per_thread, n_ext, n_extensions, threads, threads_from)
    every = all_in_flight(
        res,
        n_archs=n_archs,
        n_extensions=n_ext,
        gib_per_thread=gib_per_thread,
        scheduled_extra_threads=scheduled_extra_threads,
    )
    if every:
        max_jobs, parallel, every_threads, note = every
        return _Split(
            max_jobs,
            parallel,
            f"{note}{f'; {gib_from}' if gib_from else ''}",
            every_threads,
            f"{n_archs} arch(s), memory",
            scheduled_extra_threads or 0,
            scheduled_extra_threads is not None,
        )
    return _split_by_memory(res, n_archs, n_ext, n_extensions, gib_per_thread)


def _split_from_env(env: dict[str, str], n_ext: int, per_thread: int) -> tuple[int, int, str] | None:
    """(MAX_JOBS, APEX_PARALLEL_BUILD, why) where the environment sets either; None when it sets neither."""
    env_jobs, env_parallel = _env_int(env, "MAX_JOBS"), _env_int(env, "APEX_PARALLEL_BUILD")
    if env_jobs is not None and env_parallel is not None:
        return env_jobs, env_parallel, "MAX_JOBS and APEX_PARALLEL_BUILD from the environment"
    if env_jobs is not None:
        return env_jobs, max(1, min(n_ext, per_thread // env_jobs)), "MAX_JOBS from the environment"
    if env_parallel is not None:
        return max(1, per_thread // env_parallel), env_parallel, "APEX_PARALLEL_BUILD from the environment"
    return None


def _split_by_memory(
    res: HostResources, n_archs: int, n_ext: int, n_extensions: int, gib_per_thread: float | None
) -> _Split:
    """The slot rule on the memory model: as many units as cores x 2 and memory allow at one thread, then
    the most threads that still fit (a small host gets units for its cores before threads)."""
    budget = res.mem_available_gib * MEMORY_FRACTION
    units = max(1, min(res.cores * COMPILES_PER_CORE, math.floor(budget / unit_gib(1, gib_per_thread))))
    top = _most_threads(n_archs)
    threads = max([t for t in range(1, top + 1) if units * unit_gib(t, gib_per_thread) <= budget] or [1])
    max_jobs = min(units, max(MIN_JOBS_PER_EXTENSION, res.cores // 2))
    parallel = max(1, min(n_ext, 1 + (units - max_jobs) // TYPICAL_FILES_PER_EXTENSION))
    split_from = (
        f"{units} units fit (cores x {COMPILES_PER_CORE}, memory model); ninja jobs per extension: "
        f"max({MIN_JOBS_PER_EXTENSION}, cores/2); the other units build extensions side by side at "
        f"~{TYPICAL_FILES_PER_EXTENSION} files each; {n_extensions} extension(s)"
    )
    return _Split(max_jobs, parallel, split_from, threads, f"{n_archs} arch(s), memory")


def _split_by_slots(
    res: HostResources, per_thread: int, n_ext: int, n_extensions: int, threads: int, threads_from: str
) -> _Split:
    """The slots each nvcc thread leaves: ninja jobs per extension first, the rest extensions side by side."""
    max_jobs = min(per_thread, max(MIN_JOBS_PER_EXTENSION, res.cores // 2))
    parallel = max(1, min(n_ext, 1 + (per_thread - max_jobs) // TYPICAL_FILES_PER_EXTENSION))
    split_from = (
        f"ninja jobs per extension: max({MIN_JOBS_PER_EXTENSION}, cores/2); the other slots build "
        f"extensions side by side at ~{TYPICAL_FILES_PER_EXTENSION} files each; {n_extensions} extension(s)"
    )
    return _Split(max_jobs, parallel, split_from, threads, threads_from)


def _peak_reasons(res: HostResources, split: _Split, gib_per_thread: float | None) -> list[str]:
    """The modelled peak memory (memory-sized plans), and a warning when it exceeds what is available."""
    why = []
    expected = min(
        split.max_jobs * split.parallel, split.max_jobs + (split.parallel - 1) * TYPICAL_FILES_PER_EXTENSION
    )
    if split.threads_from.endswith("memory"):
        unit = unit_gib(split.threads, gib_per_thread)
        peak = expected * unit + split.extra_threads * (gib_per_thread or GIB_PER_NVCC_THREAD)
        why.append(
            f"modelled peak {peak:.0f} GiB ({expected} units x {unit:.2f} GiB"
            + (f" + {split.extra_threads} scheduled threads)" if split.extra_threads else ")")
        )
    else:
        peak = expected * split.threads * GIB_PER_COMPILE
    if peak > res.mem_available_gib:
        why.append(f"WARNING: about {peak:.0f} GiB may be needed at peak, more than is available")
    return why
