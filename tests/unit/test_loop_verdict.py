"""The loop rule (timing_rules.LOOP_RULE): a loop winner stands only when the kernels of the same pair name
the same winner, so a gap the host's speed of the moment makes is reported but called a tie."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from tests.support import REPO
from verify.timing import kernel_compare, rules, stats
from verify.timing.kernel_compare import VariantResult

KERNEL, LOOP = rules.KERNEL, rules.HOST_INCLUSIVE
EVIDENCE = REPO / "tests" / "fixtures" / "evidence"


def _noisy(value: float, noise: float, seed: int, rounds: int = 16) -> list[float]:
    rng = random.Random(seed)
    return [value * (1 + rng.gauss(0, noise)) for _ in range(rounds)]


def _loop_of(kernel_ms: float, host_ms: float) -> float:
    """A loop runs at the slower of the GPU (its kernels) and the host (issuing them), plus launch gaps."""
    return max(kernel_ms, host_ms) * 1.01


def _verdicts(
    fused_kernel: float,
    fused_host: float,
    native_kernel: float,
    native_host: float,
    slowdown: float,
    seed: int,
) -> tuple[str, str]:
    """(plain loop winner, winner under the rule) of one simulated run with the host `slowdown` times slower."""
    kernel = stats.decide(
        KERNEL, "apex", "torch", _noisy(fused_kernel, 0.005, seed), _noisy(native_kernel, 0.005, seed + 1)
    )
    plain = stats.decide(
        LOOP,
        "apex",
        "torch",
        _noisy(_loop_of(fused_kernel, fused_host * slowdown), 0.03, seed + 2),
        _noisy(_loop_of(native_kernel, native_host * slowdown), 0.01, seed + 3),
    )
    return plain.winner, stats.across_host_speeds(plain, kernel).winner


# host speeds seen on the H200 test host: the time to issue a call moved by up to 2.4x between runs
SLOWDOWNS = (1.0, 1.3, 1.6, 2.0, 2.4)


def test_a_gap_made_by_the_host_flips_the_plain_verdict_but_not_the_rule() -> None:
    # apex FusedLayerNorm fp32 on the H200: kernels as fast as torch's, 0.25-0.6 ms of host work per call
    runs = [_verdicts(0.312, 0.25, 0.321, 0.09, s, seed) for seed, s in enumerate(SLOWDOWNS)]
    assert {plain for plain, _ in runs} == {"tie", "native"}  # what the plain loop ratio said, run to run
    assert {ruled for _, ruled in runs} == {"tie"}


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            (0.263, 0.22, 0.173, 0.08),
            "native",
        ),  # bf16 LayerNorm: torch's kernels are faster, and so is its loop
        (
            (0.224, 0.25, 0.152, 0.09),
            "native",
        ),  # bf16 RMSNorm: at 2.4x even torch's loop (0.22 ms) nears apex's kernels
        (
            (0.12, 0.05, 0.20, 0.60),
            "fused",
        ),  # faster fused kernels, and a host-bound native: fused at any host speed
        (
            (0.20, 0.05, 0.20, 0.60),
            "tie",
        ),  # the same kernels: the native's loss is host time a faster host removes
        (
            (0.294, 0.75, 0.294, 0.77),
            "tie",
        ),  # FusedAdam vs AdamW(fused=True): both host-bound, the same host work
    ],
)
def test_a_winner_named_by_kernels_and_loop_holds_at_every_host_speed(
    case: tuple[float, float, float, float], expected: str
) -> None:
    assert {_verdicts(*case, s, seed)[1] for seed, s in enumerate(SLOWDOWNS)} == {expected}


def test_the_rule_is_recorded_and_the_sentence_says_what_this_run_measured() -> None:
    kernel = stats.decide(KERNEL, "apex FusedLayerNorm", "torch nn.LayerNorm", [0.313] * 16, [0.321] * 16)
    plain = stats.decide(LOOP, "apex FusedLayerNorm", "torch nn.LayerNorm", [0.52] * 16, [0.335] * 16)
    assert plain.winner == "native" and not plain.this_run and not plain.host_gap
    ruled = stats.across_host_speeds(plain, kernel)
    assert (
        ruled.winner == "tie"
        and ruled.this_run == "native"
        and ruled.host_gap
        and ruled.kernel_winner == "tie"
    )
    data = ruled.to_json()
    assert data["winner"] == "tie" and data["this_run_winner"] == "native" and data["kernel_winner"] == "tie"
    assert stats.loop_phrase(ruled) == (
        "in a loop they tie: torch nn.LayerNorm was 1.55x faster this run (1.55-1.55) only by host time, "
        "not by its kernels"
    )
    faster_kernels = stats.decide(
        KERNEL, "apex FusedLayerNorm", "torch nn.LayerNorm", [0.263] * 16, [0.173] * 16
    )
    stands = stats.across_host_speeds(plain, faster_kernels)
    assert stands.winner == "native" and stands.this_run == "native" and not stands.host_gap
    assert stats.decide(LOOP, "a", "b", [1.0] * 16, [1.0] * 16).to_json()["this_run_winner"] == "tie"
    with pytest.raises(ValueError, match="kernel verdict of"):
        stats.across_host_speeds(plain, stats.decide(KERNEL, "other", "torch nn.LayerNorm", [1.0], [1.0]))


def _result(name: str, role: str, kernel_ms: float, loop_ms: float) -> VariantResult:
    return VariantResult(name, role, "OK", kernel_ms=tuple([kernel_ms] * 16), host_ms=tuple([loop_ms] * 16))


def test_the_comparison_checks_the_loops_own_pair_on_a_gpu_and_not_on_a_cpu_run() -> None:
    plan = rules.ROUNDS
    host_bound = [
        _result("apex FusedRMSNorm", "fused", 0.306, 0.387),
        _result("torch nn.RMSNorm", "native", 0.312, 0.324),
    ]
    gpu = kernel_compare._decide("FusedRMSNorm", "fp32", "cuda:0", host_bound, plan)
    assert gpu.host_verdict is not None
    assert gpu.winners() == {KERNEL: "tie", LOOP: "tie"} and gpu.host_verdict.this_run == "native"
    assert "only by host time" in gpu.sentence and gpu.sentence.endswith(
        "apex FusedRMSNorm is host-bound here (0.08 ms of host time per call beyond its 0.31 ms of kernels)"
    )
    # the loop's fastest native is not the kernels' fastest: a native loop win is checked on its own pair...
    native_win = [
        _result("apex X", "fused", 0.30, 0.60),
        _result("torch slow loop", "native", 0.10, 0.90),
        _result("torch fast loop", "native", 0.20, 0.21),
    ]
    v = kernel_compare._decide("X", "c", "cuda:0", native_win, plan)
    assert v.kernel_verdict is not None and v.host_verdict is not None
    assert v.kernel_verdict.native == "torch slow loop" and v.host_verdict.native == "torch fast loop"
    assert v.host_verdict.winner == "native" and v.host_verdict.kernel_winner == "native"
    # ...a fused one against the fastest native kernels, which a faster host would bring to the front
    fused_win = [
        _result("apex X", "fused", 0.20, 0.21),
        _result("torch slow kernels", "native", 0.30, 0.40),
        _result("torch fast kernels", "native", 0.10, 0.80),
    ]
    v = kernel_compare._decide("X", "c", "cuda:0", fused_win, plan)
    assert v.host_verdict is not None
    assert v.host_verdict.native == "torch slow kernels" and v.host_verdict.this_run == "fused"
    assert v.host_verdict.winner == "tie" and v.host_verdict.kernel_winner == "native"
    cpu = [dataclasses.replace(r, on_gpu=False) for r in host_bound]
    on_cpu = kernel_compare._decide("FusedRMSNorm", "fp32", "cpu", cpu, plan).host_verdict
    assert on_cpu is not None and on_cpu.winner == "native"


def test_a_native_loop_win_is_redecided_on_its_own_pairs_kernels_when_another_native_has_the_fastest_kernels() -> (
    None
):
    # data on which the two pairings disagree: the kernels' fastest native ("torch slow loop") beats the fused
    # kernels, but the loop's winner ("torch fast loop") has the fused kernels' speed; its loop win is host
    # time, so the rule calls it a tie. Judged on the kernels' fastest pair instead, it would stand.
    results = [
        _result("apex X", "fused", 0.30, 0.60),
        _result("torch slow loop", "native", 0.10, 0.90),
        _result("torch fast loop", "native", 0.30, 0.31),
    ]
    v = kernel_compare._decide("X", "c", "cuda:0", results, rules.ROUNDS)
    assert v.kernel_verdict is not None and v.host_verdict is not None
    assert v.kernel_verdict.native == "torch slow loop" and v.kernel_verdict.winner == "native"
    assert v.host_verdict.native == "torch fast loop" and v.host_verdict.this_run == "native"
    assert v.host_verdict.kernel_winner == "tie" and v.host_verdict.winner == "tie", v.host_verdict.to_json()
    wrong_pair = stats.across_host_speeds(
        stats.decide(LOOP, "apex X", "torch fast loop", [0.60] * 16, [0.31] * 16), v.kernel_verdict
    )
    assert wrong_pair.winner == "native"  # what the re-decision exists to prevent


def _redecide(timing: dict) -> tuple[str, str]:
    """(plain, ruled) loop winner of one committed timing row, rebuilt from its per-round ratios and the
    compared natives' medians."""
    loop, kernel = timing[LOOP], timing[KERNEL]
    natives = {n["name"]: n for n in timing["natives"]}
    assert loop["native"] == kernel["native"]  # so the committed kernel verdict is the loop pair's
    rebuilt = {}
    for figure, verdict in ((LOOP, loop), (KERNEL, kernel)):
        native_ms = natives[verdict["native"]][figure]["median_ms"]
        rebuilt[figure] = stats.decide(
            figure,
            verdict["fused"],
            verdict["native"],
            [native_ms / r for r in verdict["ratios"]],
            [native_ms] * len(verdict["ratios"]),
        )
    assert rebuilt[KERNEL].winner == kernel["winner"]
    return rebuilt[LOOP].winner, stats.across_host_speeds(rebuilt[LOOP], rebuilt[KERNEL]).winner


def test_the_committed_five_runs_redecided_with_the_rule_agree() -> None:
    """The H200 evidence of the second round (reports/h200-2026-12-01-timing2): two loop winners flipped
    between runs; re-decided from the same rounds under the rule, every case has one winner."""
    runs = [run["timings"] for run in json.loads((EVIDENCE / "timing2-runs.json").read_text())["runs"]]
    assert len(runs) == 5
    cases = {(t["kernel"], t["case"]) for t in runs[0]}
    assert len(cases) == 5
    plain_flips = 0
    for key in sorted(cases):
        rows = [next(t for t in run if (t["kernel"], t["case"]) == key) for run in runs]
        decided = [_redecide(t) for t in rows]
        assert [p for p, _ in decided] == [t[LOOP]["winner"] for t in rows], key  # the rebuild is faithful
        plain_flips += len({p for p, _ in decided}) > 1
        assert len({r for _, r in decided}) == 1, (key, decided)
    assert plain_flips == 2


THIRD = EVIDENCE / "timing3-runs.json"


def _variant_from_report(row: dict) -> VariantResult:
    return VariantResult(
        row["name"],
        row["role"],
        row["status"],
        row["reason"],
        kernel_ms=tuple(row[KERNEL]["per_round_ms"]),
        host_ms=tuple(row[LOOP]["per_round_ms"]),
    )


def test_the_committed_eight_runs_keep_their_winners_and_redeciding_them_gives_the_same_verdicts() -> None:
    """reports/h200-2026-12-01-timing3: eight verify runs of one wheel under the rule. Every timing's winner is
    the same in all eight for both figures although this run's plain loop winner flipped; and each verdict
    re-decided by this checkout's code from the report's own per-round times is the one committed."""
    runs = json.loads(THIRD.read_text())["runs"]  # each run's timings block and wheel sha256
    assert len(runs) == 8 and len({r["wheel_sha256"] for r in runs}) == 1
    winners: dict[tuple[str, str], set[str]] = {}
    this_run: dict[tuple[str, str], set[str]] = {}
    for run in runs:
        for t in run["timings"]:
            key = (t["kernel"], t["case"])
            winners.setdefault(key, set()).add(json.dumps(t["winner"], sort_keys=True))
            this_run.setdefault(key, set()).add(t[LOOP]["this_run_winner"])
            again = kernel_compare._decide(
                t["kernel"],
                t["case"],
                t["device"],
                [_variant_from_report(t["fused"]), *map(_variant_from_report, t["natives"])],
                rules.ROUNDS,
            )
            assert again.host_verdict is not None
            # (the stored rounds are rounded to 10 ns: an interval's end may move in the last digit, not a winner)
            assert (
                again.winners() == t["winner"] and again.host_verdict.this_run == t[LOOP]["this_run_winner"]
            ), key
            assert ("only by host time" in again.sentence) == ("only by host time" in t["verdict"]), key
    assert len(winners) == 5 and all(len(w) == 1 for w in winners.values()), winners
    assert sum(len(w) > 1 for w in this_run.values()) >= 2  # the plain loop verdict alone would have flipped
