"""How a timing verdict is reached: every number a frozen record with where it comes from and why.

Two figures per implementation (verify.timing.kernel_compare): `kernel`, the GPU time of the kernels one call
launches (torch.profiler), and `host_inclusive`, the time per call of a back-to-back loop (CUDA events
around N calls, / N: what a training step sees, host work included). Fused and native run in
alternating rounds; the ratio native / fused (> 1: Apex faster) is taken per round, and a seeded
bootstrap over the rounds gives an interval. A winner is named only when that whole interval lies
outside the figure's tie band; otherwise the verdict is `tie`. In a loop the kernels must name the same
winner (LOOP_RULE): a loop gap the kernels do not share is the host's speed of the moment.

Where the numbers come from: the timing runs of reports/h200-2026-12-01-timing*/ (H200, Apex 6424da3b, torch 2.11+cu130): native kernels timed
alike within 2% across runs; Apex's norms spent 0.2-0.4 ms per call on the host, so one-call CUDA
events swung between 0.32 and 0.71 ms from run to run, and FusedAdam vs AdamW(fused=True) moved
between 0.96x and 1.05x. reports/h200-2026-12-01-timing/: five runs of one wheel with this method;
reports/h200-2026-12-01-timing2/: the same under a steady host (verify/timing/host.py).
"""

from __future__ import annotations

import dataclasses

KERNEL = "kernel_time"
HOST_INCLUSIVE = "host_inclusive"
FIGURES = (KERNEL, HOST_INCLUSIVE)
WINNERS = ("fused", "native", "tie")


@dataclasses.dataclass(frozen=True)
class TieBand:
    """Speedups inside [1 / (1 + within), 1 + within] are a tie."""

    figure: str
    within: float
    reason: str

    @property
    def low(self) -> float:
        return 1.0 / (1.0 + self.within)

    @property
    def high(self) -> float:
        return 1.0 + self.within

    def to_json(self) -> dict[str, object]:
        return {
            "figure": self.figure,
            "low": round(self.low, 4),
            "high": round(self.high, 4),
            "within_pct": round(100 * self.within, 2),
            "reason": self.reason,
        }


TIE_BANDS: dict[str, TieBand] = {
    KERNEL: TieBand(
        KERNEL,
        0.05,
        "kernel durations of one build repeat within 2% across runs on one H200 (2026-12-01); clocks boost "
        "differently from run to run; a kernel difference under 5% is no reason to keep or drop Apex",
    ),
    HOST_INCLUSIVE: TieBand(
        HOST_INCLUSIVE,
        0.03,
        "host time only adds to a loop: on the H200 it moved a host-bound implementation's loop time by up to "
        "2x between runs (2026-12-01: apex FusedRMSNorm fp32 0.355-0.679 ms, torch nn.RMSNorm 0.32 ms in every "
        "run) but never below the other's; a 10% band turned that steady 'slower' into 'tie' in 2 of 5 runs, "
        "so the band is narrow and the bootstrap interval, which carries the rounds' noise, decides",
    ),
}


@dataclasses.dataclass(frozen=True)
class LoopRule:
    """A loop winner is named only when the kernel comparison of the same pair names the same winner."""

    reason: str


LOOP_RULE = LoopRule(
    reason="a call in a loop runs at the slower of its kernels and the host issuing them, so as the host's speed "
    "varies the loop ratio moves monotonically between the kernel ratio (a host fast enough for every call) and "
    "the ratio of host work (a host slower than every kernel): when the kernels and this run's loop name the same "
    "winner, every host speed names it. The host's speed is not the build's: on the H200 test host it moved by up "
    "to 2x between runs minutes apart (reports/h200-2026-12-01-timing2 and -timing3: apex FusedLayerNorm fp32 "
    "0.34-0.70 ms per call over 0.31 ms of kernels, torch nn.LayerNorm 0.33 ms), and the plain loop ratio said "
    "'native' in some runs, 'tie' in others. A loop floor tried first (the winner's loop against the loser's "
    "kernels) failed the other way: a slow host lifted torch's own bf16 RMSNorm loop to 0.22 ms, level with "
    "Apex's 0.22 ms of kernels"
)


@dataclasses.dataclass(frozen=True)
class Bootstrap:
    resamples: int
    confidence: float
    seed: int
    reason: str

    def to_json(self) -> dict[str, object]:
        return {
            "resamples": self.resamples,
            "confidence": self.confidence,
            "seed": self.seed,
            "statistic": "median of the per-round ratios (percentile interval)",
        }


# a fixed seed: the verdict is a pure function of the measured rounds, so re-deciding gives the same answer
BOOTSTRAP = Bootstrap(
    resamples=2000,
    confidence=0.95,
    seed=20261201,
    reason="with 2000 resamples another seed moves the interval's ends by under 1% (tests/unit/"
    "test_timing_stats.py); the median resists one round disturbed by the host (a GC pause, a page fault)",
)


@dataclasses.dataclass(frozen=True)
class HostBound:
    """An implementation is host-bound when its loop time exceeds its kernel time by this fraction."""

    margin: float
    reason: str


HOST_BOUND = HostBound(
    margin=0.25,
    reason="a GPU-bound loop runs within a few percent of its kernels (launch gaps of 1-3 us per kernel); "
    "25% more means the GPU waits for the host for a quarter of each call",
)


@dataclasses.dataclass(frozen=True)
class RoundPlan:
    rounds: int  # alternating rounds: even rounds fused first, odd rounds native first
    warmup_calls: int  # per warm-up block (module loads, allocator, caches)
    warmup_ms: float  # warm-up blocks per implementation until this much time has passed (the host side)
    block_ms: float  # target length of one host-inclusive block; its call count N comes from a calibration
    min_calls: int
    max_calls: int
    kernel_calls: int  # calls per profiled block (kernel durations barely vary: a few are enough)
    reason: str

    def to_json(self) -> dict[str, object]:
        return {
            "rounds": self.rounds,
            "warmup_calls": self.warmup_calls,
            "warmup_ms": self.warmup_ms,
            "block_ms": self.block_ms,
            "min_calls": self.min_calls,
            "max_calls": self.max_calls,
            "kernel_calls": self.kernel_calls,
        }


ROUNDS = RoundPlan(
    rounds=16,
    warmup_calls=3,
    warmup_ms=60.0,
    block_ms=10.0,
    min_calls=5,
    max_calls=200,
    kernel_calls=3,
    reason="16 rounds x 2-3 implementations x 10 ms keep one verify timing case under a second, so the "
    "whole verify run stays near 20 s on an H200 (19 s with 12 rounds of 8 ms, 2026-12-01); 10 ms blocks "
    "average many calls, so one slow call moves a round by a few percent at most; 60 ms of warm-up per "
    "implementation (tens of calls, not 3) so the first rounds do not pay for cold host caches and a "
    "clock still ramping up, for 0.8 s per verify run",
)
# --device cpu (tests, smoke runs): the same method, smaller
CPU_ROUNDS = dataclasses.replace(
    ROUNDS,
    rounds=6,
    warmup_calls=1,
    warmup_ms=0.0,
    block_ms=2.0,
    min_calls=2,
    max_calls=50,
    kernel_calls=2,
    reason="CPU smoke runs and tests: the method, not the numbers",
)
