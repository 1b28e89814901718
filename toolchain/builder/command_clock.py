"""When the command that runs the builder started, so that the wall it prints and records is the whole
command's (`python build.py wheel ...` from its first instruction), not pip wheel's alone: on the H200 on
2026-12-03 pip's wall was 239.3 s of a 254.3 s command (the interpreter and torch imports, the checks
before pip, and the wheel's renaming after it make the rest).

The start is the process's own, from /proc/self/stat (field 22: clock ticks since boot, on the clock that
CLOCK_BOOTTIME reads), so the time Python spent starting and importing counts too; where /proc cannot be
read it is the moment `of_this_process` was called (the builder's entry). Stdlib only (Linux, Python 3.10).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

from verify.runtime import input_files

PROC_STAT = "/proc/self/stat"


@dataclasses.dataclass(frozen=True)
class CommandClock:
    """The command's start on the epoch clock (for records) and on the monotonic clock (for durations)."""

    started_epoch_s: float
    started_monotonic_s: float
    source: str  # where the start came from, in words (the manifest's build.wall_from)

    def elapsed_s(self, now_monotonic_s: float | None = None) -> float:
        now = time.monotonic() if now_monotonic_s is None else now_monotonic_s
        return max(0.0, now - self.started_monotonic_s)


def started_now() -> CommandClock:
    """A clock that starts now: for a caller that did not come through the builder's entry (tests)."""
    return CommandClock(time.time(), time.monotonic(), "the builder's entry")


def _age_from_stat(stat_text: str, boottime_s: float, ticks_per_s: float) -> float:
    """The process's age in seconds: now on the boot clock minus its start (field 22; the command name in
    field 2 may hold spaces and parentheses, so count from the last ')')."""
    fields = stat_text[stat_text.rindex(")") + 2 :].split()
    return boottime_s - int(fields[19]) / ticks_per_s  # fields[0] is field 3 (state): 22 - 3 = 19


def of_this_process(
    read_stat: Callable[[], str] | None = None,
    boottime: Callable[[], float] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    epoch: Callable[[], float] = time.time,
) -> CommandClock:
    """The clock of this process's command; the readers are injectable (unit tests)."""
    now_mono, now_epoch = monotonic(), epoch()
    try:
        text = read_stat() if read_stat else _read(PROC_STAT)
        now_boot = boottime() if boottime else time.clock_gettime(time.CLOCK_BOOTTIME)
        age = _age_from_stat(text, now_boot, float(os.sysconf("SC_CLK_TCK")))
    except (input_files.InputFileError, OSError, ValueError, IndexError, AttributeError):
        age = None
    if age is None or not 0 <= age < 7 * 86400:  # unreadable, or a clock that makes no sense
        return CommandClock(now_epoch, now_mono, "the builder's entry (/proc/self/stat unreadable)")
    return CommandClock(now_epoch - age, now_mono - age, "the process start (/proc/self/stat)")


def _read(path: str) -> str:
    return input_files.read_system_text(path)
