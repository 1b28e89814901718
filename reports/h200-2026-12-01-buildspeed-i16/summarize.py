"""The table of one session's build-speed calls, from the files they wrote (nothing typed by hand).

    python summarize.py RESULTS_DIR [RESULTS_DIR ...]

Reads every `<name>/build-manifest.json` (five-cold, five-warm, one-cold, one-warm), `naive.json` and
`four-core.json` under the given folders plus `meminfo.txt`, writes summary.md / summary.json into the first
folder and prints the table with the issue's goals.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GOAL_RATIO, GOAL_SPEEDUP, GOAL_MEMORY, GOAL_WARM_S = 1.25, 4.0, 0.8, 15.0
BUILDS = (
    ("five-cold", "builder, five archs, cold ccache"),
    ("five-warm", "builder, five archs, warm ccache"),
    ("five-warm-stored", "builder, five archs, warm ccache, --wheel-compression stored"),
    ("one-cold", "builder, one arch (9.0), cold ccache"),
    ("one-warm", "builder, one arch (9.0), warm ccache"),
    ("one-warm-stored", "builder, one arch (9.0), warm ccache, --wheel-compression stored"),
)


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _find(folders: list[Path], name: str) -> Path | None:
    return next((f / name for f in folders if (f / name).exists()), None)


def mem_available_gib(meminfo: Path | None) -> float | None:
    if meminfo is None:
        return None
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return None


def row(name: str, manifest: dict, available: float | None) -> dict:
    build, par = manifest["build"], manifest["parallelism"]
    timing = build.get("timing", {})
    bound = timing.get("lower_bound") or {}
    peak = build["peak_rss_mb"] / 1024
    stats = build.get("ccache", {}).get("stats") or {}
    return {
        "build": name,
        "archs": manifest.get("arch_list"),
        "wall_s": build["wall_s"],
        "cpu_s": build.get("cpu_s"),
        "lower_bound_s": bound.get("lower_bound_s"),
        "chain_s": bound.get("chain_s"),
        "chain_unit": bound.get("chain_unit"),
        "chain_from": bound.get("chain_from"),
        "work_s": bound.get("work_s"),
        "wall_over_bound": bound.get("wall_over_bound"),
        "before_first_unit_s": timing.get("before_first_unit_s"),
        "after_last_unit_s": timing.get("after_last_unit_s"),
        "last_unit_end_s": max((u["end_s"] for u in timing.get("units", [])), default=None),
        "units": len(timing.get("units", [])),
        "in_flight": timing.get("in_flight"),
        "runner": timing.get("runner"),
        "peak_gib": round(peak, 1),
        "peak_of_available": round(peak / available, 3) if available else None,
        "ccache": f"{stats.get('direct_cache_hit', 0) + stats.get('preprocessed_cache_hit', 0)} hits / "
        f"{stats.get('cache_miss', 0)} misses"
        if stats
        else "-",
        "plan": f"{par.get('max_jobs')} x {par.get('apex_parallel_build')} x {par.get('nvcc_threads')}"
        + (" + schedule" if par.get("unit_schedule") else ""),
    }


def main(folders: list[Path]) -> int:
    available = mem_available_gib(_find(folders, "meminfo.txt"))
    rows = {}
    for key, name in BUILDS:
        path = _find(folders, f"{key}/build-manifest.json")
        rows[key] = row(name, _load(path), available) if path else {"build": name, "missing": True}
    naive = _load(_find(folders, "naive.json") or Path("/nonexistent"))
    four = _load(_find(folders, "four-core.json") or Path("/nonexistent"))
    naive_total = None
    if naive:
        naive_total = (
            naive["elapsed_s"]
            if not naive["stopped_at_bound"] and naive["exit_code"] == 0
            else (naive.get("estimate_by_simulation") or {}).get("estimated_total_s")
        )
    cold = rows["five-cold"]
    warm1 = min(
        (rows[k] for k in ("one-warm", "one-warm-stored") if not rows[k].get("missing")),
        key=lambda r: r.get("wall_s") or 99,
        default={},
    )
    goals = {
        "five-arch cold within 1.25x of its lower bound": (cold.get("wall_over_bound") or 99) <= GOAL_RATIO,
        "five-arch cold >= 4x faster than the naive recipe": bool(
            naive_total and cold.get("wall_s") and naive_total / cold["wall_s"] >= GOAL_SPEEDUP
        ),
        "peak memory within 80% of available": all(
            (r.get("peak_of_available") or 99) <= GOAL_MEMORY for r in rows.values() if not r.get("missing")
        ),
        "one-arch warm rebuild under 15 s": (warm1.get("wall_s") or 99) < GOAL_WARM_S,
    }
    summary = {
        "mem_available_gib": available,
        "rows": rows,
        "naive": naive,
        "naive_total_s": naive_total,
        "four_core": four,
        "speedup_vs_naive": round(naive_total / cold["wall_s"], 2)
        if naive_total and cold.get("wall_s")
        else None,
        "goals": goals,
    }
    (folders[0] / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")

    def cell(value, fmt="{}") -> str:
        return "-" if value is None else fmt.format(value)

    lines = [
        "| build | archs | wall | lower bound (chain / work) | wall / bound | peak memory | plan | ccache |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rows.values():
        if r.get("missing"):
            lines.append(f"| {r['build']} | not run or failed | | | | | | |")
            continue
        lines.append(
            f"| {r['build']} | {r['archs']} | {r['wall_s']} s | {cell(r['lower_bound_s'], '{} s')} "
            f"({cell(r['chain_s'])} / {cell(r['work_s'])}) | {cell(r['wall_over_bound'])} | "
            f"{r['peak_gib']} GiB ({cell(r['peak_of_available'], '{:.0%}')}) | {r['plan']} | {r['ccache']} |"
        )
    if naive:
        how = (
            "measured: it finished"
            if naive_total == naive["elapsed_s"]
            else f"ESTIMATED from ninja's logs: stopped at {naive['elapsed_s']} s with {len(naive['units_done'])} "
            f"units done; by rate {cell((naive.get('estimate_by_rate') or {}).get('estimated_total_s'))} s"
        )
        lines.append(
            f"| naive recipe (`build.py wheel --naive`: MAX_JOBS=4, serial, no ccache) | same five | "
            f"{cell(naive_total, '{} s')} ({how}) | - | - | {naive['peak_rss_gib']} GiB | 4 x 1 x 1 | off |"
        )
    if four:
        lines.append(
            f"| 4-core / 16 GiB emulated (`taskset -c 0-3`, `--memory-gib 16`), five archs | same five | "
            f"stopped at {four['elapsed_s']} s ({len(four['units_done'])} units done) | - | - | "
            f"{four['peak_rss_gib']} GiB ({four['peak_rss_gib'] / 16:.0%} of 16) | see its reason | cold |"
        )
    lines += [
        "",
        f"MemAvailable at the start: {cell(available, '{:.1f}')} GiB; speedup over the naive recipe: "
        f"{cell(summary['speedup_vs_naive'], '{}x')}",
        "goals: " + "; ".join(f"{k}: {'MET' if v else 'NOT MET'}" for k, v in goals.items()),
    ]
    text = "\n".join(lines) + "\n"
    (folders[0] / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    raise SystemExit(main([Path(a) for a in sys.argv[1:]]))
