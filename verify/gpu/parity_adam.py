"""Parity of apex.optimizers.FusedAdam with torch.optim.Adam / AdamW (group parity_adam).

Identical copies of a list of params with odd shapes (one element, non-multiples of 8, a tensor that
crosses multi_tensor_apply's 65536-element chunk), identical fresh random grads every step, weight
decay on, several steps; params (and the fp32 optimizer state) compared after every step.

For bf16/fp16 params the reference does what FusedAdam does (apex/optimizers/fused_adam.py and
csrc/multi_tensor_adam.cu: exp_avg/exp_avg_sq in fp32, the update in fp32, the result stored in the
param dtype): torch's optimizer steps an fp32 copy of the low-precision params, which is rounded
back to the param dtype after each step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from verify.checks import Check, Status
from verify.gpu import device, tolerances
from verify.gpu.cases import Case, case_seed
from verify.gpu.compare import Comparison, compare, relative_l2
from verify.gpu.tolerances import Tolerance

SHAPES = ((1,), (7, 13), (1023,), (3, 5, 7), (256, 1000), (65537,), (4096,))
STEPS = 7  # as Apex's tests/L0/run_optimizers (iters=7)
# eps 1e-6 (Apex's test_adam_option uses 3e-6): with 1e-8, an element whose grad (+ weight_decay * p in
# Adam mode) lands within ~1e-8 of zero turns a last-bit difference into a visible one, on any kernel.
HYPER: dict[str, Any] = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-6, "weight_decay": 0.1}
PARAM_SCALE = 0.05  # typical init scale: an lr-sized step is several bf16 ulps at this magnitude
GRAD_SCALE = 0.01  # small grads make the L2 term (weight_decay * p) visible in Adam mode


def setup() -> str:
    return device.require_cuda()


def _step_both(
    fused: torch.optim.Optimizer,
    reference: torch.optim.Optimizer,
    fused_params: list,
    ref_params: list,
    ref_lowp: list,
    grads: list,
    dtype: torch.dtype,
) -> None:
    """One step of both optimizers on the same grads; the reference re-reads the rounded params first."""
    for p, g in zip(fused_params, grads, strict=True):
        p.grad = g.clone()
    for p, q, g in zip(ref_params, ref_lowp, grads, strict=True):
        p.data.copy_(q.float())
        p.grad = g.float()
    fused.step()
    reference.step()
    for q, p in zip(ref_lowp, ref_params, strict=True):
        q.copy_(p.data.to(dtype))


def _compare_step(
    step: int,
    fused: torch.optim.Optimizer,
    reference: torch.optim.Optimizer,
    fused_params: list,
    ref_params: list,
    ref_lowp: list,
    param_tol: Tolerance,
    state_keys: tuple[str, ...],
    worst: dict[str, Comparison],
    failure: Comparison | None,
) -> Comparison | None:
    """Compare each param (and its state) after `step`, keeping the worst per kind in `worst`; returns the
    first failure so far."""
    for i, (p, q, rp) in enumerate(zip(fused_params, ref_lowp, ref_params, strict=True)):
        results = [compare(f"step {step} param {i} {tuple(p.shape)}", p.data, q, param_tol)]
        for key in state_keys:
            results.append(
                compare(
                    f"step {step} {key} {i} {tuple(p.shape)}",
                    fused.state[p][key],
                    reference.state[rp][key],
                    tolerances.ADAM_STATE[key],
                )
            )
        for kind, result in zip(("param",) + state_keys, results, strict=True):
            if kind not in worst or result.tol_used > worst[kind].tol_used:
                worst[kind] = result
            if not result.ok and failure is None:
                failure = result
    return failure


def run_case(
    case: Case, seed: int, fused_adam: Callable[..., torch.optim.Optimizer] | None = None
) -> tuple[Check, list[dict]]:
    """fused_adam: what is compared with torch (default apex.optimizers.FusedAdam); the unit tier passes a
    torch optimizer that returns wrong results, on the CPU, to show that this comparison fails it."""
    if fused_adam is None:
        from apex.optimizers import FusedAdam

        fused_adam = FusedAdam

    dtype_name = case.param("dtype")
    adam_w_mode = case.param("adam_w_mode")
    dtype = device.DTYPES[dtype_name]
    gen = device.generator(case_seed(seed, case.name))
    initial = [device.randn(s, gen, dtype=dtype, scale=PARAM_SCALE) for s in SHAPES]

    fused_params = [torch.nn.Parameter(t.clone()) for t in initial]
    # reference: fp32 copies; for low precision they are re-read from the rounded params every step
    ref_lowp = [t.clone() for t in initial]
    ref_params = [torch.nn.Parameter(t.float().clone()) for t in initial]  # never a view of initial
    fused = fused_adam(fused_params, adam_w_mode=adam_w_mode, **HYPER)
    torch_cls = torch.optim.AdamW if adam_w_mode else torch.optim.Adam
    reference = torch_cls(ref_params, **HYPER)

    param_tol = tolerances.ADAM_PARAMS[dtype_name]
    # The fp32 state is compared too, except for low-precision params in L2 mode: there a rare
    # 1-ulp rounding disagreement in p feeds weight_decay * p into the grad and so into the state.
    state_keys = ("exp_avg", "exp_avg_sq") if dtype_name == "fp32" or adam_w_mode else ()
    worst: dict[str, Comparison] = {}
    failure: Comparison | None = None
    for step in range(1, STEPS + 1):
        grads = [device.randn(s, gen, dtype=dtype, scale=GRAD_SCALE) for s in SHAPES]
        _step_both(fused, reference, fused_params, ref_params, ref_lowp, grads, dtype)
        failure = _compare_step(
            step, fused, reference, fused_params, ref_params, ref_lowp, param_tol, state_keys, worst, failure
        )
        if failure is not None:
            break

    moved = torch.cat([(q.float() - t.float()).reshape(-1) for q, t in zip(ref_lowp, initial, strict=True)])
    fused_moved = torch.cat(
        [(p.data.float() - t.float()).reshape(-1) for p, t in zip(fused_params, initial, strict=True)]
    )
    agreement = relative_l2(fused_moved, moved)
    agreement_limit = tolerances.ADAM_UPDATE_AGREEMENT[dtype_name]
    details = {
        "seed": seed,
        "case_seed": case_seed(seed, case.name),
        "shapes": [list(s) for s in SHAPES],
        "numel": sum(t.numel() for t in initial),
        "dtype": dtype_name,
        "adam_w_mode": adam_w_mode,
        "reference": f"torch.optim.{torch_cls.__name__}"
        + ("" if dtype_name == "fp32" else " on fp32 copies rounded to the param dtype each step"),
        "steps": STEPS,
        "state_compared": list(state_keys),
        "hyper": {k: list(v) if isinstance(v, tuple) else v for k, v in HYPER.items()},
        "worst": {k: v.to_json() for k, v in worst.items()},
        "update_agreement": agreement,
        "update_agreement_limit": agreement_limit,
        "torch_update_norm": float(torch.linalg.vector_norm(moved).item()),
    }
    label = f"FusedAdam({'adamw' if adam_w_mode else 'adam'}, {dtype_name}) vs {details['reference']}"
    if failure is not None:
        details["failure"] = failure.to_json()
        return Check(case.layer, case.name, Status.FAIL, f"{label}: {failure.describe()}", details), []
    if not agreement <= agreement_limit:  # also catches NaN
        return Check(
            case.layer,
            case.name,
            Status.FAIL,
            f"{label}: the {STEPS}-step update differs from torch's by {agreement:.3g} "
            f"(relative L2; limit {agreement_limit:g})",
            details,
        ), []
    return Check(
        case.layer,
        case.name,
        Status.PASS,
        f"{label}: {STEPS} steps on {len(SHAPES)} params agree ({worst['param'].describe()}; "
        f"update {agreement:.2g} off)",
        details,
    ), []
