"""The manifest's `build.timing`: every compile unit's times, the links, the lower bound, units in flight
and memory per unit, from each extension's .ninja_log (ninja_log.py) and the unit runner's records
(unit_runner.py: CPU seconds, nvcc threads, niceness and largest process of each nvcc unit); the per-thread
memory a previous cold build measured (which sizes the next one) and the wall / lower-bound line printed
after every build. Standard library and verify only: runs inside the build image (Python 3.10).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolchain.builder import ninja_log, parallelism, unit_schedule
from verify.runtime import input_files

TIMES_NAME = "unit-times.jsonl"


def compile_timing(
    build_dir: Path, stats: dict, cores: int, threads: int, times_path: Path | None = None
) -> dict:
    """Per-unit times, links, the lower bound and what memory one unit took at its peak, for the manifest.
    {"units": [], "note": why} when no ninja log is there."""
    try:
        by_ext = ninja_log.read_build_dir(build_dir)
        links = ninja_log.link_seconds(by_ext, ninja_log.library_mtimes(build_dir))
    except (OSError, ninja_log.NinjaLogError) as error:
        return {"units": [], "note": f"ninja logs unreadable: {error}"}
    units = sorted((u for found in by_ext.values() for u in found), key=lambda u: -u.wall_s)
    if not units:
        return {"units": [], "note": f"no .ninja_log under {build_dir} (no ninja, or nothing compiled)"}
    runner = unit_schedule.read_times(times_path) if times_path else {}
    # a unit alone needs at least its CPU seconds spread over the threads nvcc may run it on
    floors = {
        k: r["cpu_s"] / max(1, int(r.get("threads") or threads))
        for k, r in runner.items()
        if r.get("exit") == 0
    }
    origin = min(u.start_s for u in units)
    bound = ninja_log.lower_bound(units, links, cores, stats.get("cpu_s"), floors)
    peak_units, mean_units = ninja_log.in_flight(units)
    per_unit = stats["peak_rss_mb"] / 1024 / max(1, peak_units)
    rows = []
    for u in units:  # seconds since the first unit started, slowest first
        row = dict(u.to_json(), start_s=round(u.start_s - origin, 3), end_s=round(u.end_s - origin, 3))
        record = runner.get(ninja_log.unit_key(u))
        if record:
            row.update({k: record.get(k) for k in ("cpu_s", "threads", "nice", "maxrss_mib")})
        rows.append(row)
    timed = [runner[k] for k in (ninja_log.unit_key(u) for u in units) if k in runner]
    # the runner's own clock against ninja's: a check that the log clock is right (ms, not a unit's length)
    ends = {ninja_log.unit_key(u): u.end_s for u in units}
    skew = max((abs(r["end_s"] - ends[r["key"]]) for r in timed), default=None)
    return {
        "units": rows,
        "links_s": {ext: round(v, 2) for ext, v in sorted(links.items())},
        "unit_seconds": round(sum(u.wall_s for u in units), 1),
        # serial phases no unit schedule can shorten: pip and setup.py before the first unit (metadata, torch
        # import), and linking the last extension and packing the wheel after the last unit
        "before_first_unit_s": round(origin - stats["started_epoch_s"], 1)
        if "started_epoch_s" in stats
        else None,
        "after_last_unit_s": round(
            stats["started_epoch_s"] + stats.get("pip_wall_s", stats["wall_s"]) - max(u.end_s for u in units),
            1,
        )
        if "started_epoch_s" in stats
        else None,
        "lower_bound": bound.to_json(stats["wall_s"]),
        "in_flight": {"peak_units": peak_units, "mean_units": round(mean_units, 2)},
        "runner": {
            "units_timed": len(timed),
            "cpu_s": round(sum(r["cpu_s"] for r in timed), 1),
            "clock_skew_s": None if skew is None else round(skew, 3),
            "method": "unit_runner.py around each nvcc unit: wait4 CPU seconds of its process tree, its largest "
            "process, the nvcc threads and niceness the unit schedule gave it",
        },
        "memory": {
            "gib_per_unit_at_peak": round(per_unit, 2),
            # what the parallelism model's device part would have been, given its host part
            "gib_per_nvcc_thread": round(
                max(0.25, (per_unit - parallelism.GIB_PER_UNIT_HOST) / max(1, threads)), 2
            ),
            "largest_process_gib": {
                "max": round(max(r["maxrss_mib"] for r in timed) / 1024, 2),
                "median": round(statistics.median(r["maxrss_mib"] for r in timed) / 1024, 2),
            }
            if timed
            else None,
            "method": "peak summed RSS / most units in flight at once; per thread: minus the model's host part, "
            "divided by nvcc --threads (at least 0.25); largest_process_gib: the runner's ru_maxrss",
        },
    }


def with_wall(timing: dict, wall_s: float) -> dict:
    """The timing with its wall / bound for this wall (the builder's wall grows until the manifest is written)."""
    bound = timing.get("lower_bound")
    if not bound or not bound.get("lower_bound_s"):
        return timing
    return {**timing, "lower_bound": {**bound, "wall_over_bound": round(wall_s / bound["lower_bound_s"], 3)}}


def measured_gib_per_thread(manifest_path: Path) -> tuple[float | None, str]:
    """The per-thread memory a previous cold build in the same --out measured, with 25% headroom; a warm
    (ccache) build compiled little, so its figure says nothing."""
    try:  # the project's bounded reader: a FIFO or a huge file in --out must not hang or fill memory here
        build = input_files.read_json(manifest_path, input_files.MANIFEST).get("build", {})
        value = float(build["timing"]["memory"]["gib_per_nvcc_thread"])
        stats = build.get("ccache", {}).get("stats", {})
    except (OSError, input_files.InputFileError, ValueError, KeyError, TypeError, AttributeError):
        return None, ""
    hits = stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0)
    if hits > stats.get("cache_miss", 0) or not 0.1 <= value <= 64:
        return None, ""
    return round(
        value * 1.25, 2
    ), f"per-thread memory {value} GiB measured by the cold build in {manifest_path} (+25%)"


def timing_line(build: Mapping[str, Any]) -> str:
    """`wall 250.1 s / lower bound 231.0 s = 1.08 (...)`, printed after every build: the whole command's
    wall (build.wall_s), pip wheel's beside it."""
    timing = build.get("timing", {})
    bound = timing.get("lower_bound")
    pip = f" (pip wheel {build['pip_wall_s']} s)" if build.get("pip_wall_s") is not None else ""
    if not bound:
        return f"wall {build['wall_s']} s{pip}; lower bound unknown: {timing.get('note', 'no timing')}"
    return (
        f"wall {build['wall_s']} s{pip} / lower bound {bound['lower_bound_s']} s = {bound['wall_over_bound']} "
        f"(chain {bound['chain_s']} s: {bound['chain_unit']} + link; work {bound['work_s']} s: "
        f"{bound['work_from']}; {len(timing['units'])} units, at most {timing['in_flight']['peak_units']} "
        f"in flight, {timing['in_flight']['mean_units']} on average)"
    )
