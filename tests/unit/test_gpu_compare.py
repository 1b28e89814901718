"""The comparison helpers behind every parity check, on the CPU with real torch tensors."""

from __future__ import annotations

import math

import pytest
import torch

from verify.gpu import tolerances
from verify.gpu.compare import compare, json_number, relative_l2
from verify.gpu.parity_norm import rms_norm_reference
from verify.gpu.tolerances import Tolerance

TIGHT = Tolerance(rtol=1e-5, atol=1e-6)


def _values(n: int = 4096, seed: int = 3) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=gen) * 2 + 0.5


def test_identical_tensors_pass_with_no_tolerance_used():
    x = _values()
    result = compare("x", x.clone(), x, TIGHT)
    assert result.ok and result.mismatched == 0 and result.max_abs == 0.0 and result.tol_used == 0.0
    assert "0.00 of tolerance" in result.describe()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_never_passes_even_where_the_reference_has_it_too(bad):
    x = _values()
    actual, expected = x.clone(), x.clone()
    actual[17] = bad
    result = compare("out", actual, expected, Tolerance(rtol=1.0, atol=1.0))
    assert not result.ok and result.nonfinite_actual == 1 and result.worst["index"] == [17]
    assert "NaN/Inf" in result.describe() and "fused result" in result.describe()
    expected[17] = bad  # equal_nan would call this a match; a NaN is never a pass here
    assert not compare("out", actual, expected, Tolerance(rtol=1.0, atol=1.0)).ok


def test_a_real_mismatch_fails_and_names_the_element():
    x = _values().reshape(64, 64)
    actual = x.clone()
    actual[5, 9] += 0.01
    result = compare("input grad", actual, x, TIGHT)
    assert not result.ok and result.mismatched == 1
    assert result.worst["index"] == [5, 9]
    assert result.tol_used > 100
    text = result.describe()
    assert "input grad: 1/4096 elements off" in text and "[5, 9]" in text


@pytest.mark.parametrize(("dtype", "name"), [(torch.bfloat16, "bf16"), (torch.float16, "fp16")])
def test_rounding_to_the_dtype_passes_its_tolerance_but_not_fp32s(dtype, name):
    exact = _values()
    rounded = exact.to(dtype)  # what a correct kernel returning this dtype can at best produce
    for quantity in ("forward", "input_grad", "param_grad"):
        assert compare(quantity, rounded, exact, tolerances.norm(name, quantity)).ok
    assert not compare("forward", rounded, exact, tolerances.norm("fp32", "forward")).ok


def test_an_error_of_a_few_percent_fails_even_bf16():
    exact = _values()
    wrong = (exact * 1.05).to(torch.bfloat16)
    assert not compare("output", wrong, exact, tolerances.norm("bf16", "forward")).ok


def test_shape_mismatch_and_empty_tensors_are_problems_not_passes():
    result = compare("x", torch.ones(3), torch.ones(4), TIGHT)
    assert not result.ok and "shape (3,) vs reference (4,)" in result.describe()
    assert not compare("x", torch.ones(0), torch.ones(0), TIGHT).ok


def test_comparison_json_is_valid_json_numbers():
    result = compare("x", torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, 1.0]), TIGHT)
    data = result.to_json()
    assert data["ok"] is False and data["tol"] == {"rtol": 1e-5, "atol": 1e-6}
    assert json_number(float("nan")) == "nan" and json_number(1.5) == 1.5


def test_relative_l2():
    e = _values()
    assert relative_l2(e, e) == 0.0
    assert math.isclose(relative_l2(e * 1.01, e), 0.01, rel_tol=1e-4)
    assert relative_l2(torch.ones(3), torch.zeros(3)) == math.inf
    # a tensor that stays zero on both sides (a state never updated) agrees; it is not infinitely off
    assert relative_l2(torch.zeros(3), torch.zeros(3)) == 0.0
    assert math.isnan(relative_l2(torch.tensor([float("nan")]), torch.ones(1)))
    # an overflowed result is not "infinitely far": it is no figure at all, like a NaN
    assert math.isnan(relative_l2(torch.tensor([float("inf")]), torch.ones(1)))


def test_tolerance_table_is_complete_and_keeps_apex_figures():
    for dtype in ("fp32", "bf16", "fp16"):
        assert set(tolerances.NORM[dtype]) == {"forward", "input_grad", "param_grad"}
        assert dtype in tolerances.ADAM_PARAMS and dtype in tolerances.ADAM_UPDATE_AGREEMENT
    # tests/L0/run_fused_layer_norm/test_fused_layer_norm.py, test_layer_norm_bfloat16
    assert tolerances.norm("bf16", "forward") == Tolerance(rtol=1.6e-2, atol=3e-4)
    assert tolerances.norm("bf16", "input_grad") == Tolerance(rtol=1.6e-2, atol=3e-3)
    # looser dtypes never get tighter tolerances than stricter ones
    for quantity in ("forward", "input_grad"):
        assert tolerances.norm("fp32", quantity).rtol < tolerances.norm("fp16", quantity).rtol
        assert tolerances.norm("fp16", quantity).rtol < tolerances.norm("bf16", quantity).rtol


def test_rms_norm_reference_is_the_definition():
    x = _values(4 * 33).reshape(4, 33)
    w = torch.linspace(0.5, 1.5, 33)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    assert compare("rms", rms_norm_reference(x, 33, w, 1e-5), expected, TIGHT).ok


def test_zero_tolerance_means_exact():
    x = torch.tensor([0.0, 1.0, -2.0])
    exact = compare("x", x.clone(), x, Tolerance(rtol=0.0, atol=0.0))
    assert exact.ok and exact.tol_used == 0.0  # 0 off of 0 allowed uses none of it (not NaN)
    # an element exactly one off is as off as any other
    assert not compare("x", torch.tensor([2.0]), torch.tensor([1.0]), TIGHT).ok
    assert not compare("x", x + torch.tensor([1e-30, 0.0, 0.0]), x, Tolerance(rtol=0.0, atol=0.0)).ok


def test_a_gradient_that_never_arrived_fails_the_comparison_instead_of_crashing():
    x = _values()
    for actual, expected, side in ((None, x, "fused result"), (x, None, "torch reference")):
        result = compare("x grad", actual, expected, TIGHT)
        assert not result.ok and f"no tensor (None) for the {side}" in result.describe()
        assert result.numel == 0  # nothing was compared, whatever the side that came


def test_an_element_that_uses_exactly_its_whole_tolerance_passes():
    # tol_used <= 1 passes: 0.5 off with atol 0.5 (all three exact in binary) is on the edge, not over it
    expected = torch.tensor([1.0, -3.0])
    edge = compare("x", expected + 0.5, expected, Tolerance(rtol=0.0, atol=0.5))
    assert edge.ok and edge.tol_used == 1.0 and edge.mismatched == 0
    assert not compare("x", expected + 0.5, expected, Tolerance(rtol=0.0, atol=0.25)).ok


def test_the_line_names_the_tolerance_it_was_judged_against_and_a_problem_uses_none_of_it():
    x = _values()
    assert "(atol 1e-06 rtol 1e-05)" in compare("x", x.clone(), x, TIGHT).describe()
    problem = compare("x", torch.ones(3), torch.ones(4), TIGHT)
    # the callers rank comparisons by tol_used: one that measured nothing claims none
    data = problem.to_json()
    assert problem.tol_used == 0.0 and data["tol_used"] == 0.0
    assert data["nonfinite_actual"] == data["nonfinite_expected"] == data["mismatched"] == 0


@pytest.mark.parametrize(
    ("actual", "expected", "shown"),
    [
        (torch.ones(4, 1), torch.ones(4), "shape (4, 1) vs reference (4,)"),  # broadcasts: 16 pairs, not 4
        (torch.ones(3), torch.ones(2), "shape (3,) vs reference (2,)"),  # the longer one first
        (torch.ones(2), torch.ones(3), "shape (2,) vs reference (3,)"),
        (None, torch.ones(3), "no tensor (None) for the fused result"),
    ],
)
def test_a_comparison_never_made_reports_its_problem_and_no_worst_element_or_difference(
    actual: torch.Tensor | None, expected: torch.Tensor, shown: str
) -> None:
    data = compare("x", actual, expected, TIGHT).to_json()
    assert data["ok"] is False and shown in str(data["problem"])
    assert "worst" not in data and data["max_abs"] == 0.0 and data["tol_used"] == 0.0


def test_a_comparison_made_reports_its_worst_element_and_no_problem() -> None:
    expected = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    data = compare("x", expected + torch.tensor([[0.0, 0.0], [0.5, 0.0]]), expected, TIGHT).to_json()
    assert data["worst"] == {"index": [1, 0], "actual": 3.5, "expected": 3.0}
    assert "problem" not in data and data["max_abs"] == 0.5
