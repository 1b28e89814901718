"""The timing verdict's statistics as pure functions, on synthetic round data."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from verify.timing import rules, stats

KERNEL, LOOP = rules.KERNEL, rules.HOST_INCLUSIVE


def _rounds(true_ms: float, noise: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [true_ms * (1 + rng.gauss(0, noise)) for _ in range(n)]


def test_median_and_quantile() -> None:
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert stats.quantile([0.0, 10.0], 0.25) == 2.5
    assert stats.quantile([5.0], 0.9) == 5.0
    with pytest.raises(ValueError):
        stats.median([])


def test_the_bootstrap_is_seeded_and_brackets_the_median() -> None:
    ratios = [1.0, 1.02, 0.99, 1.01, 0.98, 1.03, 1.0, 0.97, 1.01, 1.02, 0.99, 1.0]
    first = stats.bootstrap_interval(ratios)
    assert first == stats.bootstrap_interval(ratios)  # same data, same interval: the verdict is reproducible
    lo, hi = first
    assert min(ratios) <= lo <= stats.median(ratios) <= hi <= max(ratios)
    # another seed moves the ends by far less than a tie band
    other = stats.bootstrap_interval(ratios, dataclasses.replace(rules.BOOTSTRAP, seed=7))
    assert abs(other[0] - lo) < 0.01 and abs(other[1] - hi) < 0.01
    # noisier rounds, wider interval
    noisy = [1 + 5 * (r - 1) for r in ratios]
    n_lo, n_hi = stats.bootstrap_interval(noisy)
    assert n_hi - n_lo > 3 * (hi - lo)


@pytest.mark.parametrize(
    ("interval", "expected"),
    [
        ((1.06, 1.20), "fused"),  # wholly above 1.05
        ((0.70, 0.90), "native"),  # wholly below 1/1.05
        ((1.03, 1.08), "tie"),  # overlaps the band: no winner
        ((0.90, 0.96), "tie"),
        ((0.99, 1.01), "tie"),
        ((1.05, 1.30), "tie"),  # touching the edge is not excluding it
    ],
)
def test_winner_only_when_the_interval_excludes_the_band(
    interval: tuple[float, float], expected: str
) -> None:
    assert stats.winner(interval, rules.TIE_BANDS[KERNEL]) == expected


def test_the_bands_are_records_with_reasons() -> None:
    for figure, band in rules.TIE_BANDS.items():
        assert band.figure == figure and band.low == pytest.approx(1 / band.high) and len(band.reason) > 40
    # host time only adds to a loop: its band is the narrower one (timing_rules says why)
    assert 0 < rules.TIE_BANDS[LOOP].within < rules.TIE_BANDS[KERNEL].within
    with pytest.raises(dataclasses.FrozenInstanceError):
        rules.TIE_BANDS[KERNEL].within = 0.5  # type: ignore[misc]


def test_the_report_names_each_band_as_the_rule_applies_it() -> None:
    # the report is where a reader checks the band a verdict was judged against: its figures are the rule's
    assert rules.TIE_BANDS[KERNEL].to_json() == {
        "figure": KERNEL,
        "low": 0.9524,
        "high": 1.05,
        "within_pct": 5.0,
        "reason": rules.TIE_BANDS[KERNEL].reason,
    }
    assert rules.TIE_BANDS[LOOP].to_json()["within_pct"] == 3.0


def test_every_rule_is_a_frozen_record() -> None:
    # a verdict must not depend on what a caller changed in a shared rule object at run time
    records: list[Any] = [rules.BOOTSTRAP, rules.HOST_BOUND, rules.LOOP_RULE, rules.ROUNDS, rules.CPU_ROUNDS]
    for record in [*records, *rules.TIE_BANDS.values()]:
        field = dataclasses.fields(record)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, field, getattr(record, field))


def test_the_gpu_round_plan_is_the_one_its_reason_argues_for() -> None:
    # the reason is the plan's only justification (the verify-run budget it was measured against): a round
    # count, block length or warm-up that moved without it is a plan nobody measured
    plan = rules.ROUNDS
    assert plan.reason.startswith(f"{plan.rounds} rounds x 2-3 implementations x {plan.block_ms:g} ms ")
    assert f"{plan.block_ms:g} ms blocks average many calls" in plan.reason
    assert f"{plan.warmup_ms:g} ms of warm-up per implementation" in plan.reason


def test_decide_on_paired_rounds() -> None:
    fused = _rounds(0.32, 0.01, 12, seed=1)
    same = _rounds(0.32, 0.01, 12, seed=2)
    tie = stats.decide(KERNEL, "apex FusedLayerNorm", "torch nn.LayerNorm", fused, same)
    assert tie.winner == "tie" and tie.interval[0] < 1.0 < tie.interval[1] and len(tie.ratios) == 12
    faster_native = stats.decide(
        LOOP,
        "apex FusedLayerNorm",
        "torch nn.LayerNorm",
        _rounds(0.53, 0.05, 12, 3),
        _rounds(0.326, 0.02, 12, 4),
    )
    assert faster_native.winner == "native" and faster_native.ratio == pytest.approx(0.326 / 0.53, rel=0.05)
    assert faster_native.band is rules.TIE_BANDS[LOOP]
    assert stats.decide(KERNEL, "a", "b", [1.0] * 12, [1.3] * 12).winner == "fused"
    with pytest.raises(ValueError):
        stats.decide(KERNEL, "a", "b", [1.0, 1.0], [1.0])


def test_the_same_truth_gives_the_same_winner_in_every_run() -> None:
    """Five simulated runs of each situation (fresh noise each run): the winner never flips."""
    situations = {  # (fused ms, native ms, round-to-round noise, figure) -> expected winner
        (0.32, 0.32, 0.01, KERNEL): "tie",
        (0.26, 0.17, 0.01, KERNEL): "native",  # bf16 norms on an H200 (FACTS.md)
        (0.53, 0.326, 0.08, LOOP): "native",  # a host-bound fused norm: noisy rounds, clear answer
        (0.75, 0.75, 0.03, LOOP): "tie",
        (0.36, 0.32, 0.05, LOOP): "native",  # a fused norm barely host-bound: a little slower in every round
        (0.40, 1.10, 0.05, LOOP): "fused",
    }
    for (f_ms, n_ms, noise, figure), expected in situations.items():
        got = {
            stats.decide(
                figure, "f", "n", _rounds(f_ms, noise, 12, 10 * run), _rounds(n_ms, noise, 12, 10 * run + 1)
            ).winner
            for run in range(5)
        }
        assert got == {expected}, (f_ms, n_ms, noise, figure, got)


def test_one_disturbed_round_does_not_move_the_verdict() -> None:
    fused = [0.32] * 12
    native = [0.32] * 12
    fused[5] = 3.2  # a GC pause in one fused block
    v = stats.decide(LOOP, "f", "n", fused, native)
    assert v.winner == "tie" and v.ratio == pytest.approx(1.0)


def test_independent_samples() -> None:
    v = stats.decide_independent(
        LOOP, "apex-bf16", "native-bf16", _rounds(29.0, 0.02, 20, 1), _rounds(25.3, 0.02, 20, 2)
    )
    assert v.winner == "native" and v.method == "independent samples" and v.ratios == ()
    assert v.interval[0] < 25.3 / 29.0 * 1.02 and v.interval[1] > 25.3 / 29.0 * 0.98
    with pytest.raises(ValueError):
        stats.decide_independent(LOOP, "a", "b", [], [1.0])


def test_bound() -> None:
    host = stats.bound_of("apex FusedLayerNorm", 0.32, 0.53)
    assert host.kind == "host" and host.host_overhead_ms == pytest.approx(0.21)
    assert stats.bound_of("torch nn.LayerNorm", 0.32, 0.33).kind == "gpu"
    edge = 0.32 * (1 + rules.HOST_BOUND.margin)
    assert (
        stats.bound_of("x", 0.32, edge * 0.999).kind == "gpu"
        and stats.bound_of("x", 0.32, edge * 1.001).kind == "host"
    )


def _verdict(figure: str, ratio: float, interval: tuple[float, float], winner: str) -> stats.FigureVerdict:
    return stats.FigureVerdict(
        figure,
        "apex FusedLayerNorm",
        "torch nn.LayerNorm",
        1.0,
        ratio,
        ratio,
        interval,
        winner,
        rules.TIE_BANDS[figure],
        (),
        "interleaved rounds",
    )


def test_the_sentence_names_both_figures_and_the_host_bound_side() -> None:
    kernel = _verdict(KERNEL, 1.01, (0.98, 1.03), "tie")
    loop = _verdict(LOOP, 1 / 1.5, (1 / 1.6, 1 / 1.4), "native")
    text = stats.sentence(
        kernel,
        loop,
        [stats.bound_of("apex FusedLayerNorm", 0.32, 0.53), stats.bound_of("torch nn.LayerNorm", 0.32, 0.33)],
    )
    assert text == (
        "kernels tie (1.01x, 0.98-1.03); in a loop torch nn.LayerNorm is 1.50x faster (1.40-1.60): "
        "apex FusedLayerNorm is host-bound here (0.21 ms of host time per call beyond its 0.32 ms of kernels)"
    )


@pytest.mark.parametrize(
    ("kernel", "loop", "expected"),
    [
        (
            _verdict(KERNEL, 1.20, (1.18, 1.22), "fused"),
            _verdict(LOOP, 1.0, (0.97, 1.04), "tie"),
            "apex FusedLayerNorm's kernels are 1.20x faster (1.18-1.22); in a loop they tie (1.00x, 0.97-1.04)",
        ),
        (
            _verdict(KERNEL, 0.5, (0.45, 0.55), "native"),
            _verdict(LOOP, 1.3, (1.2, 1.4), "fused"),
            "torch nn.LayerNorm's kernels are 2.00x faster (1.82-2.22); in a loop apex FusedLayerNorm is 1.30x faster (1.20-1.40)",
        ),
        (
            None,
            _verdict(LOOP, 1.0, (0.97, 1.04), "tie"),
            "kernel time not measured; in a loop they tie (1.00x, 0.97-1.04)",
        ),
    ],
)
def test_sentence_wording(kernel, loop, expected: str) -> None:
    assert stats.sentence(kernel, loop) == expected


def test_with_several_natives_a_tie_says_with_which() -> None:
    tie = _verdict(KERNEL, 1.0, (0.99, 1.01), "tie")
    loop = _verdict(LOOP, 1.02, (0.97, 1.06), "tie")
    assert stats.sentence(tie, loop, name_native=True) == (
        "kernels tie with torch nn.LayerNorm (1.00x, 0.99-1.01); in a loop it ties with torch nn.LayerNorm (1.02x, 0.97-1.06)"
    )
