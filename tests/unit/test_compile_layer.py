"""The compile layer's rules and its case code on the CPU: graph breaks are WARN and named, other numbers are
FAIL, an Apex that registers no custom op is a stated fact (INFO), and opcheck's findings are reported by op
and test. torch._dynamo.explain, torch.compile (the cheap "eager" backend in the unit tier) and
torch.library.opcheck run for real; torch's own norm modules stand where Apex's are compiled on a GPU.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from verify.checks import Status
from verify.gpu import amp_step, cases, compile_check, device, tolerances
from verify.gpu.compile_rules import (
    CompileOutcome,
    GraphBreak,
    GraphReport,
    OpcheckResult,
    group_breaks,
    kernel_note,
    opcheck_verdict,
    verdict,
)

ONE_GRAPH = GraphReport(graphs=1, break_count=0)
BROKEN = GraphReport(
    graphs=3,
    break_count=2,
    breaks=(
        GraphBreak("Unsupported: call to a pybind11 function fused_layer_norm_cuda.forward", "ln.py:12", 2),
    ),
)


def test_one_graph_and_eager_numbers_pass() -> None:
    status, summary = verdict(
        CompileOutcome("FusedLayerNorm(bf16)", ONE_GRAPH, closest="output: 0.01 of tolerance")
    )
    assert status is Status.PASS
    assert summary == (
        "FusedLayerNorm(bf16) compiles with fullgraph=True (one graph, no break); "
        "compiled matches eager (output: 0.01 of tolerance)"
    )


def test_a_graph_break_is_a_warn_that_names_it() -> None:
    status, summary = verdict(
        CompileOutcome("FusedLayerNorm(bf16)", BROKEN, fullgraph_error="Unsupported: pybind11", closest="ok")
    )
    assert status is Status.WARN
    assert "breaks the graph (2 graph break(s), 3 graphs)" in summary
    assert "fused_layer_norm_cuda.forward at ln.py:12 (2x)" in summary


def test_a_fullgraph_refusal_without_explained_breaks_is_still_a_warn() -> None:
    status, summary = verdict(CompileOutcome("X", ONE_GRAPH, fullgraph_error="Unsupported: data-dependent"))
    assert status is Status.WARN and "no fullgraph" in summary and "data-dependent" in summary


def test_a_call_dynamo_skips_whole_is_not_captured_not_minus_one_breaks() -> None:
    """explain counts breaks as graphs - 1: a call skipped whole (FusedAdam's step on the H200: "Attempted
    to call function marked as skipped") gave "-1 graph break(s), 0 graphs"."""

    @torch._dynamo.disable
    def inner(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    graphs = compile_check.explain(lambda x: inner(x), torch.ones(3))
    assert (graphs.graphs, graphs.break_count, graphs.error) == (0, 0, "")
    skipped = "Unsupported: Attempted to call function marked as skipped"
    status, summary = verdict(CompileOutcome("step", graphs, fullgraph_error=skipped, closest="max |diff| 0"))
    assert status is Status.WARN
    assert summary == (
        "step is not captured by torch.compile (no graph: it runs eagerly, so there was nothing compiled to "
        f"compare): {skipped}"
    )


def test_other_numbers_fail_even_when_the_graph_also_breaks() -> None:
    outcome = CompileOutcome("X", BROKEN, mismatches=("output: 3/10 elements off", "input grad: off"))
    status, summary = verdict(outcome)
    assert status is Status.FAIL
    assert summary == "X compiled gives other numbers than eager: output: 3/10 elements off (+1 more)"


def test_an_error_fails_a_norm_but_only_warns_for_an_optimizer_step() -> None:
    norm = CompileOutcome("norm", ONE_GRAPH, run_error="RuntimeError: boom")
    step = CompileOutcome("step", ONE_GRAPH, run_error="RuntimeError: boom", run_error_fails=False)
    assert verdict(norm) == (Status.FAIL, "norm does not run under torch.compile: RuntimeError: boom")
    assert verdict(step)[0] is Status.WARN


def test_the_summary_says_whether_apex_or_torch_runs_compiled() -> None:
    apex = GraphReport(1, 0, ops=("apex.fused_layer_norm_affine_fwd.default", "torch.add"))
    torch_only = GraphReport(1, 0, ops=("torch.nn.functional.layer_norm",))
    assert kernel_note(apex, "FusedLayerNorm") == (
        "Apex's kernel runs in the compiled graph (apex.fused_layer_norm_affine_fwd.default)"
    )
    note = kernel_note(torch_only, "FusedLayerNorm")
    assert note.startswith(
        "Apex's kernel is not in the compiled graph: it calls torch.nn.functional.layer_norm"
    )
    assert kernel_note(GraphReport(0, 0, error="explain failed"), "X") == ""
    status, summary = verdict(CompileOutcome("FusedLayerNorm(bf16)", torch_only, note=note))
    assert status is Status.PASS and summary.endswith(note)


def test_break_reasons_are_grouped_by_first_line_and_place() -> None:
    grouped = group_breaks(
        [("Graph break A\n  Hint: x", "a.py:1"), ("Graph break A\n  other hint", "a.py:1"), ("B", "b.py:2")]
    )
    assert grouped == (GraphBreak("Graph break A", "a.py:1", 2), GraphBreak("B", "b.py:2", 1))


def test_no_custom_op_is_a_fact_not_an_error() -> None:
    status, summary = opcheck_verdict([], "after importing apex.normalization")
    assert status is Status.INFO
    assert summary.startswith("Apex registers no custom ops with torch.library here")


def test_an_opcheck_failure_names_the_op_and_the_test() -> None:
    good = OpcheckResult("apex::a_fwd", {"test_schema": "SUCCESS", "test_faketensor": "SUCCESS"})
    bad = OpcheckResult("apex::b_fwd", {"test_schema": "SUCCESS", "test_faketensor": "RuntimeError: shape"})
    unchecked = OpcheckResult("apex::c", {}, "no sample input for argument 'x' (Tensor)")
    status, summary = opcheck_verdict([good, bad, unchecked], "here")
    assert status is Status.WARN
    assert summary.startswith(
        "1 of 2 Apex custom ops fail torch.library.opcheck: apex::b_fwd test_faketensor:"
    )
    assert "not checked: apex::c" in summary
    status, summary = opcheck_verdict([good], "here")
    assert status is Status.PASS and "apex::a_fwd" in summary and "test_faketensor" in summary


# --------------------------------------------------------------------------- torch for real, on the CPU
@pytest.fixture
def on_the_cpu(monkeypatch):
    monkeypatch.setattr(device, "DEVICE", "cpu")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_explain_finds_a_real_graph_break_and_where_it_is(on_the_cpu) -> None:
    def broken(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        torch._dynamo.graph_break()
        return y.sin()

    report = compile_check.explain(broken, torch.randn(4))
    assert report.graphs == 2 and report.break_count == 1 and not report.error
    (only,) = report.breaks
    assert "graph_break" in only.reason
    assert only.where.startswith(__file__) and "in broken" in only.where


class _BreakingLayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        torch._dynamo.graph_break()  # what an opaque extension call does to the graph
        return y


def _make(cls: type[nn.Module]):
    def make(kind: str, hidden: int, affine: bool, dtype: torch.dtype) -> nn.Module:
        return cls(hidden, eps=1e-5, elementwise_affine=affine).to(dtype=dtype)

    return make


def _eager_backend(fn, **options):
    return torch.compile(fn, backend="eager", **options)


@pytest.mark.slow
def test_norm_case_on_the_cpu_passes_warns_and_fails_as_it_should(on_the_cpu) -> None:
    case = cases.case("fused_layer_norm.fp32.compiled", "compile")
    check, _ = compile_check.norm_case(case, 3, make=_make(nn.LayerNorm), compile_fn=_eager_backend)
    assert check.status is Status.PASS, check.summary
    assert check.details["graphs"]["graph_breaks"] == 0
    # what upstream's FusedLayerNorm does when compiling: torch's own op runs, and the summary says so
    assert (
        "Apex's kernel is not in the compiled graph: it calls torch.nn.functional.layer_norm" in check.summary
    )

    check, _ = compile_check.norm_case(case, 3, make=_make(_BreakingLayerNorm), compile_fn=_eager_backend)
    assert check.status is Status.WARN, check.summary
    assert "graph_break" in check.summary and "compiled matches eager" in check.summary

    def wrong_backend(fn, **options):  # compiled code that moves the output by 1%
        compiled = torch.compile(fn, backend="eager", **options)
        return lambda x: compiled(x) * 1.01

    check, _ = compile_check.norm_case(case, 3, make=_make(nn.LayerNorm), compile_fn=wrong_backend)
    assert check.status is Status.FAIL
    assert "compiled gives other numbers than eager: output (compiled vs eager)" in check.summary


# ----------------------------------------------------------------------------------------------- opcheck
_BEFORE = frozenset(torch._C._dispatch_get_all_op_names())


@torch.library.custom_op("verify_test_compile::scaled_fwd", mutates_args=())
def _scaled(
    input: torch.Tensor, weight: torch.Tensor, normalized_shape: list[int], eps: float
) -> torch.Tensor:
    return input * weight + eps


@_scaled.register_fake
def _scaled_fake(input, weight, normalized_shape, eps):
    return torch.empty_like(input)


@torch.library.custom_op("verify_test_compile::bad_fake_fwd", mutates_args=())
def _bad(input: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return input * weight


@_bad.register_fake
def _bad_fake(input, weight):
    return input.new_empty((1,))  # the wrong shape: what test_faketensor is there to catch


@torch.library.custom_op("verify_test_compile::odd_args", mutates_args=())
def _odd(input: torch.Tensor, unheard_of: torch.Tensor) -> torch.Tensor:
    return input + unheard_of


def test_custom_ops_are_found_and_opchecked_by_name() -> None:
    found = compile_check.apex_custom_ops(_BEFORE, namespaces=("verify_test_compile",))
    assert found == [
        "verify_test_compile::bad_fake_fwd",
        "verify_test_compile::odd_args",
        "verify_test_compile::scaled_fwd",
    ]
    assert compile_check.apex_custom_ops(_BEFORE, namespaces=("apex",)) == []  # no Apex installed here
    good = compile_check.opcheck_op("verify_test_compile::scaled_fwd", "cpu")
    assert good.tests and not good.failed and not good.skipped
    bad = compile_check.opcheck_op("verify_test_compile::bad_fake_fwd", "cpu")
    assert "test_faketensor" in bad.failed
    odd = compile_check.opcheck_op("verify_test_compile::odd_args", "cpu")
    assert odd.skipped == "no sample input for argument 'unheard_of' (Tensor)" and odd.tests == {}
    status, summary = opcheck_verdict([good, bad, odd], "test")
    assert status is Status.WARN and "verify_test_compile::bad_fake_fwd test_faketensor" in summary


def _torch_adamw(params, adam_w_mode: bool, **hyper):
    """FusedAdam(params, adam_w_mode=..., **hyper)'s place: torch's AdamW (single-tensor: traceable)."""
    assert adam_w_mode
    return torch.optim.AdamW(params, foreach=False, **hyper)


@pytest.mark.slow
def test_the_optimizer_and_training_step_cases_run_on_the_cpu(on_the_cpu) -> None:
    adam = cases.case("fused_adam.fp32.compiled_step", "compile")
    check, _ = compile_check.adam_case(adam, 5, fused_adam=_torch_adamw, compile_fn=_eager_backend)
    assert check.status in (Status.PASS, Status.WARN), check.summary
    assert not check.details["mismatches"] and check.details["update_agreement"] <= 1e-4

    amp = cases.case("amp_step.bf16_autocast.compiled", "compile")
    check, _ = compile_check.amp_case(
        amp, 5, parts=(amp_step.torch_norms, _torch_adamw), compile_fn=_eager_backend
    )
    assert check.status in (Status.PASS, Status.WARN), check.summary
    assert check.details["loss_rel_diff_max"] <= tolerances.AMP_LOSS_RTOL["bf16"]
    assert len(check.details["compiled_losses"]) == amp_step.STEPS
