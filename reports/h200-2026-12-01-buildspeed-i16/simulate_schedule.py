"""A fluid model of how the kernel shares 16 cores among the compile units, to choose the schedule's rule.

    python simulate_schedule.py [CALL1_RESULTS]     (repository root; CALL1_RESULTS: the extracted call1/)

Every unit starts at 0 (all in flight). Each step, the cores go to the runnable threads by CFS weight
(1.25 ** -nice per thread), no thread above one core (water-filling); a unit runs one thread during its
host phases (half of host_s before the device work, half after) and its nvcc threads in between. Costs:
toolchain/data/apex_unit_costs.json. With CALL1_RESULTS it first replays call 1's own schedules (from its
manifests) on these costs and prints the measured unit phase beside them: the model's error.
An estimate to choose parameters with, not a measurement.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
from toolchain.builder import unit_schedule  # noqa: E402

CORES = 16
COSTS = unit_schedule.load_costs()
EXTENSIONS = {k.split("/", 1)[0] for k in COSTS}


def simulate(n_archs: int, plan: dict[str, tuple[int, int]], step: float = 0.25) -> float:
    jobs = [
        {
            "key": k,
            "cost": c.cpu_s(n_archs),
            "host": c.host_s if c.nvcc else c.cpu_s(n_archs),
            "done": 0.0,
            "threads": plan.get(k, (1, 0))[0],
            "weight": unit_schedule.NICE_STEP ** -plan.get(k, (1, 0))[1],
        }
        for k, c in COSTS.items()
    ]
    t = 0.0
    while any(j["done"] < j["cost"] for j in jobs):
        running = []
        for j in jobs:
            if j["done"] < j["cost"]:
                serial = j["done"] < j["host"] / 2 or j["done"] > j["cost"] - j["host"] / 2
                running.append((j, 1 if serial else j["threads"]))
        cores, left, rate = float(CORES), list(running), {}
        while left:  # water-filling: threads whose share exceeds one core get one core
            total = sum(j["weight"] * n for j, n in left)
            capped = [(j, n) for j, n in left if cores * j["weight"] / total >= 1]
            if not capped:
                rate.update({j["key"]: n * cores * j["weight"] / total for j, n in left})
                break
            for j, n in capped:
                rate[j["key"]] = n
                cores -= n
            left = [x for x in left if x not in capped]
        for j, _ in running:
            j["done"] += rate.get(j["key"], 0.0) * step
        t += step
    return t


def rule(n_archs: int, exponent: float, margin: float) -> dict[str, tuple[int, int]]:
    saved = unit_schedule.PRIORITY_EXPONENT, unit_schedule.THREAD_MARGIN
    unit_schedule.PRIORITY_EXPONENT, unit_schedule.THREAD_MARGIN = exponent, margin
    try:
        return unit_schedule.schedule(COSTS, EXTENSIONS, n_archs, CORES).units
    finally:
        unit_schedule.PRIORITY_EXPONENT, unit_schedule.THREAD_MARGIN = saved


def main(call1: Path | None) -> int:
    work = {n: sum(c.cpu_s(n) for c in COSTS.values()) / CORES for n in (1, 5)}
    if call1:
        for name, n in (("one-cold", 1), ("five-cold", 5)):
            manifest = json.loads((call1 / name / "build-manifest.json").read_text())
            units = manifest["parallelism"]["unit_schedule"]["units"]
            plan = {k: (v["threads"], v["nice"]) for k, v in units.items()}
            measured = max(u["end_s"] for u in manifest["build"]["timing"]["units"])
            print(f"call 1 {name}: measured unit phase {measured:.1f} s, model {simulate(n, plan):.1f} s")
    print(f"work / cores: {work[1]:.1f} s at one arch, {work[5]:.1f} s at five")
    print("exponent margin | one arch: unit phase / work | five archs: unit phase / work")
    for exponent in (1, 2, 3):
        for margin in (0.75, 0.5):
            one, five = simulate(1, rule(1, exponent, margin)), simulate(5, rule(5, exponent, margin))
            print(
                f"{exponent:8} {margin:6} | {one:6.1f} s {one / work[1]:.3f} | {five:6.1f} s {five / work[5]:.3f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
