"""Refit toolchain/data/apex_unit_costs.json from the unit runner's measured CPU seconds (call 1).

    python unit_costs_from_runner.py ONE_ARCH_MANIFEST FIVE_ARCH_MANIFEST TABLE     (repository root)

For every nvcc unit both cold builds timed (unit_runner.py: wait4 CPU seconds of its process tree), the
two points (1 arch, 5 archs) give host_s and device_s_per_arch exactly; the .cpp units (not wrapped, no
CPU figure) keep the processor-sharing reconstruction of the earlier table. The CPU seconds were measured
under the build's own contention (16 busy cores, no SMT on this host: 1 thread per core).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cpu_by_unit(manifest: Path) -> dict[str, float]:
    units = json.loads(manifest.read_text())["build"]["timing"]["units"]
    return {f"{u['extension']}/{Path(u['output']).name}": u["cpu_s"] for u in units if u.get("cpu_s")}


def main(one: Path, five: Path, table: Path) -> int:
    c1, c5 = cpu_by_unit(one), cpu_by_unit(five)
    record = json.loads(table.read_text())
    for key, unit in record["units"].items():
        if key in c1 and key in c5:
            device = (c5[key] - c1[key]) / 4
            unit.update(
                host_s=round(c1[key] - device, 1),
                device_s_per_arch=round(device, 1),
                source="measured: unit runner CPU seconds, 1 and 5 archs",
            )
            unit.pop("note", None)
        else:
            unit["source"] = "reconstructed from ninja walls (processor sharing), 2026-12-01 calls"
    record["units"] = dict(
        sorted(record["units"].items(), key=lambda kv: -(kv[1]["host_s"] + 5 * kv[1]["device_s_per_arch"]))
    )
    record["_about"] = (
        "Predicted CPU seconds of each Apex compile unit (Apex 6424da3b, torch 2.11, nvcc 13.0, H200 host, "
        "16 cores): cost(archs) = host_s + archs x device_s_per_arch. Only the ratios matter: "
        "toolchain/builder/unit_schedule.py ranks the nvcc units by them. nvcc units: fitted through the CPU "
        "seconds the unit runner measured in the one-arch and five-arch cold builds of "
        "reports/h200-2026-12-01-buildspeed-i16 (call 1; unit_costs_from_runner.py); .cpp units: rebuilt from "
        "the ninja logs of the earlier 2026-12-01 calls (reports/h200-2026-12-01-buildspeed/unit_costs_from_logs.py)."
    )
    table.write_text(json.dumps(record, indent=1) + "\n")
    total5 = sum(u["host_s"] + 5 * u["device_s_per_arch"] for u in record["units"].values())
    total1 = sum(u["host_s"] + u["device_s_per_arch"] for u in record["units"].values())
    print(
        f"{sum(k in c1 and k in c5 for k in record['units'])} units refitted; predicted {total1:.0f} CPU s "
        f"at one arch, {total5:.0f} at five"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__.split("\n\n")[1])
    raise SystemExit(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
