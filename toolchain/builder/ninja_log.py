"""Compile units from ninja's `.ninja_log`, and the build's lower bound.

torch's cpp_extension compiles each extension with ninja in its own build directory (Apex's setup.py
puts every extension in `build/temp.*/<extension>/`), and ninja appends one line per finished output
to `.ninja_log` there. Format (ninja's src/build_log.cc, versions 5-7 share it):

    # ninja log v5
    <start ms>\t<end ms>\t<mtime>\t<output path>\t<command hash>

start/end are milliseconds since that ninja process started, so logs of different extensions have
different origins. The mtime field cannot put them on one clock: ninja 1.12+ (log v7, what pip's
`ninja` installs) records the filesystem time when the command STARTED, ninja <= 1.11 the output's
mtime, which a ccache hit or a restat rule leaves at any old time. What every version does: it appends
(and flushes) a line the moment an output finishes, so the log file's own mtime is the end of its last
line on the epoch clock: origin = log mtime - the largest end. (The 2026-12-01 five-arch figures took
the origin from the mtime field, off by a unit's whole duration under v7: a 226.6 s bound for a
160.4 s build.) A log may hold several runs; `last_run` keeps the last (ends only grow within a run).
Pure functions except `read_build_dir` / `library_mtimes`. Standard library only: runs inside the
build image.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from verify.runtime import input_files

LOG_NAME = ".ninja_log"
_HEADER = re.compile(r"^# ninja log v(\d+)\s*$")
KNOWN_VERSIONS = (5, 6, 7)


class NinjaLogError(ValueError):
    """A .ninja_log this module cannot read; the message names the file and the line."""


@dataclasses.dataclass(frozen=True)
class LogEntry:
    start_ms: int
    end_ms: int
    mtime_ns: int
    output: str


@dataclasses.dataclass(frozen=True)
class Unit:
    """One compile unit (an object file) on the common clock (seconds since the epoch)."""

    extension: str
    output: str
    start_s: float
    end_s: float

    @property
    def wall_s(self) -> float:
        return self.end_s - self.start_s

    def to_json(self) -> dict:
        return {
            "extension": self.extension,
            "output": self.output,
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
            "wall_s": round(self.wall_s, 3),
        }


@dataclasses.dataclass(frozen=True)
class BuildBound:
    """The build cannot finish sooner than the longest chain nor than its work spread on every core."""

    chain_s: float  # slowest unit + its extension's link
    chain_unit: str  # extension/output of that unit
    work_s: float  # total work / cores
    work_from: str  # what the work was measured as
    cores: int
    chain_from: str = "its wall in this build"  # what the chain unit's time is

    @property
    def bound_s(self) -> float:
        return max(self.chain_s, self.work_s)

    def ratio(self, wall_s: float) -> float:
        return wall_s / self.bound_s if self.bound_s > 0 else float("inf")

    def to_json(self, wall_s: float) -> dict:
        return {
            "lower_bound_s": round(self.bound_s, 1),
            "chain_s": round(self.chain_s, 1),
            "chain_unit": self.chain_unit,
            "chain_from": self.chain_from,
            "work_s": round(self.work_s, 1),
            "work_from": self.work_from,
            "cores": self.cores,
            "wall_over_bound": round(self.ratio(wall_s), 3),
        }


def parse_lines(text: str, source: str = ".ninja_log") -> list[LogEntry]:
    """Every line's entry, in file order (a rebuild's lines follow the first run's)."""
    lines = text.splitlines()
    if not lines:
        return []
    header = _HEADER.match(lines[0])
    if not header:
        raise NinjaLogError(f"{source} line 1: {lines[0][:80]!r} is not '# ninja log vN'; is it a ninja log?")
    if int(header.group(1)) not in KNOWN_VERSIONS:
        raise NinjaLogError(
            f"{source}: ninja log v{header.group(1)} is not one of v5-v7 that this reader knows"
        )
    entries = []
    for number, line in enumerate(lines[1:], 2):
        if not line.strip() or _HEADER.match(line):
            continue
        fields = line.split("\t")
        if len(fields) != 5 or not all(f.strip().isdigit() for f in fields[:3]):
            raise NinjaLogError(
                f"{source} line {number}: {line[:80]!r} is not START\\tEND\\tMTIME\\tOUTPUT\\tHASH"
            )
        start, end, mtime = (int(f) for f in fields[:3])
        if end < start:
            raise NinjaLogError(f"{source} line {number}: ends ({end} ms) before it starts ({start} ms)")
        entries.append(LogEntry(start, end, mtime, fields[3]))
    return entries


def latest(entries: list[LogEntry]) -> list[LogEntry]:
    """Every output's last entry, in file order of those last entries (ninja reads a log the same way)."""
    last: dict[str, LogEntry] = {}
    for entry in entries:
        last.pop(entry.output, None)  # a later run's line replaces the earlier one, and moves to the end
        last[entry.output] = entry
    return list(last.values())


def parse(text: str, source: str = ".ninja_log") -> list[LogEntry]:
    """Every output's last entry, in file order of those last entries."""
    return latest(parse_lines(text, source))


def last_run(entries: list[LogEntry]) -> list[LogEntry]:
    """The entries of the last ninja run in a log (a rebuild appends its lines): within one run each line
    is written when its output finishes, so ends never decrease; a smaller end starts a later run. (A
    rerun whose first end exceeds the previous run's last is not told apart: the builder removes build/.)"""
    start = 0
    for i in range(1, len(entries)):
        if entries[i].end_ms < entries[i - 1].end_ms:
            start = i
    return entries[start:]


def units(extension: str, entries: list[LogEntry], origin_s: float) -> list[Unit]:
    """Entries on the common clock; origin_s is the epoch second the ninja run started (`log_origin`)."""
    return [
        Unit(extension, e.output, origin_s + e.start_ms / 1e3, origin_s + e.end_ms / 1e3) for e in entries
    ]


def log_origin(entries: list[LogEntry], log_mtime_s: float) -> float:
    """When the ninja run of these entries started, on the epoch clock: its log was last written when its
    last output finished."""
    return log_mtime_s - max((e.end_ms for e in entries), default=0) / 1e3


def lower_bound(
    all_units: list[Unit],
    links_s: dict[str, float],
    cores: int,
    cpu_s: float | None = None,
    floors_s: dict[str, float] | None = None,
) -> BuildBound:
    """max(slowest unit + its extension's link, work / cores). Work is the build's CPU seconds when
    measured (a unit's wall counts time it waited for a core when more compiles than cores run, and
    misses the cores its nvcc --threads used), else the sum of unit walls. A unit's time in the chain is
    its floor where known (floors_s, by unit_key: its CPU seconds / the threads it could use, what it
    needs even alone), else its wall in this build, which under contention overstates it."""
    cores = max(1, cores)
    floors_s = floors_s or {}

    def alone(u: Unit) -> float:
        return min(u.wall_s, floors_s.get(unit_key(u), u.wall_s))

    if all_units:
        slow = max(all_units, key=lambda u: alone(u) + links_s.get(u.extension, 0.0))
        chain, chain_unit = alone(slow) + links_s.get(slow.extension, 0.0), unit_key(slow)
        chain_from = (
            "its CPU seconds / its nvcc threads" if unit_key(slow) in floors_s else "its wall in this build"
        )
    else:
        chain, chain_unit, chain_from = max(links_s.values(), default=0.0), "-", "no units"
    if cpu_s is not None:
        work, work_from = cpu_s / cores, f"{cpu_s:.0f} CPU seconds of the build's processes / {cores} cores"
    else:
        total = sum(u.wall_s for u in all_units)
        work, work_from = total / cores, f"{total:.0f} unit-seconds (ninja walls) / {cores} cores"
    return BuildBound(chain, chain_unit, work, work_from, cores, chain_from)


def in_flight(all_units: list[Unit]) -> tuple[int, float]:
    """(most units running at one moment, average units running between the first start and last end)."""
    if not all_units:
        return 0, 0.0
    events = sorted([(u.start_s, 1) for u in all_units] + [(u.end_s, -1) for u in all_units])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    span = max(u.end_s for u in all_units) - min(u.start_s for u in all_units)
    return peak, (sum(u.wall_s for u in all_units) / span if span > 0 else float(len(all_units)))


def extrapolate(done: list[str], elapsed_s: float, weights: dict[str, float]) -> dict:
    """A stopped build's estimated finish: elapsed x (all units' weight / finished units' weight).
    weights: unit key -> its wall in a reference build of the same source (so a slow unit still to come
    counts as slow); units without a weight count as the mean. An estimate, and the record says so."""
    if not weights:
        raise ValueError("no reference units to extrapolate from")
    mean = sum(weights.values()) / len(weights)
    keys = set(weights) | set(done)
    done_weight = sum(weights.get(k, mean) for k in set(done))
    total_weight = sum(weights.get(k, mean) for k in keys)
    if done_weight <= 0:
        return {
            "estimated_total_s": None,
            "done_units": 0,
            "total_units": len(keys),
            "elapsed_s": elapsed_s,
            "method": "no unit finished: no rate to extrapolate",
        }
    return {
        "estimated_total_s": round(elapsed_s * total_weight / done_weight, 1),
        "done_units": len(set(done)),
        "total_units": len(keys),
        "elapsed_s": round(elapsed_s, 1),
        "method": "EXTRAPOLATED, not measured: elapsed x (weight of all units / weight of finished units), "
        "each unit weighted by its wall in the reference build",
    }


def read_build_dir(build_dir: Path) -> dict[str, list[Unit]]:
    """{extension: units of its last ninja run} from every `<build_dir>/temp.*/<extension>/.ninja_log`
    (Apex's layout; a setup.py without it puts one log in temp.*/ itself, named by that folder)."""
    found: dict[str, list[Unit]] = {}
    for log in sorted(build_dir.glob(f"temp.*/**/{LOG_NAME}")):
        extension = log.parent.name
        entries = latest(last_run(parse_lines(input_files.read_text_lenient(log, input_files.LOG), str(log))))
        found.setdefault(extension, []).extend(
            units(extension, entries, log_origin(entries, log.stat().st_mtime))
        )
    return found


def unit_key(unit: Unit) -> str:
    return f"{unit.extension}/{Path(unit.output).name}"


def link_seconds(by_extension: dict[str, list[Unit]], library_mtimes: dict[str, float]) -> dict[str, float]:
    """Each extension's link: its shared library's mtime minus its last object's end (the link starts
    once the last object is there; setuptools links outside ninja, so no log times it)."""
    return {
        ext: max(0.0, library_mtimes[ext] - max(u.end_s for u in found))
        for ext, found in by_extension.items()
        if found and ext in library_mtimes
    }


def library_mtimes(build_dir: Path) -> dict[str, float]:
    """{extension: mtime} of `<build_dir>/lib.*/**/<extension>.*.so` (setuptools' build_lib)."""
    return {so.name.split(".", 1)[0]: so.stat().st_mtime for so in build_dir.glob("lib.*/**/*.so")}


def simulate_serial(extensions: list[tuple[str, list[float], float]], jobs: int) -> float:
    """Seconds a build takes that compiles one extension at a time, each with `jobs` ninja jobs (the
    guides' recipe: MAX_JOBS=4, no APEX_PARALLEL_BUILD). extensions: (name, unit seconds, link seconds)
    in build order; units go to the first free job slowest first, as a lower estimate of ninja's order."""
    total = 0.0
    for _name, walls, link in extensions:
        slots = [0.0] * max(1, jobs)
        for wall in sorted(walls, reverse=True):
            slots[slots.index(min(slots))] += wall
        total += max(slots) + link
    return total
