"""The host conditions a timing runs under: one CPU core for every thread of the process, one torch
CPU thread, no garbage collection inside a timed block (standard library; torch only if imported).

    with SteadyHost() as host:        # verify's timing worker holds one for its whole life
        ...compare(...)               # verify.timing.kernel_compare: quiet_gc() around its timed blocks
    host.conditions.to_json()         # -> every timing row's "host" (which core, how it was chosen)

Why (H200 host of 2026-12-01, reports/h200-2026-12-01-timing2/): a host-bound call (an Apex norm's Python path, an optimizer
step over 264 tensors) took 20-40% more or less time within seconds and up to 2x between processes,
while GPU-bound calls repeated within 2%. What this process controls: which core its threads run on
(a norm's backward runs in torch's autograd device thread, so each call hands work between two
threads; on two cores that is a cross-core wake-up, whose cost depends on how idle the other core
was), torch's CPU thread pool (its threads would share the one core), and the Python garbage
collector (a full collection over torch's heap takes milliseconds, landing in whichever block it
hits). The core is the allowed one that was idlest over a short sample (ties: the highest number,
away from core 0's interrupt work). What it does not control: the CPU's clock and other processes;
the clock of the chosen core is recorded where Linux shows it. Measured (reports/h200-2026-12-01-timing2/):
the p10-p90 spread of a loop figure within a run fell from 24-40% to 1-16%; the VM's own slow windows (up
to 2x, a fraction of a second to a whole run, every condition alike) remain.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import sys
import time
from collections.abc import Iterator, Mapping

from verify.runtime import input_files

IDLE_SAMPLE_S = 0.1  # long enough for /proc/stat's 10 ms ticks to tell a busy core from an idle one
PROC_STAT = "/proc/stat"
CPUINFO = "/proc/cpuinfo"
TASKS = "/proc/self/task"


@dataclasses.dataclass(frozen=True)
class HostConditions:
    cpu: int | None  # the core every thread was pinned to; None: not pinned (`pinning` says why)
    allowed: tuple[int, ...]  # the cores the process was allowed before (taskset, cgroup)
    pinning: str  # how the core was chosen, or why there is none
    threads_pinned: int  # threads of the process at pinning time (later ones inherit the core)
    torch_threads: int | None  # torch's intra-op threads while timing (None: torch not imported)
    gc: str
    cpu_mhz: float | None  # the chosen core's clock when pinned (None: not shown by this kernel or VM)

    def to_json(self) -> dict[str, object]:
        return {
            "cpu": self.cpu,
            "allowed_cpus": cpu_list(self.allowed),
            "pinning": self.pinning,
            "threads_pinned": self.threads_pinned,
            "torch_threads": self.torch_threads,
            "gc": self.gc,
            "cpu_mhz": self.cpu_mhz,
        }


GC_RULE = "collected and frozen before timing; disabled inside each timed host-inclusive block"


def cpu_list(cpus: tuple[int, ...] | list[int] | set[int]) -> str:
    """(0, 1, 2, 5, 7, 8) -> '0-2,5,7-8' (taskset's notation)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def parse_proc_stat(text: str) -> dict[int, tuple[int, int]]:
    """/proc/stat -> {cpu: (idle ticks, total ticks)}; idle counts idle and iowait."""
    found: dict[int, tuple[int, int]] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or not name[3:].isdigit():
            continue
        ticks = [int(v) for v in rest.split()]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        found[int(name[3:])] = (idle, sum(ticks[:8]))
    return found


def choose_cpu(
    allowed: tuple[int, ...], before: Mapping[int, tuple[int, int]], after: Mapping[int, tuple[int, int]]
) -> tuple[int, str]:
    """The allowed core that was idlest between two /proc/stat samples; ties (and no samples): the highest."""
    if not allowed:
        raise ValueError("no allowed CPU to choose from")

    def idle_fraction(cpu: int) -> float:
        if cpu not in before or cpu not in after:
            return -1.0
        idle = after[cpu][0] - before[cpu][0]
        total = after[cpu][1] - before[cpu][1]
        return idle / total if total > 0 else 1.0  # no tick at all in the sample: nothing ran there

    best = max(allowed, key=lambda c: (round(idle_fraction(c), 2), c))
    fraction = idle_fraction(best)
    if fraction < 0:
        return best, f"the highest allowed core (no {PROC_STAT} sample)"
    return best, (
        f"the idlest allowed core over {IDLE_SAMPLE_S:g} s ({100 * fraction:.0f}% idle; ties: the "
        "highest number)"
    )


def parse_cpuinfo_mhz(text: str, cpu: int) -> float | None:
    current: int | None = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            current = int(value.strip()) if value.strip().isdigit() else None
        elif key == "cpu MHz" and current == cpu:
            try:
                return round(float(value.strip()), 1)
            except ValueError:
                return None
    return None


def cpu_mhz(cpu: int) -> float | None:
    """The core's current clock: cpufreq where the kernel has it, else /proc/cpuinfo (often fixed in a VM)."""
    try:
        freq = input_files.read_system_text(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
        return round(int(freq.strip()) / 1000, 1)
    except (input_files.InputFileError, ValueError):
        pass
    try:
        return parse_cpuinfo_mhz(input_files.read_system_text(CPUINFO), cpu)
    except input_files.InputFileError:
        return None


def _read_stat() -> dict[int, tuple[int, int]]:
    try:
        return parse_proc_stat(input_files.read_system_text(PROC_STAT))
    except input_files.InputFileError:
        return {}


def thread_ids() -> list[int]:
    try:
        return [int(t) for t in os.listdir(TASKS) if t.isdigit()]
    except OSError:
        return [0]  # 0: the calling thread


def set_affinity(tids: list[int], cpus: set[int]) -> int:
    """Every listed thread onto `cpus`; a thread that ended meanwhile is skipped. Returns how many moved."""
    moved = 0
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
            moved += 1
        except (ProcessLookupError, PermissionError):
            continue
    return moved


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """No garbage collection inside the block (reference counting still frees); the previous state after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class SteadyHost:
    """Pin every thread of this process to one allowed core, torch to one CPU thread, and freeze the GC
    heap; stop() (or leaving the `with`) puts the previous affinity and thread count back."""

    def __init__(self) -> None:
        self.conditions: HostConditions | None = None
        self._allowed: set[int] = set()
        self._torch_threads: int | None = None

    def start(self) -> HostConditions:
        torch = sys.modules.get("torch")
        if torch is not None:
            self._torch_threads = torch.get_num_threads()
            torch.set_num_threads(1)  # a pool of N threads on one core would wait on each other
        gc.collect()
        gc.freeze()  # what exists now (torch, the test data) is never scanned again
        threads = torch.get_num_threads() if torch is not None else None
        if not hasattr(os, "sched_setaffinity"):
            self.conditions = HostConditions(
                None, (), f"not pinned: {sys.platform} has no sched_setaffinity", 0, threads, GC_RULE, None
            )
            return self.conditions
        self._allowed = set(os.sched_getaffinity(0))
        allowed = tuple(sorted(self._allowed))
        before = _read_stat()
        time.sleep(IDLE_SAMPLE_S if before else 0)
        cpu, how = choose_cpu(allowed, before, _read_stat())
        pinned = set_affinity(thread_ids(), {cpu})
        self.conditions = HostConditions(
            cpu, allowed, f"every thread on core {cpu}: {how}", pinned, threads, GC_RULE, cpu_mhz(cpu)
        )
        return self.conditions

    def stop(self) -> None:
        if self._allowed:
            set_affinity(thread_ids(), self._allowed)
        torch = sys.modules.get("torch")
        if torch is not None and self._torch_threads is not None:
            torch.set_num_threads(self._torch_threads)
        gc.unfreeze()

    def __enter__(self) -> SteadyHost:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
