"""Which host conditions move a host-bound call's loop time: evidence, not product.

In one process, five conditions alternate round by round (each round visits all five, in an order
rotated by one every round, so slow drift of the machine hits each alike), for a few implementations:

  free         every thread may run on every allowed core; torch's default thread count; GC on
  gc-off       free, the garbage collector off inside the timed block (heap not frozen)
  pin-main     only the calling thread on the chosen core (the others free); GC off
  pin-all      every thread on the chosen core, one torch thread, GC off: verify's conditions
  pin-all-gc   every thread on the chosen core, one torch thread, GC on

A round under a condition: set it, 3 untimed calls (threads settle where they are allowed), then one
timed block: torch.cuda.synchronize(); perf_counter; N calls (about 10 ms); synchronize; / N.
The GC heap is not frozen in any of them (verify's SteadyHost also freezes it). Per condition: median over the rounds, p10-p90 spread in % of the median, and the drift (the median
of the second half of the rounds against the first, in %). The core is chosen as verify chooses it
(verify.timing.host.choose_cpu); the thread names and the CPU clock are recorded.

    python host_drift_probe.py OUT.json
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import sys
import threading
import time

import torch
from torch import nn

ROUNDS, BLOCK_MS, LEAD_IN = 20, 10.0, 3
CONDITIONS = ("free", "gc-off", "pin-main", "pin-all", "pin-all-gc")
DEV = "cuda"
NORM_SHAPE = (8192, 4096)  # verify's timing cases
ADAM_SHAPES = [(2048, 2048)] * 8 + [(1000,)] * 200 + [(4096,)] * 56


def threads() -> dict[int, str]:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as fh:
                out[int(tid)] = fh.read().strip()
        except OSError:
            continue
    return out


def norm_step(module: nn.Module, inputs: list[torch.Tensor], x: torch.Tensor, dy: torch.Tensor):
    return lambda: torch.autograd.grad(module(x), inputs, dy)


def implementations(gen: torch.Generator) -> dict[str, object]:
    from apex.normalization import FusedLayerNorm, FusedRMSNorm
    from apex.optimizers import FusedAdam

    calls = {}
    for cls, name, dtype in (
        (FusedRMSNorm, "apex FusedRMSNorm fp32", torch.float32),
        (FusedLayerNorm, "apex FusedLayerNorm bf16", torch.bfloat16),
        (nn.LayerNorm, "torch nn.LayerNorm bf16 (GPU-bound)", torch.bfloat16),
    ):
        x = torch.randn(NORM_SHAPE, generator=gen, device=DEV).to(dtype).requires_grad_(True)
        dy = torch.randn(NORM_SHAPE, generator=gen, device=DEV).to(dtype)
        module = cls(NORM_SHAPE[-1], eps=1e-5).to(device=DEV, dtype=dtype)
        inputs = [x, *module.parameters()]
        calls[name] = norm_step(module, inputs, x, dy)
    params = [nn.Parameter(torch.randn(s, generator=gen, device=DEV) * 0.02) for s in ADAM_SHAPES]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, device=DEV) * 0.01
    hyper = {"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
    calls["apex FusedAdam"] = FusedAdam(params, adam_w_mode=True, **hyper).step
    calls["torch AdamW(fused=True)"] = torch.optim.AdamW(params, fused=True, **hyper).step
    return calls


class Conditions:
    def __init__(self, cpu: int, allowed: set[int], default_threads: int) -> None:
        self.cpu, self.allowed, self.default_threads = cpu, allowed, default_threads
        self.main = threading.get_native_id()

    def apply(self, name: str) -> bool:
        """Set the condition; returns whether GC is on inside the timed block."""
        from verify.timing.host import set_affinity, thread_ids

        tids = thread_ids()
        if name in ("free", "gc-off"):
            set_affinity(tids, self.allowed)
        elif name == "pin-main":
            set_affinity([t for t in tids if t != self.main], self.allowed)
            set_affinity([self.main], {self.cpu})
        else:
            set_affinity(tids, {self.cpu})
        torch.set_num_threads(self.default_threads if name in ("free", "gc-off", "pin-main") else 1)
        return name in ("free", "pin-all-gc")


def block_ms(fn, n: int, gc_on: bool) -> float:
    torch.cuda.synchronize()
    if not gc_on:
        gc.disable()
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3 / n
    finally:
        gc.enable()


def summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=10)
    med = statistics.median(values)
    half = len(values) // 2
    first, second = statistics.median(values[:half]), statistics.median(values[half:])
    return {
        "median_ms": round(med, 4),
        "p10_ms": round(q[0], 4),
        "p90_ms": round(q[-1], 4),
        "spread_pct": round(100 * (q[-1] - q[0]) / med, 1),
        "drift_pct": round(100 * (second / first - 1), 1),
        "min_ms": round(min(values), 4),
    }


def main(argv: list[str]) -> int:
    from verify.timing import host as timing_host

    out_path = argv[0]
    torch.ones(1, device=DEV).add_(1)
    gen = torch.Generator(device=DEV).manual_seed(7)
    calls = implementations(gen)
    for fn in calls.values():  # warm-up, and the autograd device thread exists from here on
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    allowed = set(os.sched_getaffinity(0))
    before = timing_host._read_stat()
    time.sleep(timing_host.IDLE_SAMPLE_S)
    cpu, how = timing_host.choose_cpu(tuple(sorted(allowed)), before, timing_host._read_stat())
    cond = Conditions(cpu, allowed, torch.get_num_threads())
    info = {
        "cpu": cpu,
        "chosen": how,
        "allowed": timing_host.cpu_list(allowed),
        "torch_threads_default": torch.get_num_threads(),
        "threads": sorted(threads().values()),
        "cpu_mhz_before": timing_host.cpu_mhz(cpu),
        "governor": _read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"),
        "rounds": ROUNDS,
        "block_ms": BLOCK_MS,
        "lead_in_calls": LEAD_IN,
    }
    print(json.dumps(info), flush=True)
    results: dict[str, dict[str, dict]] = {}
    t0 = time.perf_counter()
    for name, fn in calls.items():
        cond.apply("pin-all")
        n = max(5, min(200, math.ceil(BLOCK_MS / block_ms(fn, 3, False))))
        samples: dict[str, list[float]] = {c: [] for c in CONDITIONS}
        for r in range(ROUNDS):
            order = CONDITIONS[r % len(CONDITIONS) :] + CONDITIONS[: r % len(CONDITIONS)]
            for c in order:
                gc_on = cond.apply(c)
                for _ in range(LEAD_IN):
                    fn()
                samples[c].append(block_ms(fn, n, gc_on))
        results[name] = {
            "calls_per_block": n,
            **{c: {**summary(v), "samples": [round(x, 4) for x in v]} for c, v in samples.items()},
        }
        line = "  ".join(
            f"{c} {results[name][c]['median_ms']:.3f} ({results[name][c]['spread_pct']:.0f}%, "
            f"drift {results[name][c]['drift_pct']:+.0f}%)"
            for c in CONDITIONS
        )
        print(f"{name:38} N={n:3d}  {line}", flush=True)
    cond.apply("free")
    info["cpu_mhz_after"] = timing_host.cpu_mhz(cpu)
    info["seconds"] = round(time.perf_counter() - t0, 1)
    with open(out_path, "w") as fh:
        json.dump({"method": __doc__, "info": info, "results": results}, fh, indent=1)
    print(
        f"cpu MHz before/after: {info['cpu_mhz_before']}/{info['cpu_mhz_after']}; {info['seconds']} s",
        flush=True,
    )
    return 0


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
