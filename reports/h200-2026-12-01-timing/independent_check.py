"""Independent check of verify's two timing figures (issue 9): evidence, not product. Standalone: it does
not import verify; it builds the same five cases (shapes, dtypes, implementations) from apex and torch
directly and times them its own way:

  kernel time     torch.profiler with CPU + CUDA activity, one session per implementation (not interleaved,
                  no marker kernels), K calls; the sum of the durations of every CUDA device event (kernels,
                  memset, memcpy) / K. verify uses CUDA activity only, one interleaved session, markers.
  host-inclusive  a plain time.perf_counter loop with torch.cuda.synchronize() before and after N calls, / N,
                  median of 5 loops. verify uses CUDA events around blocks of calls, interleaved rounds.
  graph replay    (information only) the call captured into a CUDA graph and replayed; kernel time plus
                  the launch gaps inside the graph. Skipped where capture fails.

    python independent_check.py OUT.json VERIFY_REPORT.json [VERIFY_REPORT.json ...]

prints, per timing and implementation, verify's medians (each report) against these, and whether they agree
within 5% (kernel) and 10% (host-inclusive); OUT.json holds every number.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
from torch import nn

ADAM_SHAPES = [(2048, 2048)] * 8 + [(1000,)] * 200 + [(4096,)] * 56
ADAM_HYPER = {"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
NORM_SHAPE = (8192, 4096)
KERNEL_CALLS, LOOP_CALLS, LOOPS, WARMUP = 20, 100, 5, 5
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
    pairs = ((FusedLayerNorm, nn.LayerNorm, "LayerNorm") if kind == "layer" else (FusedRMSNorm, nn.RMSNorm, "RMSNorm"))
    calls = {}
    for cls, name in ((pairs[0], f"apex Fused{pairs[2]}"), (pairs[1], f"torch nn.{pairs[2]}")):
        module = cls(hidden, eps=1e-5).to(device=DEV, dtype=dtype)
        with torch.no_grad():
            module.weight.copy_(weight)
            if kind == "layer":
                module.bias.copy_(bias)
        inputs = [x, *module.parameters()]
        calls[name] = (lambda m, i: (lambda: torch.autograd.grad(m(x), i, dy)))(module, inputs)
    return calls


def kernel_ms(fn) -> float:
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(KERNEL_CALLS):
            fn()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    total_us = sum(e.time_range.elapsed_us() for e in prof.events()
                   if e.device_type == cuda and not e.name.startswith(SYNC_RECORDS))
    return total_us / KERNEL_CALLS / 1e3


def loop_ms(fn) -> float:
    per_call = []
    for _ in range(LOOPS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(LOOP_CALLS):
            fn()
        torch.cuda.synchronize()
        per_call.append((time.perf_counter() - t0) * 1e3 / LOOP_CALLS)
    return statistics.median(per_call)


def graph_ms(fn) -> float | None:
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
        for _ in range(LOOP_CALLS):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / LOOP_CALLS
    except Exception as exc:  # not capturable (host syncs, CPU-side state): information only
        print(f"  graph capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
        torch.cuda.synchronize()
        return None


CASES = {  # verify's timing check names
    "fused_adam.fp32": lambda g: adam_case(g),
    "fused_layer_norm.bf16": lambda g: norm_case("layer", torch.bfloat16, g),
    "fused_layer_norm.fp32": lambda g: norm_case("layer", torch.float32, g),
    "fused_rms_norm.bf16": lambda g: norm_case("rms", torch.bfloat16, g),
    "fused_rms_norm.fp32": lambda g: norm_case("rms", torch.float32, g),
}


def measure() -> dict[str, dict[str, dict[str, float | None]]]:
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    gen = torch.Generator(device=DEV).manual_seed(20261201)
    for case, build in CASES.items():
        calls = build(gen)
        out[case] = {}
        for name, fn in calls.items():
            for _ in range(WARMUP):
                fn()
            out[case][name] = {"kernel_ms": kernel_ms(fn), "loop_ms": loop_ms(fn)}
        for name, fn in calls.items():  # last: a failed capture must not disturb the figures above
            out[case][name]["graph_ms"] = graph_ms(fn)
        del calls
        torch.cuda.empty_cache()
        print(f"measured {case}", flush=True)
    return out


def verify_medians(report: dict) -> dict[str, dict[str, dict[str, float]]]:
    found: dict[str, dict[str, dict[str, float]]] = {}
    for check in report["checks"]:
        if check["layer"] != "timing" or "timing" not in check["details"]:
            continue
        t = check["details"]["timing"]
        found[check["name"]] = {
            impl["name"]: {"kernel_ms": (impl["kernel_time"] or {}).get("median_ms"),
                           "loop_ms": (impl["host_inclusive"] or {}).get("median_ms")}
            for impl in [t["fused"], *t["natives"]] if impl["status"] == "OK"}
    return found


def main(argv: list[str]) -> int:
    out_path, report_paths = argv[0], argv[1:]
    torch.ones(1, device=DEV).add_(1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):  # CUPTI's first start
        torch.ones(1, device=DEV).add_(1)
    ours = measure()
    reports = [json.load(open(p)) for p in report_paths]
    runs = [verify_medians(r) for r in reports]
    rows, worst = [], {"kernel_ms": 0.0, "loop_ms": 0.0}
    for case, impls in ours.items():
        for name, mine in impls.items():
            theirs = [run.get(case, {}).get(name, {}) for run in runs]
            row = {"case": case, "implementation": name, **mine, "verify": theirs}
            for key in ("kernel_ms", "loop_ms"):
                devs = [abs(t[key] / mine[key] - 1) for t in theirs if t.get(key)]
                row[f"{key}_max_rel_diff"] = max(devs) if devs else None
                if devs:
                    worst[key] = max(worst[key], max(devs))
            rows.append(row)
    ok = worst["kernel_ms"] <= KERNEL_TOL and worst["loop_ms"] <= LOOP_TOL
    doc = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "reports": report_paths,
           "method": __doc__, "kernel_calls": KERNEL_CALLS, "loop_calls": LOOP_CALLS, "loops": LOOPS,
           "tolerance": {"kernel_ms": KERNEL_TOL, "loop_ms": LOOP_TOL}, "worst": worst, "agree": ok, "rows": rows}
    with open(out_path, "w") as fh:
        json.dump(doc, fh, indent=1)
    print(f"{'case':24} {'implementation':28} {'kernel ms':>9} {'verify (5 runs)':>36} {'max diff':>8}"
          f" {'loop ms':>8} {'verify (5 runs)':>36} {'max diff':>8} {'graph ms':>8}")
    for r in rows:
        k = " ".join(f"{t['kernel_ms']:.3f}" if t.get("kernel_ms") else "n/a" for t in r["verify"])
        lp = " ".join(f"{t['loop_ms']:.3f}" if t.get("loop_ms") else "n/a" for t in r["verify"])
        kd = f"{100 * r['kernel_ms_max_rel_diff']:.1f}%" if r["kernel_ms_max_rel_diff"] is not None else "n/a"
        ld = f"{100 * r['loop_ms_max_rel_diff']:.1f}%" if r["loop_ms_max_rel_diff"] is not None else "n/a"
        graph = f"{r['graph_ms']:.3f}" if r["graph_ms"] else "n/a"
        print(f"{r['case']:24} {r['implementation']:28} {r['kernel_ms']:9.3f} {k:>36} {kd:>8} {r['loop_ms']:8.3f}"
              f" {lp:>36} {ld:>8} {graph:>8}")
    print(f"worst kernel-time difference {100 * worst['kernel_ms']:.1f}% (limit {100 * KERNEL_TOL:.0f}%), worst "
          f"host-inclusive difference {100 * worst['loop_ms']:.1f}% (limit {100 * LOOP_TOL:.0f}%): "
          + ("AGREE" if ok else "DISAGREE"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
