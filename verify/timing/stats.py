"""The statistics behind a timing verdict, as pure functions of measured rounds (standard library only).

    kernel = decide(KERNEL, FUSED_NAME, NATIVE_NAME, fused_ms_per_round, native_ms_per_round)
    loop = across_host_speeds(decide(HOST_INCLUSIVE, ...), kernel)
    sentence(kernel, loop, [bound_of(FUSED_NAME, 0.32, 0.53)])
    -> "kernels tie (1.01x, 0.98-1.03); in a loop they tie: torch nn.LayerNorm was 1.62x faster this run
        (1.55-1.70) only by host time, not by its kernels: apex FusedLayerNorm is host-bound here (0.21 ms
        of host time per call beyond its 0.32 ms of kernels)"

Ratios are speedups of the fused implementation: native time / fused time, > 1 when Apex is faster.
A loop winner stands only when the kernels name the same winner (across_host_speeds), else the loop
verdict is a tie whose sentence says how large this run's host-made gap was. The rules (tie bands,
bootstrap, loop rule, host-bound margin) are data in verify/timing/rules.py.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence

from verify.timing import rules
from verify.timing.rules import Bootstrap, TieBand


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def quantile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def bootstrap_interval(
    values: Sequence[float],
    rule: Bootstrap = rules.BOOTSTRAP,
    statistic: Callable[[Sequence[float]], float] = median,
) -> tuple[float, float]:
    """Percentile interval of `statistic` over `rule.resamples` resamples (with replacement), seeded."""
    if not values:
        raise ValueError("bootstrap of no values")
    rng = random.Random(rule.seed)
    n = len(values)
    stats = [statistic([values[rng.randrange(n)] for _ in range(n)]) for _ in range(rule.resamples)]
    tail = (1.0 - rule.confidence) / 2
    return quantile(stats, tail), quantile(stats, 1.0 - tail)


def ratios_per_round(fused_ms: Sequence[float], native_ms: Sequence[float]) -> list[float]:
    """native / fused for each round (the two lists are the same rounds, in order)."""
    if len(fused_ms) != len(native_ms) or not fused_ms:
        raise ValueError(
            f"need the same, non-zero number of rounds (fused {len(fused_ms)}, native {len(native_ms)})"
        )
    if min(fused_ms) <= 0 or min(native_ms) <= 0:
        raise ValueError("every round needs a positive time on both sides")
    return [n / f for f, n in zip(fused_ms, native_ms, strict=True)]


def winner(interval: tuple[float, float], band: TieBand) -> str:
    """`fused` when the whole interval is above the band, `native` when below, else `tie`."""
    lo, hi = interval
    if lo > band.high:
        return "fused"
    if hi < band.low:
        return "native"
    return "tie"


@dataclasses.dataclass(frozen=True)
class FigureVerdict:
    figure: str  # timing_rules.KERNEL or HOST_INCLUSIVE
    fused: str
    native: str  # the native implementation compared (the fastest native one on this figure)
    fused_ms: float  # medians over the rounds
    native_ms: float
    ratio: float  # speedup: median of the per-round native / fused ratios
    interval: tuple[float, float]
    winner: str  # fused | native | tie
    band: TieBand
    ratios: tuple[float, ...]  # per round (or, for independent samples, empty)
    method: str  # "interleaved rounds" or "independent samples"
    this_run: str = (
        ""  # a loop's plain winner, before timing_rules.LOOP_RULE ("" when the rule was not applied)
    )
    kernel_winner: str = ""  # the kernel verdict of the same pair that the rule checked it against

    @property
    def host_gap(self) -> bool:
        """This run's loop named a winner that its kernels do not: the gap was host time."""
        return bool(self.this_run) and self.this_run != self.winner

    def to_json(self) -> dict[str, object]:
        return {
            "figure": self.figure,
            "fused": self.fused,
            "native": self.native,
            "fused_ms": round(self.fused_ms, 5),
            "native_ms": round(self.native_ms, 5),
            "speedup": round(self.ratio, 4),
            "interval": [round(self.interval[0], 4), round(self.interval[1], 4)],
            "confidence": rules.BOOTSTRAP.confidence,
            "winner": self.winner,
            "tie_band": self.band.to_json(),
            "method": self.method,
            "ratios": [round(r, 4) for r in self.ratios],
            "this_run_winner": self.this_run or self.winner,
            "kernel_winner": self.kernel_winner or None,
        }


def decide(
    figure: str,
    fused: str,
    native: str,
    fused_ms: Sequence[float],
    native_ms: Sequence[float],
    *,
    band: TieBand | None = None,
    rule: Bootstrap = rules.BOOTSTRAP,
) -> FigureVerdict:
    """Verdict for paired rounds: round i of fused and round i of native ran back to back."""
    band = band or rules.TIE_BANDS[figure]
    ratios = ratios_per_round(fused_ms, native_ms)
    interval = bootstrap_interval(ratios, rule)
    return FigureVerdict(
        figure,
        fused,
        native,
        median(fused_ms),
        median(native_ms),
        median(ratios),
        interval,
        winner(interval, band),
        band,
        tuple(ratios),
        "interleaved rounds",
    )


def decide_independent(
    figure: str,
    fused: str,
    native: str,
    fused_ms: Sequence[float],
    native_ms: Sequence[float],
    *,
    band: TieBand | None = None,
    rule: Bootstrap = rules.BOOTSTRAP,
) -> FigureVerdict:
    """Verdict for samples that were not interleaved (e.g. training stages run one after the other):
    each side is resampled on its own, the statistic is median(native) / median(fused)."""
    band = band or rules.TIE_BANDS[figure]
    if not fused_ms or not native_ms or min(fused_ms) <= 0 or min(native_ms) <= 0:
        raise ValueError("need positive samples on both sides")
    rng = random.Random(rule.seed)
    boot = []
    for _ in range(rule.resamples):
        f = median([fused_ms[rng.randrange(len(fused_ms))] for _ in fused_ms])
        n = median([native_ms[rng.randrange(len(native_ms))] for _ in native_ms])
        boot.append(n / f)
    tail = (1.0 - rule.confidence) / 2
    interval = (quantile(boot, tail), quantile(boot, 1.0 - tail))
    f_med, n_med = median(fused_ms), median(native_ms)
    return FigureVerdict(
        figure,
        fused,
        native,
        f_med,
        n_med,
        n_med / f_med,
        interval,
        winner(interval, band),
        band,
        (),
        "independent samples",
    )


def across_host_speeds(loop: FigureVerdict, kernel: FigureVerdict) -> FigureVerdict:
    """The loop verdict under timing_rules.LOOP_RULE: its winner stands only when `kernel` names the same one;
    otherwise `tie`, with this run's plain winner kept in `this_run`. `kernel` compares the loop's native when
    the loop says native, and the fastest native kernels when it says fused (a fused win must hold against
    every native, whichever is fastest on a faster host)."""
    if loop.fused != kernel.fused:
        raise ValueError(f"kernel verdict of {kernel.fused}, loop verdict of {loop.fused}")
    holds = loop.winner in ("tie", kernel.winner)
    return dataclasses.replace(
        loop, winner=loop.winner if holds else "tie", this_run=loop.winner, kernel_winner=kernel.winner
    )


@dataclasses.dataclass(frozen=True)
class Bound:
    name: str
    kind: str  # "host" (the GPU waits for the host) or "gpu"
    kernel_ms: float
    host_inclusive_ms: float

    @property
    def host_overhead_ms(self) -> float:
        """Loop time per call beyond the kernels: the GPU waiting for the host (and launch gaps)."""
        return max(0.0, self.host_inclusive_ms - self.kernel_ms)

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "host_overhead_ms": round(self.host_overhead_ms, 5),
            "loop_over_kernel": round(self.host_inclusive_ms / self.kernel_ms, 4) if self.kernel_ms else None,
        }


def bound_of(
    name: str, kernel_ms: float, host_inclusive_ms: float, rule: rules.HostBound = rules.HOST_BOUND
) -> Bound:
    kind = "host" if host_inclusive_ms > kernel_ms * (1.0 + rule.margin) else "gpu"
    return Bound(name, kind, kernel_ms, host_inclusive_ms)


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _span(lo: float, hi: float) -> str:
    return f"{lo:.2f}-{hi:.2f}"


def _faster(v: FigureVerdict, winner: str = "", when: str = "") -> tuple[str, str]:
    """(who, 'N.NNx faster[ when] (lo-hi)') for `winner` (default: the verdict's); a native win is shown as
    its speedup."""
    if (winner or v.winner) == "fused":
        return v.fused, f"{_x(v.ratio)} faster{when} ({_span(*v.interval)})"
    return v.native, f"{_x(1 / v.ratio)} faster{when} ({_span(1 / v.interval[1], 1 / v.interval[0])})"


def kernel_phrase(v: FigureVerdict | None, missing_reason: str = "", name_native: bool = False) -> str:
    if v is None:
        return (
            f"kernel time not measured ({missing_reason})" if missing_reason else "kernel time not measured"
        )
    if v.winner == "tie":
        with_whom = f" with {v.native}" if name_native else ""
        return f"kernels tie{with_whom} ({_x(v.ratio)}, {_span(*v.interval)})"
    who, how = _faster(v)
    return f"{who}'s kernels are {how}"


def loop_phrase(v: FigureVerdict, context: str = "in a loop", name_native: bool = False) -> str:
    if v.host_gap:
        who, how = _faster(v, v.this_run, " this run")
        return f"{context} they tie: {who} was {how} only by host time, not by its kernels"
    if v.winner == "tie":
        who = f"it ties with {v.native}" if name_native else "they tie"
        return f"{context} {who} ({_x(v.ratio)}, {_span(*v.interval)})"
    who, how = _faster(v)
    return f"{context} {who} is {how}"


def bound_phrase(bounds: Sequence[Bound]) -> str:
    parts = [
        f"{b.name} is host-bound here ({b.host_overhead_ms:.2f} ms of host time per call beyond its "
        f"{b.kernel_ms:.2f} ms of kernels)"
        for b in bounds
        if b.kind == "host"
    ]
    return "; ".join(parts)


def sentence(
    kernel: FigureVerdict | None,
    loop: FigureVerdict | None,
    bounds: Sequence[Bound] = (),
    missing_reason: str = "",
    name_native: bool = False,
) -> str:
    """What the user reads: both figures, and which implementation is host-bound (example in the module
    docstring). name_native: say which native a tie is with (when there are several natives)."""
    text = kernel_phrase(kernel, missing_reason, name_native)
    if loop is not None:
        text += "; " + loop_phrase(loop, name_native=name_native)
    hosted = bound_phrase(bounds)
    return f"{text}: {hosted}" if hosted else text
