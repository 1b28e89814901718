"""verify's parity cases fed wrong results on the CPU: the case code of verify.gpu.parity_adam and
verify.gpu.parity_norm runs for real, with torch's own optimizers and norm modules (right) or those same
modules with their result moved by a stated amount (wrong) standing where Apex's are compared. A parity
check that passes a wrong number is the defect these tests exist to catch; the GPU tier shows the same
with Apex itself (tests/gpu/test_wrong_result_gpu.py, reports/h200-2026-12-01-wrong-result/).

The tolerances are pinned here too, each with the perturbation it must catch: a 100x looser table passes
a wrong update that these tests require to FAIL.
"""

from __future__ import annotations

import math

import pytest
import torch

from verify.checks import Check, Status
from verify.gpu import cases, device, parity_adam, parity_norm, tolerances


@pytest.fixture(autouse=True)
def on_the_cpu(monkeypatch):
    monkeypatch.setattr(device, "DEVICE", "cpu")  # the case code allocates on device.DEVICE
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ----------------------------------------------------------------------------- FusedAdam's place
def _torch_adam(after_step=None):
    """A FusedAdam(params, adam_w_mode=..., **hyper) stand-in: torch's Adam/AdamW, then `after_step(params)`."""

    def make(params, adam_w_mode: bool, **hyper):
        cls = torch.optim.AdamW if adam_w_mode else torch.optim.Adam
        optimizer = cls(params, foreach=False, **hyper)
        if after_step is not None:
            step = optimizer.step

            def perturbed_step(*args, **kwargs):
                result = step(*args, **kwargs)
                with torch.no_grad():
                    after_step(optimizer.param_groups[0]["params"])
                return result

            optimizer.step = perturbed_step  # type: ignore[method-assign]  # the wrong result under test
        return optimizer

    return make


def _adam(mode: str, fused_adam) -> Check:
    check, _timings = parity_adam.run_case(
        cases.case(f"fused_adam.{mode}.fp32"), seed=7, fused_adam=fused_adam
    )
    return check


@pytest.mark.parametrize("mode", ["adam", "adamw"])
def test_torch_against_itself_passes(mode: str) -> None:
    check = _adam(mode, _torch_adam())
    assert check.status is Status.PASS, check.summary
    assert check.details["update_agreement"] == 0.0 and check.details["worst"]["param"]["tol_used"] == 0.0


def test_an_update_off_by_ten_times_the_fp32_tolerance_fails() -> None:
    # every param moved by 1e-4 of itself after each step: 10x rtol (1e-5), 50x atol at the params' 0.05 scale
    check = _adam("adamw", _torch_adam(lambda params: [p.mul_(1 + 1e-4) for p in params]))
    assert check.status is Status.FAIL, check.summary
    assert "step 1 param" in check.summary and "x the tolerance" in check.summary  # caught at the first step
    assert check.details["failure"]["tol_used"] > 2


def test_a_perturbation_well_inside_the_tolerance_passes() -> None:
    # 1e-7 of the param: a last-bit-scale difference, what two correct fp32 kernels may differ by
    check = _adam("adamw", _torch_adam(lambda params: [p.mul_(1 + 1e-7) for p in params]))
    assert check.status is Status.PASS, check.summary
    assert 0 < check.details["worst"]["param"]["tol_used"] < 0.1


def test_a_systematic_error_below_the_element_wise_tolerance_fails_the_update_agreement() -> None:
    # every step's update 1.2e-4 too long: after 7 steps of ~1e-3 each an element is off by < 1e-6 (atol),
    # but the whole update is off by 1.2e-4 relative, over ADAM_UPDATE_AGREEMENT["fp32"] (1e-4)
    before: list[torch.Tensor] = []

    class LongSteps(torch.optim.AdamW):
        def step(self, closure=None):
            params = self.param_groups[0]["params"]
            before[:] = [p.detach().clone() for p in params]
            result = super().step(closure)
            with torch.no_grad():
                for p, b in zip(params, before, strict=True):
                    p.copy_(b + (p - b) * (1 + 1.2e-4))
            return result

    check = _adam("adamw", lambda params, adam_w_mode, **hyper: LongSteps(params, foreach=False, **hyper))
    assert check.status is Status.FAIL, check.summary
    assert "update differs from torch's by" in check.summary and "limit 0.0001" in check.summary
    assert "failure" not in check.details  # no single element was off its tolerance


def test_one_wrong_tensor_among_the_params_fails() -> None:
    # the 65537-element param (it crosses multi_tensor_apply's chunk) gets no update: a dropped chunk
    index = parity_adam.SHAPES.index((65537,))
    frozen: dict[str, torch.Tensor] = {}

    def drop(params):
        p = params[index]
        frozen.setdefault("before", p.detach().clone())
        p.copy_(frozen["before"])

    check = _adam("adam", _torch_adam(drop))
    assert check.status is Status.FAIL and f"param {index} (65537,)" in check.summary, check.summary


def test_a_nan_in_the_result_fails() -> None:
    def poison(params):
        params[1].view(-1)[5] = math.nan

    check = _adam("adamw", _torch_adam(poison))
    assert check.status is Status.FAIL, check.summary
    assert "1 NaN/Inf element(s) in the fused result" in check.summary


def test_the_wrong_weight_decay_mode_fails() -> None:
    """Adam's L2 decay where AdamW's decoupled decay was asked for: every update slightly off."""

    def l2_instead(params, adam_w_mode: bool, **hyper):
        return torch.optim.Adam(params, foreach=False, **hyper)

    check = _adam("adamw", l2_instead)
    assert check.status is Status.FAIL, check.summary


# ----------------------------------------------------------------------------- FusedLayerNorm's place
class _Scaled(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module, factor: float) -> None:
        super().__init__()
        self.inner, self.factor = inner, factor
        self.weight = getattr(inner, "weight", None)
        self.bias = getattr(inner, "bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * self.factor


def _torch_norm(factor: float = 1.0):
    def make(kind: str, hidden: int, affine: bool, dtype: torch.dtype) -> torch.nn.Module:
        cls = torch.nn.LayerNorm if kind == "fused_layer_norm" else torch.nn.RMSNorm
        module = cls(hidden, eps=parity_norm.EPS, elementwise_affine=affine).to(device="cpu", dtype=dtype)
        return module if factor == 1.0 else _Scaled(module, factor)

    return make


@pytest.mark.parametrize("name", ["fused_layer_norm.affine.fp32", "fused_rms_norm.plain.fp32"])
def test_torch_norm_against_the_reference_passes(name: str) -> None:
    check, _ = parity_norm.run_case(cases.case(name), seed=3, make=_torch_norm())
    assert check.status is Status.PASS, check.summary


@pytest.mark.parametrize("name", ["fused_layer_norm.affine.fp32", "fused_rms_norm.affine.fp32"])
def test_a_norm_output_off_by_ten_times_the_fp32_tolerance_fails(name: str) -> None:
    check, _ = parity_norm.run_case(cases.case(name), seed=3, make=_torch_norm(1 + 1e-4))
    assert check.status is Status.FAIL, check.summary
    assert "hidden 33 output" in check.summary and check.details["failures"]


# ----------------------------------------------------------------------------- the numbers
def test_the_tolerance_values_are_pinned_and_each_says_where_it_comes_from() -> None:
    """A change to any of these is a change of what verify calls "agrees": it must come with its reason
    (tolerances.py's docstring and comments) and this test changed on purpose."""
    pinned = {
        ("adam", "fp32"): (1e-5, 1e-6),
        ("adam", "bf16"): (1.6e-2, 6e-5),
        ("adam", "fp16"): (2e-3, 8e-6),
        ("state", "exp_avg"): (1e-4, 1e-8),
        ("state", "exp_avg_sq"): (1e-4, 1e-12),
        ("norm", "fp32", "forward"): (1e-5, 1e-5),
        ("norm", "fp32", "input_grad"): (1e-4, 1e-5),
        ("norm", "fp32", "param_grad"): (2e-3, 2e-4),
        ("norm", "bf16", "forward"): (1.6e-2, 3e-4),
        ("norm", "bf16", "input_grad"): (1.6e-2, 3e-3),
        ("norm", "bf16", "param_grad"): (1.6e-2, 3e-3),
        ("norm", "fp16", "forward"): (2e-3, 1e-3),
        ("norm", "fp16", "input_grad"): (1e-3, 1e-3),
        ("norm", "fp16", "param_grad"): (1e-3, 1e-3),
    }
    table: dict[tuple[str, ...], tolerances.Tolerance] = {
        ("adam", k): v for k, v in tolerances.ADAM_PARAMS.items()
    }
    table |= {("state", k): v for k, v in tolerances.ADAM_STATE.items()}
    table |= {("norm", d, q): v for d, quantities in tolerances.NORM.items() for q, v in quantities.items()}
    assert {k: (t.rtol, t.atol) for k, t in table.items()} == pinned
    assert all(t.why for t in table.values()), [k for k, t in table.items() if not t.why]
    assert all(
        set(t.to_json()) == {"rtol", "atol"} for t in table.values()
    )  # the report's shape is unchanged
    assert tolerances.ADAM_UPDATE_AGREEMENT == {"fp32": 1e-4, "bf16": 2e-2, "fp16": 5e-3}
    assert tolerances.AMP_LOSS_RTOL == {"bf16": 2e-2, "fp16": 1e-2}
    assert tolerances.AMP_UPDATE_AGREEMENT == {"bf16": 0.15, "fp16": 0.08}


def test_the_gpu_tiers_wrong_result_wrapper_wraps_the_real_apex_classes_only_when_asked(tmp_path) -> None:
    """tests/gpu/wrong_result/sitecustomize.py on the upstream Apex tree (Python-only here: the classes import,
    nothing is constructed), so the H200 run cannot fail for a wrapper that does not install."""
    import os
    import subprocess
    import sys

    from tests.support import REPO, unpack_apex

    apex_root = unpack_apex("6424da3b", tmp_path)
    probe = (
        "import apex.optimizers as o, apex.normalization as n; "
        "print(o.FusedAdam.step.__qualname__, n.FusedLayerNorm.forward.__qualname__, "
        "n.FusedRMSNorm.forward.__qualname__)"
    )

    def qualnames(wrong: str) -> list[str]:
        path = os.pathsep.join([str(REPO / "tests" / "gpu" / "wrong_result"), str(apex_root), str(REPO)])
        done = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "VERIFY_TEST_WRONG_RESULT": wrong},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()

    assert qualnames("") == ["FusedAdam.step", "FusedLayerNorm.forward", "FusedRMSNorm.forward"]
    assert qualnames("fused_adam,fused_layer_norm") == [
        "_install.<locals>.step",
        "_install.<locals>.forward",
        "FusedRMSNorm.forward",
    ]
