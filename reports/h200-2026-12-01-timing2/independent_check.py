"""Independent check of verify's two timing figures, second version: evidence, not product.

It builds the five cases of verify's timing layer (shapes, dtypes, implementations) from apex and torch
directly, not through verify, and times each implementation its own way:

  kernel time     torch.profiler with CPU + CUDA activity, one session per implementation (not interleaved,
                  no marker kernels), 20 calls; the sum of the durations of every CUDA device record (kernels,
                  memset, memcpy; not user-annotation spans such as torch's `Optimizer.step#...` range) / 20;
                  median of 3 sessions. verify: CUDA activity only, one interleaved session, marker kernels.
  host-inclusive  a plain loop: torch.cuda.synchronize(); t0 = time.perf_counter(); N calls;
                  torch.cuda.synchronize(); (perf_counter() - t0) / N, with the garbage collector as Python
                  has it (on). N: its own calibration (10 ms blocks, 5-200 calls). verify: CUDA events around
                  N calls, collector off inside the block (verify.timing.kernel_compare.host_block).
  graph replay    (information only) the call captured into a CUDA graph and replayed.

The whole process runs under verify.timing.host.SteadyHost, the host conditions verify's timing worker
uses (every thread on one core, one torch thread, GC heap frozen), so both timers see the same host.

Comparisons (the limits are the timing work's targets):
  B  host-inclusive, the target (10%): in each of 24 alternating rounds, for each implementation (the
     order of the implementations alternates too), the plain loop and verify's own timer
     (verify.timing.kernel_compare.host_block, the function verify's rounds call) time N calls back to back,
     which first alternating by round; the medians of the 24 are compared.
  C  verify's whole comparison (verify.timing.kernel_compare.compare on the very same callables, as the timing
     layer runs it, twice) against this script's figures: kernel time within 5% (a target); loop time
     shown (information: other rounds, seconds apart).
  A  the five verify reports (other processes): kernel time within 5% (a target); loop time shown
     (information: how far host speed moves from process to process).

    python independent_check.py OUT.json VERIFY_REPORT.json [VERIFY_REPORT.json ...]
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time

import torch
from torch import nn

ADAM_SHAPES = [(2048, 2048)] * 8 + [(1000,)] * 200 + [(4096,)] * 56
ADAM_HYPER = {"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
NORM_SHAPE = (8192, 4096)
KERNEL_CALLS, KERNEL_SESSIONS, WARMUP_MS, BLOCK_MS, ROUNDS_B, REPS_C = 20, 3, 60.0, 10.0, 24, 2
KERNEL_TOL, LOOP_TOL = 0.05, 0.10
SYNC_RECORDS = ("Context Sync", "Stream Sync", "Event Sync", "Stream Wait Event")
DEV = "cuda"


def adam_case(gen: torch.Generator) -> dict[str, object]:
    from apex.optimizers import FusedAdam

    params = [nn.Parameter(torch.randn(s, generator=gen, device=DEV) * 0.02) for s in ADAM_SHAPES]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, device=DEV) * 0.01
    return {
        "apex FusedAdam": FusedAdam(params, adam_w_mode=True, **ADAM_HYPER).step,
        "torch AdamW(foreach=True)": torch.optim.AdamW(params, foreach=True, **ADAM_HYPER).step,
        "torch AdamW(fused=True)": torch.optim.AdamW(params, fused=True, **ADAM_HYPER).step,
    }


def norm_case(kind: str, dtype: torch.dtype, gen: torch.Generator) -> dict[str, object]:
    from apex.normalization import FusedLayerNorm, FusedRMSNorm

    hidden = NORM_SHAPE[-1]
    x = torch.randn(NORM_SHAPE, generator=gen, device=DEV).to(dtype).requires_grad_(True)
    dy = torch.randn(NORM_SHAPE, generator=gen, device=DEV).to(dtype)
    weight = (torch.rand(hidden, generator=gen, device=DEV) + 0.5).to(dtype)
    bias = (torch.rand(hidden, generator=gen, device=DEV) - 0.5).to(dtype)
    pairs = (
        (FusedLayerNorm, nn.LayerNorm, "LayerNorm")
        if kind == "layer"
        else (FusedRMSNorm, nn.RMSNorm, "RMSNorm")
    )
    calls = {}
    for cls, name in ((pairs[0], f"apex Fused{pairs[2]}"), (pairs[1], f"torch nn.{pairs[2]}")):
        module = cls(hidden, eps=1e-5).to(device=DEV, dtype=dtype)
        with torch.no_grad():
            module.weight.copy_(weight)
            if kind == "layer":
                module.bias.copy_(bias)
        inputs = [x, *module.parameters()]
        calls[name] = (lambda m, i: lambda: torch.autograd.grad(m(x), i, dy))(module, inputs)
    return calls


CASES = {  # verify's timing check names -> (Apex feature, builder)
    "fused_adam.fp32": ("FusedAdam", adam_case),
    "fused_layer_norm.bf16": ("FusedLayerNorm", lambda g: norm_case("layer", torch.bfloat16, g)),
    "fused_layer_norm.fp32": ("FusedLayerNorm", lambda g: norm_case("layer", torch.float32, g)),
    "fused_rms_norm.bf16": ("FusedRMSNorm", lambda g: norm_case("rms", torch.bfloat16, g)),
    "fused_rms_norm.fp32": ("FusedRMSNorm", lambda g: norm_case("rms", torch.float32, g)),
}


def kernel_ms(fn) -> float:
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(KERNEL_CALLS):
            fn()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    total_us = sum(
        e.time_range.elapsed_us()
        for e in prof.events()
        if e.device_type == cuda
        and not e.name.startswith(SYNC_RECORDS)
        and not getattr(e, "is_user_annotation", False)
    )
    return total_us / KERNEL_CALLS / 1e3


def plain_loop_ms(fn, n: int) -> float:
    """The independent host-inclusive timer: wall clock around n calls, GPU idle before and drained after."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / n


def warm_up(fn) -> None:
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < WARMUP_MS:
        plain_loop_ms(fn, 3)


def calls_per_block(fn) -> int:
    return max(5, min(200, math.ceil(BLOCK_MS / plain_loop_ms(fn, 2))))


def graph_ms(fn, n: int) -> float | None:
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / n
    except Exception as exc:  # not capturable (host syncs, CPU-side state): information only
        print(f"  graph capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
        torch.cuda.synchronize()
        return None


def measure_case(case: str, feature: str, calls: dict, kernel_compare) -> dict[str, dict]:
    device = torch.device(DEV, torch.cuda.current_device())
    rows = {
        name: {"ours_kernel": [], "ours_loop": [], "verify_block": [], "verify_kernel": [], "verify_loop": []}
        for name in calls
    }
    for fn in calls.values():
        warm_up(fn)
    n = {name: calls_per_block(fn) for name, fn in calls.items()}
    names = list(calls)
    for r in range(ROUNDS_B):  # B: the plain loop and verify's timer, back to back, alternating
        for name in names if r % 2 == 0 else names[::-1]:
            fn, row = calls[name], rows[name]
            if r % 2 == 0:
                row["ours_loop"].append(plain_loop_ms(fn, n[name]))
                row["verify_block"].append(kernel_compare.host_block(fn, n[name], device)[0])
            else:
                row["verify_block"].append(kernel_compare.host_block(fn, n[name], device)[0])
                row["ours_loop"].append(plain_loop_ms(fn, n[name]))
    for _ in range(KERNEL_SESSIONS):
        for name, fn in calls.items():
            rows[name]["ours_kernel"].append(kernel_ms(fn))
    variants = [
        kernel_compare.Variant(name, "fused" if name.startswith("apex") else "native", (lambda f=fn: f))
        for name, fn in calls.items()
    ]
    for _ in range(REPS_C):  # C: verify's whole comparison on the same callables
        result = kernel_compare.compare(feature, case, variants, DEV)
        for v in result.variants:
            rows[v.name]["verify_kernel"].append(v.kernel_median)
            rows[v.name]["verify_loop"].append(v.host_median)
    for name, fn in calls.items():  # last: a refused capture must not disturb the figures above
        rows[name]["graph_ms"] = graph_ms(fn, n[name])
        rows[name]["calls_per_block"] = n[name]
    return rows


def verify_medians(report: dict) -> dict[str, dict[str, dict[str, float]]]:
    found: dict[str, dict[str, dict[str, float]]] = {}
    for check in report["checks"]:
        if check["layer"] != "timing" or "timing" not in check["details"]:
            continue
        t = check["details"]["timing"]
        found[check["name"]] = {
            impl["name"]: {
                "kernel_ms": (impl["kernel_time"] or {}).get("median_ms"),
                "loop_ms": (impl["host_inclusive"] or {}).get("median_ms"),
            }
            for impl in [t["fused"], *t["natives"]]
            if impl["status"] == "OK"
        }
    return found


def rel(a: float | None, b: float | None) -> float | None:
    return abs(a / b - 1) if a and b else None


def pct(v: float | None) -> str:
    return f"{100 * v:.1f}%" if v is not None else "n/a"


def main(argv: list[str]) -> int:
    from verify.timing import host as timing_host
    from verify.timing import kernel_compare  # verify's timer (B, C) and its host conditions

    out_path, report_paths = argv[0], argv[1:]
    torch.ones(1, device=DEV).add_(1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):  # CUPTI's first start
        torch.ones(1, device=DEV).add_(1)
    import apex.normalization  # noqa: F401  (loaded before the pinning: its threads get pinned too)
    import apex.optimizers  # noqa: F401

    steady = timing_host.SteadyHost()
    host = steady.start().to_json()
    print(f"host: {host}", flush=True)
    gen = torch.Generator(device=DEV).manual_seed(20261201)
    measured: dict[str, dict[str, dict]] = {}
    t0 = time.perf_counter()
    for case, (feature, build) in CASES.items():
        calls = build(gen)
        measured[case] = measure_case(case, feature, calls, kernel_compare)
        del calls
        torch.cuda.empty_cache()
        print(f"measured {case} ({time.perf_counter() - t0:.1f} s)", flush=True)
    host_after_mhz = timing_host.cpu_mhz(host["cpu"]) if host["cpu"] is not None else None
    steady.stop()
    runs = [verify_medians(json.load(open(p))) for p in report_paths]
    rows = []
    worst = {"A_kernel": 0.0, "B_loop": 0.0, "C_kernel": 0.0, "C_loop_info": 0.0, "A_loop_info": 0.0}
    for case, impls in measured.items():
        for name, m in impls.items():
            med = {
                k: statistics.median(m[k])
                for k in ("ours_kernel", "ours_loop", "verify_block", "verify_kernel", "verify_loop")
            }
            theirs = [run.get(case, {}).get(name, {}) for run in runs]
            ratio_b = statistics.median(v / o for v, o in zip(m["verify_block"], m["ours_loop"], strict=True))
            row = {
                "case": case,
                "implementation": name,
                "calls_per_block": m["calls_per_block"],
                "graph_ms": m["graph_ms"],
                "medians": med,
                "samples": {k: m[k] for k in med},
                "verify_reports": theirs,
                "B_paired_ratio_median": ratio_b,
                "B_loop_rel_diff": rel(med["verify_block"], med["ours_loop"]),
                "C_kernel_rel_diff": rel(med["verify_kernel"], med["ours_kernel"]),
                "C_loop_rel_diff_info": rel(med["verify_loop"], med["ours_loop"]),
                "A_kernel_max_rel_diff": max(
                    (
                        d
                        for d in (rel(t.get("kernel_ms"), med["ours_kernel"]) for t in theirs)
                        if d is not None
                    ),
                    default=None,
                ),
                "A_loop_max_rel_diff_info": max(
                    (d for d in (rel(t.get("loop_ms"), med["ours_loop"]) for t in theirs) if d is not None),
                    default=None,
                ),
            }
            for key, field in (
                ("A_kernel", "A_kernel_max_rel_diff"),
                ("B_loop", "B_loop_rel_diff"),
                ("C_kernel", "C_kernel_rel_diff"),
                ("C_loop_info", "C_loop_rel_diff_info"),
                ("A_loop_info", "A_loop_max_rel_diff_info"),
            ):
                if row[field] is not None:
                    worst[key] = max(worst[key], row[field])
            rows.append(row)
    missing = [
        f"{r['case']} {r['implementation']}"
        for r in rows
        if None in (r["A_kernel_max_rel_diff"], r["B_loop_rel_diff"], r["C_kernel_rel_diff"])
    ]
    ok = (
        worst["A_kernel"] <= KERNEL_TOL
        and worst["C_kernel"] <= KERNEL_TOL
        and worst["B_loop"] <= LOOP_TOL
        and not missing
    )  # a figure not measured is no agreement
    within = sum(1 for r in rows if r["B_loop_rel_diff"] is not None and r["B_loop_rel_diff"] <= LOOP_TOL)
    doc = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "reports": report_paths,
        "method": __doc__,
        "host": host,
        "cpu_mhz_after": host_after_mhz,
        "plan": {
            "kernel_calls": KERNEL_CALLS,
            "kernel_sessions": KERNEL_SESSIONS,
            "warmup_ms": WARMUP_MS,
            "block_ms": BLOCK_MS,
            "rounds_B": ROUNDS_B,
            "reps_C": REPS_C,
        },
        "tolerance": {"kernel": KERNEL_TOL, "loop": LOOP_TOL},
        "worst": worst,
        "loop_within_limit": f"{within} of {len(rows)}",
        "not_measured": missing,
        "agree": ok,
        "rows": rows,
    }
    with open(out_path, "w") as fh:
        json.dump(doc, fh, indent=1)

    print(
        f"{'case':22} {'implementation':26} | {'kernel ms':>9} {'C':>6} {'A: 5 reports':>30} {'max':>6} | "
        f"{'N':>3} {'B: verify/plain':>15} {'diff':>6} {'C loop':>7} {'diff':>6} {'5 reports (info)':>35} {'max':>6}"
        f" | {'graph':>6}"
    )
    for r in rows:
        md = r["medians"]
        k5 = " ".join(f"{t['kernel_ms']:.3f}" if t.get("kernel_ms") else "n/a" for t in r["verify_reports"])
        l5 = " ".join(f"{t['loop_ms']:.3f}" if t.get("loop_ms") else "n/a" for t in r["verify_reports"])
        graph = f"{r['graph_ms']:.3f}" if r["graph_ms"] else "n/a"
        print(
            f"{r['case']:22} {r['implementation']:26} | {md['ours_kernel']:9.3f} {pct(r['C_kernel_rel_diff']):>6} "
            f"{k5:>30} {pct(r['A_kernel_max_rel_diff']):>6} | {r['calls_per_block']:3d} "
            f"{md['verify_block']:.3f}/{md['ours_loop']:.3f} {pct(r['B_loop_rel_diff']):>6} "
            f"{md['verify_loop']:7.3f} {pct(r['C_loop_rel_diff_info']):>6} {l5:>35} "
            f"{pct(r['A_loop_max_rel_diff_info']):>6} | {graph:>6}"
        )
    print(
        f"kernel time: worst {pct(worst['A_kernel'])} against the five reports, {pct(worst['C_kernel'])} against "
        f"verify's compare() here (limit {100 * KERNEL_TOL:.0f}%); host-inclusive, interleaved with verify's timer: "
        f"worst {pct(worst['B_loop'])}, {within} of {len(rows)} within {100 * LOOP_TOL:.0f}%; information: "
        f"compare() here {pct(worst['C_loop_info'])}, across processes {pct(worst['A_loop_info'])}"
        + (f"; not measured: {', '.join(missing)}" if missing else "")
        + (": AGREE" if ok else ": DISAGREE")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
