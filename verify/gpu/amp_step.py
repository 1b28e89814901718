"""A few real training steps with the fused parts, under autocast, against the same loop in torch (group amp_step).

Model: Linear -> FusedLayerNorm -> GELU -> Linear -> FusedRMSNorm -> Linear, trained with FusedAdam
(AdamW mode) under torch.autocast: bf16, and fp16 with torch.amp.GradScaler. The reference is the same
loop with nn.LayerNorm, nn.RMSNorm and torch.optim.AdamW from identical initial weights on identical
data. Compared: the loss at every step and the total parameter update after the last one, with loose
amp tolerances (verify.gpu.tolerances.AMP_*). A non-finite loss anywhere fails.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from verify.checks import Check, Status
from verify.gpu import device, tolerances
from verify.gpu.cases import Case, case_seed
from verify.gpu.compare import relative_l2
from verify.gpu.parity_norm import rms_norm_reference

IN_FEATURES, HIDDEN, CLASSES, BATCH = 256, 1020, 16, 64  # hidden not a multiple of 8
STEPS = 6
HYPER: dict[str, Any] = {"lr": 2e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
EPS = 1e-5
INIT_SCALE = 2.0**12  # GradScaler's first scale: both loops start (and skip steps) alike


def setup() -> str:
    return device.require_cuda()


class RMSNormReference(nn.Module):
    """nn.RMSNorm where torch has it (>= 2.4), else the same thing in a few lines."""

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.hidden, self.eps = hidden, eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm_reference(x, self.hidden, self.weight, self.eps)


class Net(nn.Module):
    def __init__(self, layer_norm: nn.Module, rms_norm: nn.Module) -> None:
        super().__init__()
        self.inp = nn.Linear(IN_FEATURES, HIDDEN)
        self.ln = layer_norm
        self.mid = nn.Linear(HIDDEN, HIDDEN)
        self.rms = rms_norm
        self.out = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.ln(self.inp(x)))
        return self.out(self.rms(self.mid(h)))


def torch_norms() -> tuple[nn.Module, nn.Module]:
    rms = nn.RMSNorm(HIDDEN, eps=EPS) if hasattr(nn, "RMSNorm") else RMSNormReference(HIDDEN, EPS)
    return nn.LayerNorm(HIDDEN, eps=EPS), rms


def apex_norms() -> tuple[nn.Module, nn.Module]:
    from apex.normalization import FusedLayerNorm, FusedRMSNorm

    return FusedLayerNorm(HIDDEN, eps=EPS), FusedRMSNorm(HIDDEN, eps=EPS)


def make_models(
    gen: torch.Generator, fused_norms: tuple[nn.Module, nn.Module]
) -> tuple[nn.Module, nn.Module]:
    """(fused model, torch model) with identical fresh weights; norm weights random, not ones/zeros."""
    fused = Net(*fused_norms).to(device.DEVICE)
    with torch.no_grad():
        for name, p in fused.named_parameters():
            if name.startswith(("ln.", "rms.")) and name.endswith("weight"):
                p.copy_(device.uniform(tuple(p.shape), gen, 0.5, 1.5))
            elif name.endswith("bias") and name.startswith("ln."):
                p.copy_(device.uniform(tuple(p.shape), gen, -0.05, 0.05))
            else:  # Linear: torch's default init scale, drawn from our generator
                bound = 1.0 / (p.shape[-1] ** 0.5) if p.dim() > 1 else 0.05
                p.copy_(device.uniform(tuple(p.shape), gen, -bound, bound))
    reference = Net(*torch_norms()).to(device.DEVICE)
    reference.load_state_dict(fused.state_dict())
    return fused, reference


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    target: torch.Tensor,
    dtype: torch.dtype,
    scaler: torch.amp.GradScaler | None,
) -> tuple[list[float], list[float]]:
    """STEPS steps on one batch; returns the loss before each step and the scale used (fp16)."""
    device_type = torch.device(device.DEVICE).type
    losses: list[float] = []
    scales: list[float] = []
    for _ in range(STEPS):
        # apex FusedAdam.zero_grad() takes no arguments (set_grad_none=True by default: grads -> None)
        optimizer.zero_grad()
        with torch.autocast(device_type=device_type, dtype=dtype):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), target)
        losses.append(float(loss.item()))
        if scaler is not None:
            scales.append(float(scaler.get_scale()))
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
    return losses, scales


def run_case(case: Case, seed: int) -> tuple[Check, list[dict]]:
    from apex.optimizers import FusedAdam

    dtype_name = case.param("dtype")
    return run_loop(case, seed, dtype_name, apex_norms(), FusedAdam)


def run_loop(
    case: Case, seed: int, dtype_name: str, fused_norms: tuple[nn.Module, nn.Module], fused_adam_cls: type
) -> tuple[Check, list[dict]]:
    dtype = device.DTYPES[dtype_name]
    gen = device.generator(case_seed(seed, case.name))
    fused, reference = make_models(gen, fused_norms)
    initial = [p.detach().clone() for p in reference.parameters()]
    x = device.randn((BATCH, IN_FEATURES), gen)
    target = torch.randint(0, CLASSES, (BATCH,), generator=gen, device=device.DEVICE)

    fused_opt = fused_adam_cls(fused.parameters(), adam_w_mode=True, **HYPER)
    reference_opt = torch.optim.AdamW(reference.parameters(), **HYPER)
    use_scaler = dtype_name == "fp16"
    device_type = torch.device(device.DEVICE).type

    def scaler() -> torch.amp.GradScaler | None:
        return torch.amp.GradScaler(device_type, init_scale=INIT_SCALE) if use_scaler else None

    fused_losses, fused_scales = train(fused, fused_opt, x, target, dtype, scaler())
    ref_losses, ref_scales = train(reference, reference_opt, x, target, dtype, scaler())

    fused_update = torch.cat(
        [(p.detach() - p0).reshape(-1) for p, p0 in zip(fused.parameters(), initial, strict=True)]
    )
    ref_update = torch.cat(
        [(p.detach() - p0).reshape(-1) for p, p0 in zip(reference.parameters(), initial, strict=True)]
    )
    agreement = relative_l2(fused_update, ref_update)
    params_finite = bool(torch.isfinite(fused_update).all().item())
    loss_diffs = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(fused_losses, ref_losses, strict=True)]
    loss_limit = tolerances.AMP_LOSS_RTOL[dtype_name]
    update_limit = tolerances.AMP_UPDATE_AGREEMENT[dtype_name]
    mode = "bf16 autocast" if dtype_name == "bf16" else "fp16 autocast + GradScaler"
    label = f"{STEPS} steps, {mode}, Fused{{LayerNorm,RMSNorm,Adam}} vs torch"
    details = {
        "seed": seed,
        "case_seed": case_seed(seed, case.name),
        "model": f"Linear({IN_FEATURES},{HIDDEN}) LayerNorm GELU Linear({HIDDEN},{HIDDEN}) RMSNorm "
        f"Linear({HIDDEN},{CLASSES}); batch {BATCH}",
        "autocast_dtype": dtype_name,
        "grad_scaler": use_scaler,
        "hyper": {k: list(v) if isinstance(v, tuple) else v for k, v in HYPER.items()},
        "fused_losses": fused_losses,
        "torch_losses": ref_losses,
        "loss_rel_diff_max": max(loss_diffs),
        "loss_rel_diff_limit": loss_limit,
        "update_agreement": agreement,
        "update_agreement_limit": update_limit,
    }
    if use_scaler:
        details.update(fused_scales=fused_scales, torch_scales=ref_scales)

    problem = _problem(
        fused_losses,
        ref_losses,
        params_finite,
        use_scaler,
        fused_scales,
        ref_scales,
        loss_diffs,
        loss_limit,
        agreement,
        update_limit,
    )
    if problem:
        return Check(case.layer, case.name, Status.FAIL, f"{label}: {problem}", details), []
    return Check(
        case.layer,
        case.name,
        Status.PASS,
        f"{label}: loss {fused_losses[0]:.4g} -> {fused_losses[-1]:.4g} (torch {ref_losses[-1]:.4g}), "
        f"max loss diff {max(loss_diffs):.2%}, update {agreement:.2g} off",
        details,
    ), []


def _problem(
    fused_losses: list[float],
    ref_losses: list[float],
    params_finite: bool,
    use_scaler: bool,
    fused_scales: list[float],
    ref_scales: list[float],
    loss_diffs: list[float],
    loss_limit: float,
    agreement: float,
    update_limit: float,
) -> str | None:
    """The first way the fused loop strayed from torch's, in the order they are checked; None when it did not."""
    problem = None
    if not all(map(_finite, fused_losses)):
        problem = f"non-finite loss with the fused modules: {fused_losses}"
    elif not all(map(_finite, ref_losses)):
        problem = f"non-finite loss in the torch reference loop: {ref_losses}"
    elif not params_finite:
        problem = "non-finite parameters after the fused steps"
    elif use_scaler and fused_scales != ref_scales:
        problem = f"GradScaler skipped different steps: scales {fused_scales} vs torch {ref_scales}"
    elif max(loss_diffs) > loss_limit:
        worst = max(range(STEPS), key=lambda i: loss_diffs[i])
        problem = (
            f"loss at step {worst + 1} is {fused_losses[worst]:.5g} vs torch {ref_losses[worst]:.5g} "
            f"({loss_diffs[worst]:.2%} off; limit {loss_limit:.0%})"
        )
    elif not agreement <= update_limit:
        problem = (
            f"parameter update differs from torch's by {agreement:.3g} (relative L2; limit {update_limit:g})"
        )
    elif ref_losses[-1] < ref_losses[0] and not fused_losses[-1] < fused_losses[0]:
        problem = f"the fused loop did not learn: loss {fused_losses[0]:.5g} -> {fused_losses[-1]:.5g}"
    return problem


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))
