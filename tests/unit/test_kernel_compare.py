"""verify.timing.kernel_compare on real torch (CPU): interleaved rounds, both figures, failures, and that verify's
timing layer and `verify bench` use this one module and one set of implementation names."""

from __future__ import annotations

import dataclasses
import gc
import json
import re
from typing import Any

import pytest
import torch

from tests.support import REPO
from verify.report import assemble as report
from verify.timing import host as timing_host
from verify.timing import kernel_compare, kernel_profile, kernel_variants, rules
from verify.timing.kernel_compare import Variant

VERIFY = REPO / "verify"
PLAN = rules.CPU_ROUNDS


@pytest.fixture(autouse=True)
def one_thread():
    # the CI machine has 2 shared cores: two intra-op threads make a tiny matmul wait milliseconds at a barrier
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class SimulatedClock:
    """kernel_compare's host clock in these tests: it moves only when a call says it took time, so the
    figures do not depend on how busy the test machine is."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> SimulatedClock:
    simulated = SimulatedClock()
    monkeypatch.setattr(kernel_compare, "clock", simulated)
    return simulated


def _schema_validator(definition: str):
    jsonschema = pytest.importorskip("jsonschema")  # not on the GPU host: its tests there skip this part
    schema = json.loads(report.SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": f"#/$defs/{definition}"})


def test_split_at_markers() -> None:
    events = [  # (start, name, duration us), deliberately out of order
        (30.0, "at::cuda::(anonymous namespace)::spin_kernel(long)", 1.0),
        (10.0, "vectorized_layer_norm_kernel", 5.0),
        (20.0, "layer_norm_grad_input_kernel", 7.0),
        (25.0, "Context Sync", 99.0),  # a sync record is not work the call launched
        (40.0, "cuApplyLayerNorm", 4.0),
        (50.0, "spin_kernel", 1.0),
        (60.0, "Memset (Device)", 2.0),  # after the last marker: not a block
    ]
    assert kernel_profile.split_at_markers(events) == [12.0, 4.0]
    assert kernel_profile.split_at_markers([]) == []


def test_rounds_alternate_and_both_figures_are_measured(clock: SimulatedClock) -> None:
    calls: list[str] = []
    a = torch.randn(32, 32)

    def recorder(name: str, host_s: float):
        def make():
            def call():
                calls.append(name)
                clock.advance(host_s)  # host time, outside any aten op
                return a @ a

            return call

        return make

    variants = [
        Variant("fused", "fused", recorder("fused", 0.002)),
        Variant("native", "native", recorder("native", 0.0001)),
    ]
    result = kernel_compare.compare("K", "case", variants, "cpu", PLAN)
    fused, native = result.variants
    assert fused.status == native.status == "OK"
    for v in (fused, native):
        assert (
            len(v.kernel_ms) == len(v.host_ms) == PLAN.rounds and min(v.kernel_ms) > 0 and min(v.host_ms) > 0
        )
        assert (
            v.loop_calls >= PLAN.min_calls and v.kernel_calls == PLAN.kernel_calls and v.bound is None
        )  # CPU
    # host rounds: blocks of loop_calls calls, fused first in even rounds and native first in odd ones
    n = fused.loop_calls
    assert fused.warmup_calls == native.warmup_calls == PLAN.warmup_calls  # warmup_ms=0: one warm-up block
    warm = fused.warmup_calls + native.warmup_calls + 2 * 2  # warm-up, then 2 calibration calls each
    blocks = [calls[warm + i * n] for i in range(2 * PLAN.rounds)]
    assert blocks == ["fused", "native", "native", "fused"] * (PLAN.rounds // 2)
    assert all(calls[warm + i * n : warm + (i + 1) * n] == [blocks[i]] * n for i in range(2 * PLAN.rounds))
    # 2 ms of host time per fused call: far slower in the loop; the ops themselves are the same
    assert result.host_verdict and result.kernel_verdict
    assert result.host_verdict.winner == "native" and result.host_verdict.ratio < 0.2, result.to_json()
    assert result.kernel_verdict.winner in rules.WINNERS  # CPU op time on a shared CPU: any answer, but one
    assert "; in a loop native is" in result.sentence
    data: dict[str, Any] = result.to_json()
    _schema_validator("timing_row").validate(json.loads(json.dumps(data)))
    assert data["winner"] == {"kernel_time": result.kernel_verdict.winner, "host_inclusive": "native"}
    assert data["fused"]["kernel_time"]["method"].startswith("torch.profiler CPU activity")


def test_warm_up_lasts_its_time_and_timed_blocks_run_without_the_garbage_collector(
    clock: SimulatedClock,
) -> None:
    gc_seen: list[bool] = []
    x = torch.randn(64, 64)

    def call():
        gc_seen.append(gc.isenabled())
        clock.advance(0.001)
        return x + 1

    plan = dataclasses.replace(PLAN, warmup_calls=2, warmup_ms=30.0)
    host = timing_host.HostConditions(
        1, (0, 1), "every thread on core 1: a test", 3, 1, timing_host.GC_RULE, None
    ).to_json()
    gc.enable()
    result = kernel_compare.compare(
        "K",
        "c",
        [Variant("f", "fused", lambda: call), Variant("n", "native", lambda: call)],
        "cpu",
        plan,
        host,
    )
    fused, native = result.variants
    # 1 ms a call, blocks of 2: each implementation warms up for 30 ms of its own time, 15 blocks (16 when
    # the sum of 2 ms steps lands a rounding error short of 30)
    assert fused.warmup_calls == native.warmup_calls and fused.warmup_calls in (30, 32)
    warm = 2 * fused.warmup_calls + 4  # blocks from the warm-up on: the collector off inside each
    assert gc_seen[:warm] and not any(gc_seen[:warm]) and gc.isenabled()  # and back on afterwards
    data: dict[str, Any] = result.to_json()
    assert data["host"] == host and data["fused"]["warmup_calls"] == fused.warmup_calls
    assert data["rounds"]["warmup_ms"] == 30.0
    _schema_validator("timing_row").validate(json.loads(json.dumps(data)))


def test_host_block_is_the_timer_of_the_rounds(clock: SimulatedClock) -> None:
    calls: list[None] = []

    def call() -> None:
        clock.advance(0.002)
        calls.append(None)

    per_call, issued = kernel_compare.host_block(call, 5, torch.device("cpu"))
    assert len(calls) == 5 and per_call == pytest.approx(2.0) and issued == per_call


def test_a_native_that_cannot_be_built_is_a_fail_and_the_rest_compare() -> None:
    def unavailable():
        raise TypeError("AdamW.__init__() got an unexpected keyword argument 'fused'")

    x = torch.randn(64, 64)
    ok = Variant("native ok", "native", lambda: lambda: x + 1)
    variants = [
        Variant("fused", "fused", lambda: lambda: x * 2),
        Variant("native broken", "native", unavailable),
        ok,
    ]
    result = kernel_compare.compare("K", "c", variants, "cpu", PLAN)
    broken = result.variants[1]
    assert broken.status == "FAIL" and broken.reason.startswith("TypeError: AdamW.__init__()")
    assert result.host_verdict is not None and result.host_verdict.native == "native ok"


def test_no_fused_kernel_no_verdict_and_an_error_while_timing_fails_the_comparison() -> None:
    x = torch.randn(8)
    skipped = kernel_compare.compare(
        "K",
        "c",
        [
            Variant("apex K", "fused", None, "Apex is not installed"),
            Variant("n", "native", lambda: lambda: x + 1),
        ],
        "cpu",
        PLAN,
    )
    assert skipped.kernel_verdict is None and skipped.host_verdict is None
    assert skipped.sentence == "no comparison: apex K SKIP (Apex is not installed)"
    assert skipped.variants[1].status == "OK" and skipped.variants[1].host_ms  # the native still ran

    state = {"calls": 0}

    def flaky():
        state["calls"] += 1
        if state["calls"] > 3:
            raise RuntimeError("CUDA out of memory\nmore")
        return x * 2

    failed = kernel_compare.compare(
        "K",
        "c",
        [Variant("f", "fused", lambda: flaky), Variant("n", "native", lambda: lambda: x + 1)],
        "cpu",
        PLAN,
    )
    assert [v.status for v in failed.variants] == ["FAIL", "FAIL"]
    assert failed.variants[0].reason == "while timing: RuntimeError: CUDA out of memory"


def test_norm_variants_build_the_same_module_weights_on_both_sides() -> None:
    x = torch.randn(16, 32, requires_grad=True)
    dy = torch.randn(16, 32)
    weight, bias = torch.rand(32) + 0.5, torch.rand(32) - 0.5
    fused, native = kernel_variants.norm_variants("fused_layer_norm", x, dy, weight, bias, torch.nn.LayerNorm)
    assert (fused.name, native.name) == (kernel_variants.FUSED_LAYER_NORM, kernel_variants.LAYER_NORM)
    assert fused.make and native.make
    a, b = fused.make()(), native.make()()
    assert isinstance(a, tuple) and isinstance(b, tuple)
    for ga, gb in zip(a, b, strict=True):
        torch.testing.assert_close(ga, gb)  # same weights and inputs: the same gradients
    assert (
        kernel_variants.norm_variants("fused_rms_norm", x, dy, weight, None, None, "no Apex")[0].skip_reason
        == "no Apex"
    )


def test_adam_variants_step_real_optimizers() -> None:
    params = [torch.nn.Parameter(torch.randn(10, 10)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn(10, 10)
    before = [p.detach().clone() for p in params]
    fused, foreach, fused_native = kernel_variants.adam_variants(params, None, "Apex is not installed")
    assert fused.make is None and (foreach.name, fused_native.name) == (
        "torch AdamW(foreach=True)",
        "torch AdamW(fused=True)",
    )
    assert foreach.make
    foreach.make()()
    assert all(not torch.equal(b, p) for b, p in zip(before, params, strict=True))


def test_timing_layer_and_bench_share_the_module_and_the_names() -> None:
    """One comparison path: both call kernel_compare.compare on kernel_variants' implementations, and no
    other file under verify/ spells an implementation name (so they cannot drift apart again)."""
    users = {
        "gpu/kernel_timing.py": VERIFY / "gpu" / "kernel_timing.py",
        "bench/micro.py": VERIFY / "bench" / "micro.py",
    }
    for name, path in users.items():
        text = path.read_text()
        assert "kernel_compare.compare(" in text, name
        assert "kernel_variants." in text and "cuda_timer.verdict" not in text, name
    names = [
        kernel_variants.FUSED_ADAM,
        kernel_variants.ADAMW_FOREACH,
        kernel_variants.ADAMW_FUSED,
        kernel_variants.FUSED_LAYER_NORM,
        kernel_variants.LAYER_NORM,
        kernel_variants.FUSED_RMS_NORM,
        kernel_variants.RMS_NORM,
        "torch AdamW foreach",
        "torch AdamW fused",
    ]
    pattern = re.compile("|".join(re.escape(f'"{n}"') for n in names))
    spelled = {str(p.relative_to(VERIFY)) for p in VERIFY.rglob("*.py") if pattern.search(p.read_text())}
    assert spelled == {"timing/kernel_variants.py"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_comparison_uses_the_profiler_with_markers() -> None:
    x = torch.randn(4096, 4096, device="cuda")
    variants = [
        Variant("big", "fused", lambda: lambda: x @ x),
        Variant("small", "native", lambda: lambda: x + 1),
    ]
    result = kernel_compare.compare("K", "c", variants, "cuda")
    assert all(kernel_profile.SESSION_MARKED in v.kernel_method for v in result.variants)
    assert result.winners()[rules.KERNEL] == "native"
