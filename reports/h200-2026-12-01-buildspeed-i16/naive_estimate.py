"""The naive recipe's totals, ESTIMATED offline from its bounded run (call 2) and the builder's measured units.

    python naive_estimate.py NAIVE_JSON ONE_ARCH_MANIFEST FIVE_ARCH_MANIFEST OUT_JSON    (repository root)

Call 2's naive run (`build.py wheel --naive`) compiled 9.0+PTX, not the five archs: --naive dropped
--archs (fixed since), so torch picked the visible GPU's arch. It was stopped at 105 s with 9 units done.
1. The naive at 9.0+PTX: its 9 units against the same units in the builder's one-arch (9.0) cold build:
   scale = median(naive wall / builder CPU seconds) (naive: 4 compiles on 16 cores; builder: 37 at once,
   whose CPU seconds contention inflates); every unit's wall = scale x its one-arch CPU seconds
   (.cpp units, which the runner does not time: their walls in the builder's build x the .cpp scale
   measured the same way); then one extension at a time in setup.py order on 4 jobs, slowest first
   (ninja_log.simulate_serial), plus the measured time before the first unit and between extensions.
2. The naive at the five archs (not run): the same, on the five-arch cold build's units and the same scales.
Both ESTIMATED, not measured; the floor under 2. uses each extension's costliest unit only.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
from toolchain.builder import apex_setup, ninja_log  # noqa: E402

# Apex 6424da3b's source tree (its setup.py gives the extensions' order): $APEX_SRC, else the device's carry
SRC = Path(os.environ.get("APEX_SRC") or ".carry-i16/apex")
JOBS = 4


def units(manifest: Path) -> dict[str, dict]:
    rows = json.loads(manifest.read_text())["build"]["timing"]["units"]
    return {f"{u['extension']}/{Path(u['output']).name}": u for u in rows}


def walls(builder: dict[str, dict], nvcc_scale: float, cpp_scale: float) -> dict[str, float]:
    return {
        k: (u["cpu_s"] * nvcc_scale if u.get("cpu_s") else u["wall_s"] * cpp_scale)
        for k, u in builder.items()
    }


def serial(per_unit: dict[str, float], before: float, gap: float) -> tuple[float, float]:
    """(simulated serial total, floor: each extension's costliest unit only)."""
    by_ext: dict[str, list[float]] = {}
    for key, wall in per_unit.items():
        by_ext.setdefault(key.split("/", 1)[0], []).append(wall)
    order = [m for m in apex_setup.read(SRC).all_modules() if m in by_ext]
    total = before + ninja_log.simulate_serial([(n, by_ext[n], gap) for n in order], JOBS)
    return total, before + sum(max(v) for v in by_ext.values())


def main(naive_json: Path, one: Path, five: Path, out: Path) -> int:
    naive = json.loads(naive_json.read_text())
    done = {u["unit"]: u for u in naive["units_done"]}
    b1, b5 = units(one), units(five)
    nvcc = [done[k]["wall_s"] / b1[k]["cpu_s"] for k in done if b1.get(k, {}).get("cpu_s")]
    cpp = [done[k]["wall_s"] / b1[k]["wall_s"] for k in done if k in b1 and not b1[k].get("cpu_s")]
    nvcc_scale, cpp_scale = statistics.median(nvcc), statistics.median(cpp)
    before = min(u["start_s"] for u in naive["units_done"])
    gap = 0.5  # measured between apex_C's last unit and amp_C's first: 0.4 s (call 2 naive.json)
    one_total, one_floor = serial(walls(b1, nvcc_scale, cpp_scale), before, gap)
    five_total, five_floor = serial(walls(b5, nvcc_scale, cpp_scale), before, gap)
    record = {
        "naive_run": {k: naive[k] for k in ("elapsed_s", "stopped_at_bound", "peak_rss_gib")}
        | {
            "units_done": len(done),
            "arch_list": "9.0+PTX (torch's choice for the visible GPU; --archs was dropped)",
        },
        "scale_nvcc_units": {
            "median": round(nvcc_scale, 3),
            "n": len(nvcc),
            "range": [round(min(nvcc), 3), round(max(nvcc), 3)],
            "what": "naive wall / the same unit's CPU seconds in the builder's one-arch cold build",
        },
        "scale_cpp_units": {
            "median": round(cpp_scale, 3),
            "n": len(cpp),
            "what": "naive wall / the same unit's wall in the builder's one-arch cold build",
        },
        "before_first_unit_s": before,
        "naive_9.0_estimated_total_s": round(one_total, 1),
        "naive_five_archs_estimated_total_s": round(five_total, 1),
        "naive_five_archs_floor_s": round(five_floor, 1),
        "method": __doc__.split("\n\n")[1].strip() + " " + __doc__.split("\n\n")[2].strip(),
    }
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "method"}, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit(__doc__.split("\n\n")[1])
    raise SystemExit(main(*(Path(a) for a in sys.argv[1:])))
