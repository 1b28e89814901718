"""The guides' naive recipe, run for a bounded time, then its finish estimated from ninja's logs.

    python naive_bounded.py SRC ARCHS BOUND_S REFERENCE_MANIFEST OUT_JSON LOG

Runs `pip install -v --no-build-isolation .` in SRC with MAX_JOBS=4, APEX_CPP_EXT=1, APEX_CUDA_EXT=1,
TORCH_CUDA_ARCH_LIST=ARCHS and nothing else (no APEX_PARALLEL_BUILD, no nvcc --threads, no ccache), in its
own process group, stops the group after BOUND_S, and writes OUT_JSON: the units ninja finished (with
their walls), peak summed RSS, and two ESTIMATES of the full build's wall (never measured): the rate of
finished units weighted by the reference build's unit walls, and a simulation of the serial build (one
extension at a time, 4 jobs) on the reference's units scaled by how much slower the naive ran the same
units. Run from the repository root (imports toolchain).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from toolchain.builder import apex_setup, ninja_log  # noqa: E402
from toolchain.builder.process_tree import PeakSampler  # noqa: E402

NAIVE_JOBS = 4


def main(src: Path, archs: str, bound_s: float, reference: Path, out_json: Path, log: Path) -> int:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("APEX_PARALLEL_BUILD", "NVCC_APPEND_FLAGS", "PYTORCH_NVCC")
        and not k.startswith("CCACHE")
    }
    env.update(
        MAX_JOBS=str(NAIVE_JOBS),
        APEX_CPP_EXT="1",
        APEX_CUDA_EXT="1",
        TORCH_CUDA_ARCH_LIST=archs,
        TORCH_NO_COMPILER_WRAPPER="1",
    )
    cmd = [sys.executable, "-m", "pip", "install", "-v", "--no-build-isolation", "."]
    started, started_epoch = time.monotonic(), time.time()
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            cmd, cwd=src, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        with PeakSampler(proc.pid) as sampler:
            try:
                code = proc.wait(timeout=bound_s)
                stopped = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    code = proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    code = proc.wait()
                stopped = True
    elapsed = min(time.monotonic() - started, bound_s) if stopped else time.monotonic() - started
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # a compiler that outlived pip must not run into the next step
    except ProcessLookupError:
        pass
    naive = [u for found in ninja_log.read_build_dir(src / "build").values() for u in found]
    ref = json.loads(reference.read_text())["build"]["timing"]
    ref_walls = {f"{u['extension']}/{Path(u['output']).name}": u["wall_s"] for u in ref["units"]}
    done = {ninja_log.unit_key(u): u.wall_s for u in naive}
    record: dict = {
        "command": " ".join(cmd),
        "cwd": str(src),
        "env": {k: env[k] for k in ("MAX_JOBS", "APEX_CPP_EXT", "APEX_CUDA_EXT", "TORCH_CUDA_ARCH_LIST")},
        "bound_s": bound_s,
        "stopped_at_bound": stopped,
        "exit_code": code,
        "elapsed_s": round(elapsed, 1),
        "peak_rss_gib": round(sampler.peak_bytes / 2**30, 2),
        "done_units": [{"unit": k, "wall_s": round(v, 2)} for k, v in sorted(done.items())],
        "reference_manifest": str(reference),
    }
    if not stopped and code == 0:
        record["measured_total_s"] = round(elapsed, 1)
    rate = ninja_log.extrapolate(list(done), elapsed, ref_walls) if ref_walls else None
    record["estimate_by_rate"] = rate
    common = [k for k in done if ref_walls.get(k)]
    if common:
        scale = statistics.median(done[k] / ref_walls[k] for k in common)
        order = [m for m in apex_setup.read(src).all_modules()]
        by_ext: dict[str, list[float]] = {}
        for key, wall in ref_walls.items():
            by_ext.setdefault(key.split("/", 1)[0], []).append(wall * scale)
        names = [m for m in order if m in by_ext] + [m for m in by_ext if m not in order]
        links = ref.get("links_s", {})
        # plus the serial phases: the naive's own time before its first unit, the reference's after its last
        before = min(u.start_s for u in naive) - started_epoch
        after = ref.get("after_last_unit_s") or 0.0
        simulated = (
            before
            + after
            + ninja_log.simulate_serial([(n, by_ext[n], links.get(n, 0.0)) for n in names], NAIVE_JOBS)
        )
        record["estimate_by_simulation"] = {
            "estimated_total_s": round(simulated, 1),
            "scale": round(scale, 3),
            "method": "ESTIMATED, not measured: one extension at a time in setup.py order, "
            f"{NAIVE_JOBS} jobs each, slowest unit first; every reference unit wall x the median "
            f"naive/reference ratio of the {len(common)} units both finished; plus the naive's "
            "measured time before its first unit and the reference's time after its last",
        }
    out_json.write_text(json.dumps(record, indent=2) + "\n")
    est = (record.get("estimate_by_simulation") or {}).get("estimated_total_s")
    print(
        f"naive recipe: {'stopped at' if stopped else 'ended after'} {elapsed:.0f} s (exit {code}), "
        f"{len(done)} units done, peak {record['peak_rss_gib']} GiB; estimated total: by rate "
        f"{(rate or {}).get('estimated_total_s')} s, by simulation {est} s (estimates, not measured)"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 7:
        raise SystemExit(__doc__.split("\n\n")[1])
    a = sys.argv[1:]
    raise SystemExit(main(Path(a[0]), a[1], float(a[2]), Path(a[3]), Path(a[4]), Path(a[5])))
