"""A short run of the fused kernels on every other GPU of the node (group smoke, one case per device).

The parity and timing layers run on device 0 (cuda:0). A node has more GPUs (8 on a cluster node) and
any of them can differ (another capability, a bad card, a driver fault), so each further device gets
a smoke check: FusedLayerNorm and FusedRMSNorm forward+backward and one FusedAdam step on small fresh
inputs, against torch on the same device and the same values, with the fp32 tolerances of
verify/gpu/tolerances.py. With one GPU there is no smoke case and the report is unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from verify.checks import Check, Status
from verify.gpu import device, tolerances
from verify.gpu.cases import Case, case_seed
from verify.gpu.compare import Comparison, compare
from verify.gpu.parity_norm import rms_norm_reference

ROWS, HIDDEN = 64, 1024
ADAM_SHAPES = ((1000,), (64, 257))
ADAM_HYPER: dict[str, Any] = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}


def setup() -> str:
    described = device.require_cuda()
    return f"{torch.cuda.device_count()} devices, cuda:0 {described}"


def _norms(gen: torch.Generator) -> list[Comparison]:
    from apex.normalization import FusedLayerNorm, FusedRMSNorm

    x = device.randn((ROWS, HIDDEN), gen, scale=2.0, shift=0.5).requires_grad_(True)
    dy = device.randn((ROWS, HIDDEN), gen)
    weight = device.uniform((HIDDEN,), gen, 0.5, 1.5)
    bias = device.uniform((HIDDEN,), gen, -0.01, 0.01)
    out: list[Comparison] = []
    for name, cls in (("layer_norm", FusedLayerNorm), ("rms_norm", FusedRMSNorm)):
        module = cls(HIDDEN, eps=1e-5).to(device.DEVICE)
        with torch.no_grad():
            module.weight.copy_(weight)
            if name == "layer_norm":
                module.bias.copy_(bias)
        y = module(x)
        (dx,) = torch.autograd.grad(y, [x], dy)
        ref_x = x.detach().clone().requires_grad_(True)
        ref_y = (
            F.layer_norm(ref_x, (HIDDEN,), weight, bias, 1e-5)
            if name == "layer_norm"
            else rms_norm_reference(ref_x, HIDDEN, weight, 1e-5)
        )
        (ref_dx,) = torch.autograd.grad(ref_y, [ref_x], dy)
        out.append(compare(f"{name} output", y.detach(), ref_y.detach(), tolerances.norm("fp32", "forward")))
        out.append(compare(f"{name} input grad", dx, ref_dx, tolerances.norm("fp32", "input_grad")))
    return out


def _adam(gen: torch.Generator) -> list[Comparison]:
    from apex.optimizers import FusedAdam

    base = [device.randn(s, gen, scale=0.02) for s in ADAM_SHAPES]
    grads = [device.randn(s, gen, scale=0.01) for s in ADAM_SHAPES]
    sides = []
    for make in (
        lambda ps: FusedAdam(ps, adam_w_mode=True, **ADAM_HYPER),
        lambda ps: torch.optim.AdamW(ps, foreach=False, **ADAM_HYPER),
    ):
        params = [nn.Parameter(b.clone()) for b in base]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        make(params).step()
        sides.append(params)
    return [
        compare(f"FusedAdam param {i}", f.detach(), t.detach(), tolerances.ADAM_PARAMS["fp32"])
        for i, (f, t) in enumerate(zip(*sides, strict=True))
    ]


def run_case(case: Case, seed: int) -> tuple[Check, list[dict]]:
    index = case.param("device")
    if index >= torch.cuda.device_count():
        return Check(
            case.layer,
            case.name,
            Status.FAIL,
            f"cuda:{index} is not visible to this worker ({torch.cuda.device_count()} devices)",
            {"seed": seed},
        ), []
    with torch.cuda.device(index):  # Apex launches on the current device: make it this one
        name = torch.cuda.get_device_name(index)
        major, minor = torch.cuda.get_device_capability(index)
        gen = device.generator(case_seed(seed, case.name))
        comparisons = _norms(gen) + _adam(gen)
        torch.cuda.synchronize()
        device.release()
    label = f"cuda:{index} {name} (sm_{major}{minor})"
    details = {"seed": seed, "device": label, "comparisons": [c.to_json() for c in comparisons]}
    bad = [c for c in comparisons if not c.ok]
    if bad:
        return Check(
            case.layer,
            case.name,
            Status.FAIL,
            f"{label}: {bad[0].describe()}" + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""),
            details,
        ), []
    worst = max(comparisons, key=lambda c: c.tol_used)
    return Check(
        case.layer,
        case.name,
        Status.PASS,
        f"{label}: FusedLayerNorm, FusedRMSNorm forward+backward and a FusedAdam step agree with torch "
        f"(worst {worst.what}: {worst.tol_used:.2f} of tolerance)",
        details,
    ), []
