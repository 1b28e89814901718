"""verify.timing.host on this (Linux) machine: the core choice, every thread pinned and put back, one torch
thread, the garbage collector off inside a timed block (for reproducible host-inclusive times)."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pytest
import torch

from verify.timing import host as timing_host
from verify.timing.host import SteadyHost, choose_cpu, cpu_list, parse_cpuinfo_mhz, parse_proc_stat

STAT = """cpu  100 0 50 1000 10 0 0 0 0 0
cpu0 50 0 25 500 5 0 0 0 0 0
cpu1 50 0 25 500 5 0 0 0 0 0
intr 12345 0 0
ctxt 999
"""


def test_cpu_list_uses_taskset_notation() -> None:
    assert cpu_list((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    assert cpu_list({3}) == "3" and cpu_list([]) == ""


def test_parse_proc_stat_counts_idle_and_iowait_per_cpu() -> None:
    assert parse_proc_stat(STAT) == {0: (505, 580), 1: (505, 580)}  # the aggregate "cpu" line is not a core
    real = parse_proc_stat(Path("/proc/stat").read_text())
    assert set(os.sched_getaffinity(0)) <= set(real) and all(0 <= i <= t for i, t in real.values())


def test_choose_cpu_takes_the_idlest_allowed_core_and_the_highest_on_a_tie() -> None:
    before = {0: (0, 0), 1: (0, 0), 2: (0, 0), 3: (0, 0)}
    after = {0: (10, 10), 1: (2, 10), 2: (10, 10), 3: (10, 10)}
    assert choose_cpu((0, 1, 2), before, after)[0] == 2  # 0 and 2 idle: the higher; 3 is not allowed
    assert choose_cpu((0, 1), before, after)[0] == 0
    cpu, how = choose_cpu((0, 1, 2), before, {**after, 2: (5, 10)})
    assert cpu == 0 and "100% idle" in how
    assert choose_cpu((4, 6), {}, {}) == (6, "the highest allowed core (no /proc/stat sample)")
    with pytest.raises(ValueError):
        choose_cpu((), before, after)


def test_parse_cpuinfo_mhz_reads_the_named_processor() -> None:
    text = "processor\t: 0\ncpu MHz\t\t: 2400.000\n\nprocessor\t: 1\ncpu MHz\t\t: 3100.512\n"
    assert parse_cpuinfo_mhz(text, 1) == 3100.5 and parse_cpuinfo_mhz(text, 0) == 2400.0
    assert parse_cpuinfo_mhz(text, 7) is None and parse_cpuinfo_mhz("", 0) is None


def _affinity(tid: int) -> set[int]:
    return set(os.sched_getaffinity(tid))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_steady_host_pins_every_thread_to_one_core_and_puts_everything_back() -> None:
    allowed = _affinity(0)
    threads_before = torch.get_num_threads()
    started, stop = threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def worker() -> None:
        seen["tid"] = threading.get_native_id()
        started.set()
        stop.wait(10)

    early = threading.Thread(target=worker)
    early.start()
    started.wait(5)
    try:
        with SteadyHost() as steady:
            c = steady.conditions
            assert c is not None and c.cpu in allowed and c.allowed == tuple(sorted(allowed))
            assert _affinity(0) == {c.cpu} and _affinity(seen["tid"]) == {c.cpu}  # a thread made before
            late: dict[str, set[int]] = {}
            t = threading.Thread(target=lambda: late.setdefault("cpus", _affinity(0)))
            t.start()
            t.join()
            assert late["cpus"] == {c.cpu}  # and one made after: inherited
            assert c.threads_pinned >= 2 and c.torch_threads == torch.get_num_threads() == 1
            assert c.pinning.startswith(f"every thread on core {c.cpu}: ")
            data = c.to_json()
            assert data["allowed_cpus"] == cpu_list(allowed) and data["gc"] == timing_host.GC_RULE
            assert gc.get_freeze_count() > 0
        assert _affinity(0) == allowed and _affinity(seen["tid"]) == allowed
        assert torch.get_num_threads() == threads_before and gc.get_freeze_count() == 0
    finally:
        stop.set()
        early.join()


def test_quiet_gc_is_off_inside_and_restores_the_previous_state() -> None:
    gc.enable()
    with timing_host.quiet_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with timing_host.quiet_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()
