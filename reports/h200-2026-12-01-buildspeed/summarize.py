"""The summary table of one buildspeed call, from the files it wrote (nothing typed by hand).

    python summarize.py RESULTS_DIR     (reads cold/, warm/ manifests, naive.json, meminfo.txt)

Writes RESULTS_DIR/summary.md and summary.json and prints the table: archs, wall, lower bound, wall /
bound, peak memory against available, and the naive recipe's estimate, with the issue's goals.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GOAL_RATIO, GOAL_SPEEDUP, GOAL_MEMORY, GOAL_WARM_S = 1.25, 4.0, 0.8, 15.0


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def mem_available_gib(meminfo: Path) -> float | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def row(name: str, manifest: dict | None, available: float | None) -> dict:
    if manifest is None:
        return {"build": name, "missing": True}
    build = manifest["build"]
    bound = build.get("timing", {}).get("lower_bound") or {}
    peak = build["peak_rss_mb"] / 1024
    timing = build.get("timing", {})
    serial = (timing.get("before_first_unit_s") or 0) + (timing.get("after_last_unit_s") or 0)
    return {
        "build": name,
        "archs": manifest.get("arch_list"),
        "wall_s": build["wall_s"],
        "lower_bound_s": bound.get("lower_bound_s"),
        "wall_over_bound": bound.get("wall_over_bound"),
        "chain_s": bound.get("chain_s"),
        "work_s": bound.get("work_s"),
        "cpu_s": build.get("cpu_s"),
        # pip/setup.py before the first unit and link/packing after the last: no schedule of units shortens them
        "serial_phases_s": round(serial, 1),
        "wall_over_bound_plus_serial": round(build["wall_s"] / (bound["lower_bound_s"] + serial), 3)
        if bound.get("lower_bound_s")
        else None,
        "units": len(build.get("timing", {}).get("units", [])),
        "in_flight": build.get("timing", {}).get("in_flight"),
        "peak_gib": round(peak, 1),
        "peak_of_available": round(peak / available, 3) if available else None,
        "ccache": build.get("ccache", {}).get("stats"),
        "plan": {
            k: manifest["parallelism"].get(k) for k in ("max_jobs", "apex_parallel_build", "nvcc_threads")
        },
    }


def main(results: Path) -> int:
    available = mem_available_gib(results / "meminfo.txt")
    cold = row("five archs, cold ccache", _load(results / "cold" / "build-manifest.json"), available)
    warm = row(
        "five archs, warm ccache (rebuild)", _load(results / "warm" / "build-manifest.json"), available
    )
    naive = _load(results / "naive.json")
    naive_est = None
    if naive:
        naive_est = (
            naive.get("measured_total_s")
            or (naive.get("estimate_by_simulation") or {}).get("estimated_total_s")
            or (naive.get("estimate_by_rate") or {}).get("estimated_total_s")
        )
    goals = {
        "cold_within_1.25x_of_bound": (cold.get("wall_over_bound") or 99) <= GOAL_RATIO,
        "cold_4x_faster_than_naive": bool(
            naive_est and cold.get("wall_s") and naive_est / cold["wall_s"] >= GOAL_SPEEDUP
        ),
        "peak_within_80pct_of_available": (cold.get("peak_of_available") or 99) <= GOAL_MEMORY,
        "warm_rebuild_under_15s": (warm.get("wall_s") or 99) < GOAL_WARM_S,
    }
    summary = {
        "mem_available_gib": available,
        "rows": [cold, warm],
        "naive": naive
        and {
            k: naive.get(k)
            for k in (
                "bound_s",
                "stopped_at_bound",
                "elapsed_s",
                "peak_rss_gib",
                "measured_total_s",
                "estimate_by_rate",
                "estimate_by_simulation",
            )
        },
        "naive_total_s": naive_est,
        "speedup_vs_naive": round(naive_est / cold["wall_s"], 2)
        if naive_est and cold.get("wall_s")
        else None,
        "goals": goals,
    }
    (results / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    def cell(value, fmt="{}") -> str:
        return "-" if value is None else fmt.format(value)

    lines = [
        "| build | archs | wall | lower bound | wall / bound | peak memory | plan (jobs x ext x threads) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in (cold, warm):
        if r.get("missing"):
            lines.append(f"| {r['build']} | not run or failed | | | | | |")
            continue
        plan = r["plan"]
        lines.append(
            f"| {r['build']} | {r['archs']} | {r['wall_s']} s | {cell(r['lower_bound_s'], '{} s')} | "
            f"{cell(r['wall_over_bound'])} | {r['peak_gib']} GiB ({cell(r['peak_of_available'], '{:.0%}')} "
            f"of {cell(available, '{:.0f}')} GiB) | {plan['max_jobs']} x {plan['apex_parallel_build']} x "
            f"{plan['nvcc_threads']} |"
        )
    if naive:
        how = (
            "measured: it finished"
            if naive.get("measured_total_s")
            else f"ESTIMATED from ninja's logs; stopped at {naive['elapsed_s']} s with {len(naive['done_units'])} units done"
        )
        lines.append(
            f"| naive recipe (MAX_JOBS=4, serial extensions) | {naive['env']['TORCH_CUDA_ARCH_LIST']} | "
            f"{cell(naive_est, '{} s')} ({how}) | - | - | {naive['peak_rss_gib']} GiB | 4 x 1 x 1 |"
        )
    else:
        lines.append("| naive recipe | not run | | | | | |")
    lines += [
        "",
        "wall / (bound + serial phases before the first and after the last unit): "
        + ", ".join(
            f"{r['build']}: {cell(r.get('wall_over_bound_plus_serial'))} ({cell(r.get('serial_phases_s'))} s)"
            for r in (cold, warm)
            if not r.get("missing")
        ),
        f"speedup over the naive recipe: {cell(summary['speedup_vs_naive'], '{}x')}",
        "goals: " + ", ".join(f"{k} {'MET' if v else 'NOT MET'}" for k, v in goals.items()),
    ]
    text = "\n".join(lines) + "\n"
    (results / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    raise SystemExit(main(Path(sys.argv[1])))
