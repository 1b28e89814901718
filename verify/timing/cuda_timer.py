"""Time a callable repeatedly: warm-up, CUDA events around each call, median and spread.

Each repetition is bracketed by CUDA events with no synchronisation in between, so a sample is the
call's host-inclusive time in a back-to-back loop (the GPU waits for the host when the host is
slower). `verify bench` times training steps and the copy ceiling this way; fused-vs-native kernel
comparisons go through verify.timing.kernel_compare (two figures, interleaved rounds). On the CPU (tests,
smoke runs) perf_counter brackets each call. Callers pass fresh, non-zero inputs.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import torch


@dataclasses.dataclass
class Timing:
    name: str
    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    iters: int
    device: str
    samples: tuple[float, ...] = dataclasses.field(default=(), repr=False)  # ms, in run order; not in JSON

    @property
    def spread_pct(self) -> float:
        """(p90 - p10) / median, in percent: how noisy the figure is."""
        return 100.0 * (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms else 0.0

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        del data["samples"]
        data["spread_pct"] = round(self.spread_pct, 2)
        for key in ("median_ms", "p10_ms", "p90_ms", "min_ms"):
            data[key] = round(data[key], 5)
        return data


def _quantile(sorted_values: list[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def measure(
    name: str,
    fn: Callable[[], object],
    *,
    device: torch.device | str,
    warmup: int = 10,
    iters: int = 50,
) -> Timing:
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for start, end in zip(starts, ends, strict=True):
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        samples = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    ordered = sorted(samples)
    return Timing(
        name=name,
        median_ms=statistics.median(ordered),
        p10_ms=_quantile(ordered, 0.10),
        p90_ms=_quantile(ordered, 0.90),
        min_ms=ordered[0],
        iters=iters,
        device=str(device),
        samples=tuple(samples),
    )
