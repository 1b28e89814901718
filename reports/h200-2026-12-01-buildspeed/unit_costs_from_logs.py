"""toolchain/data/apex_unit_costs.json from the two 2026-12-01 calls' ninja logs (what the schedule ranks by).

    python unit_costs_from_logs.py APEX_SRC OUT_JSON     (run from the repository root)

Both calls started every unit at once (MAX_JOBS=15 x APEX_PARALLEL_BUILD=12) on 16 cores, so the kernel
shared the cores evenly among the running compiler threads (processor sharing). A unit's CPU seconds are
then rebuilt from the ends alone: between two consecutive ends every running thread got min(1, 16 / threads
running) of a core. Call 2 (one arch, --threads 1): the rebuilt total is 1618 s against 1642 CPU seconds
measured by getrusage, so the rebuild holds to 1.5%. Call 1 (five archs, --threads 2 for .cu units) was
stopped at 274 s with scaled_upper_triang_masked_softmax_cuda.o unfinished: its five-arch cost is its
one-arch cost x the five/one ratio of the most similar unit (scaled_softmax_cuda.o), and marked so.
Each unit: cost(archs) = host_s + archs x device_s_per_arch, fitted through the two points.
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from toolchain.builder import ninja_log  # noqa: E402

HERE = Path(__file__).resolve().parent
CORES = 16
UNFINISHED = "scaled_upper_triang_masked_softmax_cuda/scaled_upper_triang_masked_softmax_cuda.o"
SIMILAR = "scaled_softmax_cuda/scaled_softmax_cuda.o"


def load(tar: Path) -> dict[str, tuple[float, float]]:
    """{extension/object: (start s, end s)} on each log's own clock (every unit started within 50 ms)."""
    with tempfile.TemporaryDirectory() as work:
        with tarfile.open(tar) as archive:
            archive.extractall(work, filter="data")
        found = {}
        for log in Path(work).glob("build/temp.*/*/.ninja_log"):
            for e in ninja_log.parse(log.read_text()):
                found[f"{log.parent.name}/{Path(e.output).name}"] = (e.start_ms / 1e3, e.end_ms / 1e3)
        return found


def rebuild_cpu(spans: dict[str, tuple[float, float]], threads: dict[str, int]) -> dict[str, float]:
    work = dict.fromkeys(spans, 0.0)
    previous = 0.0
    for t in sorted({end for _, end in spans.values()}):
        running = [k for k, (_, end) in spans.items() if end >= t]
        share = min(1.0, CORES / sum(threads[k] for k in running))
        for k in running:
            work[k] += (t - previous) * threads[k] * share
        previous = t
    return work


def is_cuda(src: Path, key: str) -> bool:
    stem = Path(key).stem
    return any(src.glob(f"csrc/**/{stem}.cu"))


def main(src: Path, out: Path) -> int:
    one = load(HERE / "call2-one-arch" / "cold" / "ninja-logs.tar.gz")
    five = load(HERE / "call1-five-archs" / "cold" / "ninja-logs.tar.gz")
    nvcc = {k: is_cuda(src, k) for k in one}
    cpu1 = rebuild_cpu(one, dict.fromkeys(one, 1))
    five[UNFINISHED] = (0.0, 274.0)  # still running when the call stopped: rebuilt only up to 274 s
    cpu5 = rebuild_cpu(five, {k: 2 if nvcc[k] else 1 for k in five})
    cpu5[UNFINISHED] = cpu1[UNFINISHED] * cpu5[SIMILAR] / cpu1[SIMILAR]
    units = {}
    for key in sorted(one, key=lambda k: -cpu5[k]):
        device = max(0.0, (cpu5[key] - cpu1[key]) / 4)
        units[key] = {
            "host_s": round(cpu1[key] - device, 1),
            "device_s_per_arch": round(device, 1),
            "nvcc": nvcc[key],
        }
        if key == UNFINISHED:
            units[key]["note"] = f"five-arch cost = one-arch x the ratio of {SIMILAR} (unfinished in call 1)"
    record = {
        "_about": "Predicted CPU seconds of each Apex compile unit (Apex 6424da3b, torch 2.11, nvcc 13.0, "
        "H200 host, 16 cores): cost(archs) = host_s + archs x device_s_per_arch. Only the ratios "
        "matter: toolchain/builder/unit_schedule.py gives each nvcc unit a CPU share in proportion "
        "to its cost. Rebuilt by reports/h200-2026-12-01-buildspeed/unit_costs_from_logs.py from "
        "the ninja logs of the 2026-12-01 one-arch and five-arch calls (processor-sharing "
        "reconstruction; its docstring says how and how well it holds).",
        "apex_commit": "6424da3b4faa6c8f062da4a48c424fff3f02d42d",
        "units": units,
    }
    out.write_text(json.dumps(record, indent=1) + "\n")
    total1 = sum(cpu1.values())
    total5 = sum(u["host_s"] + 5 * u["device_s_per_arch"] for u in units.values())
    print(
        f"{len(units)} units; one arch {total1:.0f} CPU s (/16 = {total1 / CORES:.0f} s), five archs "
        f"{total5:.0f} CPU s (/16 = {total5 / CORES:.0f} s); slowest at five archs {next(iter(units))}"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    raise SystemExit(main(Path(sys.argv[1]), Path(sys.argv[2])))
