"""The loop floor (timing_rules.LOOP_FLOOR): a loop winner must also beat the loser's kernels, so a gap the
host's speed of the moment makes is reported but called a tie (issue 9, third round)."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from tests.support import REPO
from verify import kernel_compare
from verify import timing_rules as rules
from verify import timing_stats as stats
from verify.kernel_compare import VariantResult

LOOP = rules.HOST_INCLUSIVE
EVIDENCE = REPO / "reports" / "h200-2026-12-01-timing2" / "call"


def _noisy(values: list[float], noise: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [v * (1 + rng.gauss(0, noise)) for v in values]


def _loop_of(kernel_ms: float, host_ms: float) -> float:
    """A loop runs at the slower of the GPU (its kernels) and the host (issuing them), plus launch gaps."""
    return max(kernel_ms, host_ms) * 1.01


def _verdicts(fused_kernel: float, fused_host: float, native_kernel: float, native_host: float, slowdown: float,
              seed: int) -> tuple[str, str]:
    """(plain loop winner, winner after the floor) of one simulated run with the host `slowdown` times slower."""
    rounds = 16
    f_kernel = _noisy([fused_kernel] * rounds, 0.005, seed)
    n_kernel = _noisy([native_kernel] * rounds, 0.005, seed + 1)
    f_loop = _noisy([_loop_of(fused_kernel, fused_host * slowdown)] * rounds, 0.03, seed + 2)
    n_loop = _noisy([_loop_of(native_kernel, native_host * slowdown)] * rounds, 0.01, seed + 3)
    plain = stats.decide(LOOP, "apex", "torch", f_loop, n_loop)
    if plain.winner == "native":
        return plain.winner, stats.against_floor(plain, n_loop, "apex", f_kernel).winner
    if plain.winner == "fused":
        return plain.winner, stats.against_floor(plain, f_loop, "torch", n_kernel).winner
    return plain.winner, plain.winner


# host speeds seen on the H200 test host: issue time per call moved by up to 2x between runs
SLOWDOWNS = (1.0, 1.3, 1.6, 2.0)


def test_a_gap_made_by_the_host_flips_the_plain_verdict_but_not_the_floored_one() -> None:
    # apex FusedLayerNorm fp32 on the H200: kernels as fast as torch's, 0.25-0.5 ms of host work per call
    runs = [_verdicts(0.312, 0.25, 0.321, 0.09, s, seed) for seed, s in enumerate(SLOWDOWNS)]
    assert {plain for plain, _ in runs} == {"tie", "native"}  # what the plain loop ratio said, run to run
    assert {floored for _, floored in runs} == {"tie"}


@pytest.mark.parametrize(("case", "expected"), [
    ((0.263, 0.22, 0.173, 0.08), "native"),  # bf16 LayerNorm: torch's kernels are faster, and so is its loop
    ((0.12, 0.05, 0.20, 0.60), "fused"),  # faster fused kernels, and a host-bound native: fused at any host speed
    ((0.20, 0.05, 0.20, 0.60), "tie"),  # the same kernels: the native's loss is host time a faster host removes
    ((0.294, 0.75, 0.294, 0.77), "tie"),  # FusedAdam vs AdamW(fused=True): both host-bound, the same host work
])
def test_a_win_that_beats_the_losers_kernels_holds_at_every_host_speed(case: tuple[float, ...], expected: str) -> None:
    assert {_verdicts(*case, s, seed)[1] for seed, s in enumerate(SLOWDOWNS)} == {expected}


def test_the_floor_check_is_recorded_and_the_sentence_says_what_this_run_measured() -> None:
    plain = stats.decide(LOOP, "apex FusedLayerNorm", "torch nn.LayerNorm", [0.52] * 16, [0.335] * 16)
    assert plain.winner == "native" and plain.floor is None and not plain.host_gap
    floored = stats.against_floor(plain, [0.335] * 16, "apex FusedLayerNorm", [0.313] * 16)
    assert floored.winner == "tie" and floored.this_run == "native" and floored.host_gap
    assert floored.floor is not None and floored.floor.ratio == pytest.approx(0.313 / 0.335)
    data = floored.to_json()
    assert data["winner"] == "tie" and data["this_run_winner"] == "native" and data["floor"]["holds"] is False
    assert stats.loop_phrase(floored) == (
        "in a loop they tie: torch nn.LayerNorm was 1.55x faster this run (1.55-1.55) only by host time, "
        "not faster than apex FusedLayerNorm's kernels alone (0.93x)")
    # a loop win far below the loser's kernels stands, with its check recorded
    clear = stats.against_floor(plain, [0.18] * 16, "apex FusedLayerNorm", [0.263] * 16)
    assert clear.winner == "native" and clear.floor is not None and clear.floor.holds and not clear.host_gap
    assert stats.decide(LOOP, "a", "b", [1.0] * 16, [1.0] * 16).to_json()["this_run_winner"] == "tie"


def _result(name: str, role: str, kernel_ms: float, loop_ms: float, on_gpu: bool = True) -> VariantResult:
    return VariantResult(name, role, "OK", kernel_ms=tuple([kernel_ms] * 16), host_ms=tuple([loop_ms] * 16),
                         on_gpu=on_gpu)


def test_the_comparison_applies_the_floor_on_a_gpu_and_not_on_a_cpu_run() -> None:
    plan = rules.ROUNDS
    host_bound = [_result("apex FusedRMSNorm", "fused", 0.306, 0.387), _result("torch nn.RMSNorm", "native", 0.312, 0.324)]
    gpu = kernel_compare._decide("FusedRMSNorm", "fp32", "cuda:0", host_bound, plan)
    assert gpu.winners() == {rules.KERNEL: "tie", LOOP: "tie"} and gpu.host_verdict.this_run == "native"
    assert "only by host time" in gpu.sentence and gpu.sentence.endswith("apex FusedRMSNorm is host-bound here "
                                                               "(0.08 ms of host time per call beyond its 0.31 ms of kernels)")
    # the fused side wins a loop only by beating the fastest native kernels, not just the fastest native loop
    fused_win = [_result("apex X", "fused", 0.20, 0.21), _result("torch slow loop", "native", 0.19, 0.60),
                 _result("torch fast kernels", "native", 0.10, 0.80)]
    v = kernel_compare._decide("X", "c", "cuda:0", fused_win, plan).host_verdict
    assert v.this_run == "fused" and v.floor.loser == "torch fast kernels" and v.winner == "tie"
    cpu = [dataclasses.replace(r, on_gpu=False) for r in host_bound]
    assert kernel_compare._decide("FusedRMSNorm", "fp32", "cpu", cpu, plan).host_verdict.winner == "native"



def _redecide(timing: dict) -> tuple[str, str]:
    """(plain, floored) loop winner of one committed timing row, rebuilt from its per-round ratios and medians:
    the winner's loop and the loser's kernels per round, the steady side held at its median."""
    loop, kernel = timing[LOOP], timing[rules.KERNEL]
    natives = {n["name"]: n for n in timing["natives"]}
    native_loop = natives[loop["native"]][LOOP]["median_ms"]
    fused_loop = [native_loop / r for r in loop["ratios"]]
    plain = stats.decide(LOOP, loop["fused"], loop["native"], fused_loop, [native_loop] * len(fused_loop))
    native_kernel = natives[kernel["native"]][rules.KERNEL]["median_ms"]
    fused_kernel = [native_kernel / r for r in kernel["ratios"]]
    if plain.winner == "native":
        return plain.winner, stats.against_floor(plain, [native_loop] * len(fused_loop), loop["fused"],
                                                 fused_kernel).winner
    return plain.winner, plain.winner


def test_the_committed_five_runs_redecided_with_the_floor_agree() -> None:
    """The H200 evidence of the second round (reports/h200-2026-12-01-timing2): two loop winners flipped
    between runs; re-decided from the same rounds with the floor, every case has one winner."""
    runs = [json.loads((EVIDENCE / f"verify-{i}.json").read_text())["timings"] for i in range(1, 6)]
    cases = {(t["kernel"], t["case"]) for t in runs[0]}
    assert len(cases) == 5
    plain_flips = 0
    for key in sorted(cases):
        rows = [next(t for t in run if (t["kernel"], t["case"]) == key) for run in runs]
        decided = [_redecide(t) for t in rows]
        assert [p for p, _ in decided] == [t[LOOP]["winner"] for t in rows], key  # the rebuild is faithful
        plain_flips += len({p for p, _ in decided}) > 1
        assert len({f for _, f in decided}) == 1, (key, decided)
    assert plain_flips == 2
