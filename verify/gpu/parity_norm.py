"""Parity of apex.normalization.FusedLayerNorm / FusedRMSNorm with torch, forward and backward (group parity_norm).

The fused module runs in the case's dtype on fresh random inputs (non-zero mean, non-unit variance,
random weight and bias); the reference is torch's layer_norm / rms_norm computed in fp32 on exactly
the same values upcast, with the same upstream gradient. Compared: output, input grad, weight grad and
(LayerNorm) bias grad, each with its dtype's tolerance (verify.gpu.tolerances.NORM).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from verify.checks import Check, Status
from verify.gpu import device, tolerances
from verify.gpu.cases import Case, case_seed
from verify.gpu.compare import Comparison, compare

HIDDEN_SIZES = (33, 1000, 1023, 4096, 5123)  # small, non-multiples of 8, and the common 4096
LEADING = (4, 16)  # 64 rows, as a 3-D (batch, sequence, hidden) input
EPS = 1e-5
NAMES = {"fused_layer_norm": "FusedLayerNorm", "fused_rms_norm": "FusedRMSNorm"}


def setup() -> str:
    return device.require_cuda()


def rms_norm_reference(x: torch.Tensor, hidden: int, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """torch's rms_norm where it exists (torch >= 2.4), else its definition."""
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (hidden,), weight, eps)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


def make_fused(kind: str, hidden: int, affine: bool, dtype: torch.dtype) -> torch.nn.Module:
    from apex.normalization import FusedLayerNorm, FusedRMSNorm

    cls = FusedLayerNorm if kind == "fused_layer_norm" else FusedRMSNorm
    return cls(hidden, eps=EPS, elementwise_affine=affine).to(device=device.DEVICE, dtype=dtype)


def _one_size(
    kind: str,
    hidden: int,
    affine: bool,
    dtype: torch.dtype,
    dtype_name: str,
    gen: torch.Generator,
    make: Callable[..., torch.nn.Module],
) -> tuple[list[Comparison], str]:
    module = make(kind, hidden, affine, dtype)
    params: list[tuple[str, torch.nn.Parameter]] = []
    with torch.no_grad():
        if affine:
            weight = module.get_parameter("weight")
            weight.copy_(device.uniform((hidden,), gen, 0.5, 1.5, dtype=dtype))
            params.append(("weight", weight))
            if kind == "fused_layer_norm":
                # small bias: where gamma * x_hat cancels it, the kernel's roundings of the terms stay under atol
                bias = module.get_parameter("bias")
                bias.copy_(device.uniform((hidden,), gen, -0.01, 0.01, dtype=dtype))
                params.append(("bias", bias))
    x = device.randn((*LEADING, hidden), gen, dtype=dtype, scale=2.0, shift=0.5).requires_grad_(True)
    grad_out = device.randn((*LEADING, hidden), gen, dtype=dtype)

    y = module(x)
    y.backward(grad_out)
    grad_fn = type(y.grad_fn).__name__ if y.grad_fn is not None else None

    xr = x.detach().float().requires_grad_(True)
    ref_params = {name: p.detach().float().requires_grad_(True) for name, p in params}
    if kind == "fused_layer_norm":
        yr = F.layer_norm(xr, (hidden,), ref_params.get("weight"), ref_params.get("bias"), EPS)
    else:
        yr = rms_norm_reference(xr, hidden, ref_params.get("weight"), EPS)
    yr.backward(grad_out.float())

    tol = tolerances.NORM[dtype_name]
    where = f"hidden {hidden}"
    results = [
        compare(f"{where} output", y, yr, tol["forward"]),
        compare(f"{where} input grad", x.grad, xr.grad, tol["input_grad"]),
    ]
    for name, p in params:
        if p.grad is None:
            results.append(
                Comparison(
                    f"{where} {name} grad",
                    False,
                    p.numel(),
                    tol=tol["param_grad"],
                    problem="no gradient reached the fused module's parameter",
                )
            )
        else:
            results.append(compare(f"{where} {name} grad", p.grad, ref_params[name].grad, tol["param_grad"]))
    return results, grad_fn or ""


def run_case(
    case: Case, seed: int, make: Callable[..., torch.nn.Module] = make_fused
) -> tuple[Check, list[dict]]:
    """make(kind, hidden, affine, dtype): the module compared with torch (default Apex's, make_fused); the
    unit tier passes torch modules that return wrong results, on the CPU, to show that this comparison
    fails them."""
    kind, affine, dtype_name = case.param("kind"), case.param("affine"), case.param("dtype")
    dtype = device.DTYPES[dtype_name]
    gen = device.generator(case_seed(seed, case.name))
    reference = (
        "F.layer_norm"
        if kind == "fused_layer_norm"
        else ("F.rms_norm" if hasattr(F, "rms_norm") else "the RMSNorm formula")
    )
    label = (
        f"{NAMES[kind]}({'affine' if affine else 'no affine'}, {dtype_name}) fwd+bwd vs {reference} in fp32"
    )
    comparisons: list[Comparison] = []
    grad_fns: dict[int, str] = {}
    for hidden in HIDDEN_SIZES:
        results, grad_fns[hidden] = _one_size(kind, hidden, affine, dtype, dtype_name, gen, make)
        comparisons.extend(results)
    failures = [c for c in comparisons if not c.ok]
    worst = max(comparisons, key=lambda c: c.tol_used)
    details = {
        "seed": seed,
        "case_seed": case_seed(seed, case.name),
        "dtype": dtype_name,
        "elementwise_affine": affine,
        "hidden_sizes": list(HIDDEN_SIZES),
        "input_shape": [*LEADING, "hidden"],
        "eps": EPS,
        "reference": f"{reference} on the same values in fp32",
        "tolerances": {k: v.to_json() for k, v in tolerances.NORM[dtype_name].items()},
        "grad_fn": grad_fns,
        "worst": worst.to_json(),
        "compared": [c.what for c in comparisons],
    }
    if failures:
        details["failures"] = [c.to_json() for c in failures[:10]]
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        return Check(
            case.layer, case.name, Status.FAIL, f"{label}: {failures[0].describe()}{more}", details
        ), []
    return Check(
        case.layer,
        case.name,
        Status.PASS,
        f"{label}: {len(comparisons)} tensors over hidden {'/'.join(map(str, HIDDEN_SIZES))} agree "
        f"(worst {worst.describe()})",
        details,
    ), []
