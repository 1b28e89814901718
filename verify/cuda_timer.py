"""Time a callable the way GPU work must be timed: warm-up, CUDA events, median and spread.

On a CUDA device each repetition is bracketed by CUDA events (device time, no host jitter);
on the CPU (tests, smoke runs) by perf_counter. Callers pass fresh, non-zero inputs.
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

    @property
    def spread_pct(self) -> float:
        """(p90 - p10) / median, in percent: how noisy the figure is."""
        return 100.0 * (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms else 0.0

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
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
    samples.sort()
    return Timing(
        name=name,
        median_ms=statistics.median(samples),
        p10_ms=_quantile(samples, 0.10),
        p90_ms=_quantile(samples, 0.90),
        min_ms=samples[0],
        iters=iters,
        device=str(device),
    )


def verdict(fused: Timing, best_native: Timing, *, noise_pct: float = 3.0) -> tuple[float, str]:
    """Speedup of the fused kernel over the best native one, and a plain sentence saying who wins.

    A ratio within noise_pct of 1.0 (or within the spread of either side) is called a tie.
    """
    ratio = best_native.median_ms / fused.median_ms
    margin = max(noise_pct, fused.spread_pct / 2, best_native.spread_pct / 2) / 100.0
    if abs(ratio - 1.0) <= margin:
        return ratio, f"tie: {fused.name} and {best_native.name} are within noise ({ratio:.2f}x)"
    if ratio > 1.0:
        return ratio, f"{fused.name} is faster here: {ratio:.2f}x vs {best_native.name}"
    return ratio, f"{best_native.name} is faster here: {1 / ratio:.2f}x vs {fused.name}"
