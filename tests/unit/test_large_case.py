"""--large's case code on the CPU, scaled down: the 2^31 limit is moved to 2^14 so a torch LayerNorm and
AdamW can stand where Apex's kernels run on a GPU; one that is wrong only past the limit must FAIL naming
the limit and the upstream issues, a right one PASS, and too little free memory is a SKIP with the figures."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from verify.checks import Status
from verify.gpu import cases, device, large_check, large_sizes
from verify.gpu.large_sizes import LargeSize

SMALL_LIMIT = 2**14
HIDDEN = 64
NORM = LargeSize("FusedLayerNorm", (SMALL_LIMIT // HIDDEN + 8, HIDDEN), "fp32", 4, 4, "x, y, dy, dx")
ADAM = LargeSize("FusedAdam", (SMALL_LIMIT + 512,), "fp32", 4, 4, "p, g, m, v")


@pytest.fixture(autouse=True)
def scaled_down(monkeypatch):
    monkeypatch.setattr(device, "DEVICE", "cpu")
    monkeypatch.setattr(large_check, "LIMIT", SMALL_LIMIT)
    monkeypatch.setattr(large_check, "STRIDE_ROWS", 16)
    monkeypatch.setattr(large_check, "STRIDE_ELEMENTS", 31)
    monkeypatch.setattr(large_check, "free_memory", lambda: (2**40, 2**40))


class _WrongPastTheLimit(nn.LayerNorm):
    """Right below the limit, 10% off in every row that holds an element past it (an int32 overflow's shape)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        first_past = SMALL_LIMIT // x.shape[-1]
        return torch.cat([y[:first_past], y[first_past:] * 1.1])


def _case(name: str) -> cases.Case:
    return cases.case(name, "large")


def test_a_norm_right_everywhere_passes_and_one_wrong_past_the_limit_fails_naming_it() -> None:
    case = _case("fused_layer_norm.bf16.past_2_31")
    check, _ = large_check.layer_norm_case(case, 3, NORM, fused_cls=nn.LayerNorm)
    assert check.status is Status.PASS, check.summary
    assert "this build handles it" in check.summary
    check, _ = large_check.layer_norm_case(case, 3, NORM, fused_cls=_WrongPastTheLimit)
    assert check.status is Status.FAIL
    assert f"wrong numbers past the 2^31-element limit ({large_sizes.UPSTREAM})" in check.summary
    assert "output" in check.summary


def _adamw(corrupt_past: int | None = None):
    def make(params, adam_w_mode: bool, **hyper):
        optimizer = torch.optim.AdamW(params, foreach=False, **hyper)
        if corrupt_past is not None:
            step = optimizer.step

            def wrong_step():
                step()
                with torch.no_grad():
                    params[0].view(-1)[corrupt_past:] += 1e-3  # a step's size, only past the limit

            optimizer.step = wrong_step  # type: ignore[method-assign,assignment]
        return optimizer

    return make


def test_adam_right_everywhere_passes_and_wrong_past_the_limit_fails() -> None:
    case = _case("fused_adam.fp32.past_2_31")
    check, _ = large_check.adam_case(case, 4, ADAM, fused_adam=_adamw())
    assert check.status is Status.PASS, check.summary
    check, _ = large_check.adam_case(case, 4, ADAM, fused_adam=_adamw(corrupt_past=SMALL_LIMIT))
    assert check.status is Status.FAIL and "past the 2^31-element limit" in check.summary


def test_too_little_free_memory_is_a_skip_with_the_figures(monkeypatch) -> None:
    monkeypatch.setattr(large_check, "free_memory", lambda: (10 * 2**30, 141 * 2**30))
    check, timings = large_check.run_case(_case("fused_adam.fp32.past_2_31"), 1)
    assert check.status is Status.SKIP and timings == []
    assert check.summary == (
        "FusedAdam past 2^31 elements needs 36.0 GiB of GPU memory; 10.0 of 141.0 GiB are free now: not run"
    )
