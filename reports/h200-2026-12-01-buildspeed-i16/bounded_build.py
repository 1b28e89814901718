"""Run a build for at most BOUND_S seconds, then say what it did from ninja's logs (and estimate its end).

    python bounded_build.py BOUND_S SRC OUT_JSON [REFERENCE_MANIFEST] -- COMMAND...

Runs COMMAND (a `build.py wheel ...`) in its own session, samples the summed RSS of its process tree,
stops it after BOUND_S (SIGTERM, then SIGKILL for anything of the tree still alive 15 s later) and writes
OUT_JSON: elapsed, whether it was stopped, exit code, peak memory, every unit SRC/build's ninja logs hold
(on the log-mtime clock) and the extensions already linked. With REFERENCE_MANIFEST (the builder's cold
build of the same source and archs), a stopped build's total is ESTIMATED two ways, both labelled so:
- by rate: elapsed x (reference CPU seconds of all units / of the units done);
- by simulation of a serial build (one extension at a time in setup.py order, MAX_JOBS jobs each, slowest
  unit first): each unit's wall = its reference CPU seconds x the median (wall here / reference CPU) of the
  units done here, plus the measured time before the first unit and the median gap between extensions.
Reference CPU seconds: the unit runner's per-unit figure where the manifest has it, else the cost table's
prediction (toolchain/data/apex_unit_costs.json). Run from the code's root (imports toolchain).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
from toolchain.builder import apex_setup, ninja_log, unit_schedule  # noqa: E402
from toolchain.builder.process_tree import PeakSampler  # noqa: E402


def tree_pids(root: int) -> set[int]:
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
                parent[int(entry)] = int(text[text.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError):
                pass
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(p for p, pp in parent.items() if pp == pid and p not in found)
    return found


def reference_cpu(manifest: Path, n_archs: int) -> tuple[dict[str, float], dict[str, float]]:
    """(every unit's reference CPU seconds, those the unit runner measured in the reference build)."""
    costs = {k: c.cpu_s(n_archs) for k, c in unit_schedule.load_costs().items()}
    build = json.loads(manifest.read_text())["build"]
    measured = {
        f"{u['extension']}/{Path(u['output']).name}": u["cpu_s"]
        for u in build.get("timing", {}).get("units", [])
        if u.get("cpu_s")
    }
    return {**costs, **measured}, measured


def serial_floor(measured: dict[str, float], before_s: float, jobs: int) -> dict:
    """A floor under a serial build's total: one extension at a time, each at least its costliest unit and
    at least its units' CPU seconds / jobs. Only units the unit runner measured count (nvcc units: run
    without --threads they use one core at a time, so a unit's wall is at least its CPU seconds)."""
    by_ext: dict[str, list[float]] = {}
    for key, cpu in measured.items():
        by_ext.setdefault(key.split("/", 1)[0], []).append(cpu)
    per_ext = {ext: max(max(cpus), sum(cpus) / jobs) for ext, cpus in by_ext.items()}
    return {
        "floor_total_s": round(before_s + sum(per_ext.values()), 1),
        "per_extension_s": {k: round(v, 1) for k, v in sorted(per_ext.items())},
        "method": "a FLOOR, not an estimate: the measured time before the first unit + for each extension "
        f"max(its costliest nvcc unit, its nvcc units' CPU seconds / {jobs} jobs), CPU seconds as the unit "
        "runner measured them in the reference build (under that build's contention); .cpp units, links and "
        "packing counted as zero",
    }


def estimate(
    src: Path,
    done: list[ninja_log.Unit],
    elapsed: float,
    started: float,
    ref: dict[str, float],
    jobs: int,
    measured: dict[str, float],
) -> dict:
    keys = {ninja_log.unit_key(u): u for u in done}
    rate = ninja_log.extrapolate(list(keys), elapsed, ref)
    before = min(u.start_s for u in done) - started
    floor = serial_floor(measured, before, jobs)
    common = [k for k in keys if ref.get(k)]
    if not common:
        return {"estimate_by_rate": rate, "serial_floor": floor, "estimate_by_simulation": None}
    scale = statistics.median(keys[k].wall_s / ref[k] for k in common)
    by_ext: dict[str, list[float]] = {}
    for key, cpu in ref.items():
        by_ext.setdefault(key.split("/", 1)[0], []).append(cpu * scale)
    order = [m for m in apex_setup.read(src).all_modules() if m in by_ext]
    spans = {}
    for u in done:
        lo, hi = spans.get(u.extension, (u.start_s, u.end_s))
        spans[u.extension] = (min(lo, u.start_s), max(hi, u.end_s))
    ordered = sorted(spans.values())
    gaps = [b[0] - a[1] for a, b in zip(ordered, ordered[1:], strict=False) if b[0] >= a[1]]
    gap = statistics.median(gaps) if gaps else 2.0
    total = before + ninja_log.simulate_serial([(n, by_ext[n], gap) for n in order], jobs)
    return {
        "estimate_by_rate": rate,
        "serial_floor": floor,
        "estimate_by_simulation": {
            "estimated_total_s": round(total, 1),
            "scale_wall_per_reference_cpu": round(scale, 3),
            "units_compared": [k for k in common],
            "gap_between_extensions_s": round(gap, 1),
            "before_first_unit_s": round(before, 1),
            "method": f"ESTIMATED, not measured: one extension at a time in setup.py order, {jobs} jobs each, "
            "slowest unit first; each unit's wall = its reference CPU seconds x the median wall / "
            "reference CPU of the units done here; plus the time before the first unit and the median "
            "gap between extensions measured here",
        },
    }


def _ref_pair(reference: Path, archs: str, jobs: int) -> tuple[dict, int, dict]:
    ref, measured = reference_cpu(reference, len(archs.split(";")))
    return ref, jobs, measured


def main(bound_s: float, src: Path, out_json: Path, reference: Path | None, cmd: list[str]) -> int:
    started, t0 = time.time(), time.monotonic()
    proc = subprocess.Popen(cmd, start_new_session=True)
    stopped = False
    with PeakSampler(proc.pid) as sampler:
        try:
            code = proc.wait(timeout=bound_s)
        except subprocess.TimeoutExpired:
            stopped, pids = True, tree_pids(proc.pid)
            elapsed = time.monotonic() - t0
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                code = None
            for pid in pids:  # pip runs in its own session: whatever of the tree outlived the builder goes
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if code is None:
                code = proc.wait()
    if not stopped:
        elapsed = time.monotonic() - t0
    by_ext = ninja_log.read_build_dir(src / "build")
    done = [u for found in by_ext.values() for u in found]
    linked = sorted(ninja_log.library_mtimes(src / "build"))
    record = {
        "command": cmd,
        "bound_s": bound_s,
        "stopped_at_bound": stopped,
        "exit_code": code,
        "elapsed_s": round(elapsed, 1),
        "peak_rss_gib": round(sampler.peak_bytes / 2**30, 2),
        "units_done": [
            {
                "unit": ninja_log.unit_key(u),
                "start_s": round(u.start_s - started, 1),
                "wall_s": round(u.wall_s, 1),
            }
            for u in sorted(done, key=lambda u: u.end_s)
        ],
        "extensions_linked": linked,
        "in_flight": dict(zip(("peak_units", "mean_units"), ninja_log.in_flight(done), strict=True)),
    }
    if reference and stopped and done:
        archs = cmd[cmd.index("--archs") + 1] if "--archs" in cmd else "9.0"
        jobs = 4 if "--naive" in cmd else 1  # --naive: MAX_JOBS=4, one extension at a time
        record.update(estimate(src, done, elapsed, started, *_ref_pair(reference, archs, jobs)))
        record["reference_manifest"] = str(reference)
    out_json.write_text(json.dumps(record, indent=1) + "\n")
    sim = (record.get("estimate_by_simulation") or {}).get("estimated_total_s")
    rate = (record.get("estimate_by_rate") or {}).get("estimated_total_s")
    floor = (record.get("serial_floor") or {}).get("floor_total_s")
    print(
        f"bounded build: {'stopped at' if stopped else 'ended after'} {elapsed:.0f} s (exit {code}), "
        f"{len(done)} units done, {len(linked)} extensions linked, peak {record['peak_rss_gib']} GiB"
        + (f"; ESTIMATED total: {sim} s by simulation, {rate} s by rate; floor {floor} s" if floor else "")
    )
    return 0


if __name__ == "__main__":
    if "--" not in sys.argv or sys.argv.index("--") not in (4, 5):
        raise SystemExit(__doc__.split("\n\n")[1])
    i = sys.argv.index("--")
    a = sys.argv[1:i]
    raise SystemExit(
        main(float(a[0]), Path(a[1]), Path(a[2]), Path(a[3]) if len(a) > 3 else None, sys.argv[i + 1 :])
    )
