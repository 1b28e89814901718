"""Time each fused kernel against the native PyTorch alternative on the same inputs (group timing).

CUDA events around every repetition after a warm-up (verify.cuda_timer.measure), median and p10/p90,
then verify.cuda_timer.verdict: speedup = best native median / fused median (> 1: Apex faster here).
The check is INFO whichever side wins: a fused kernel slower than today's PyTorch is information for
the user (maybe drop Apex for it), not a broken install; only a kernel that errors is a FAIL.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from verify.checks import Check, Status
from verify.cuda_timer import Timing, measure, verdict
from verify.gpu import device
from verify.gpu.cases import Case, case_seed

ADAM_SHAPES = [(2048, 2048)] * 8 + [(1000,)] * 200 + [(4096,)] * 56  # 33.8M params: 8 large, 256 small
ADAM_HYPER = {"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
NORM_SHAPE = (8192, 4096)  # tokens x hidden of a mid-size transformer layer
EPS = 1e-5
WARMUP, ITERS = 10, 50


def setup() -> str:
    return device.require_cuda()


def _timed(name: str, fn: Callable[[], object]) -> Timing:
    return measure(name, fn, device=device.DEVICE, warmup=WARMUP, iters=ITERS)


def _adam(gen: torch.Generator) -> tuple[str, Timing, list[Timing], dict]:
    from apex.optimizers import FusedAdam

    base = [device.randn(s, gen, scale=0.02) for s in ADAM_SHAPES]
    grads = [device.randn(s, gen, scale=0.01) for s in ADAM_SHAPES]  # read-only: shared by every variant
    variants: list[tuple[str, Callable[[list], torch.optim.Optimizer]]] = [
        ("apex FusedAdam", lambda ps: FusedAdam(ps, adam_w_mode=True, **ADAM_HYPER)),
        ("torch AdamW(foreach=True)", lambda ps: torch.optim.AdamW(ps, foreach=True, **ADAM_HYPER)),
        ("torch AdamW(fused=True)", lambda ps: torch.optim.AdamW(ps, fused=True, **ADAM_HYPER)),
    ]
    timings: list[Timing] = []
    notes: dict[str, str] = {}
    for name, make in variants:
        params = [nn.Parameter(b.clone()) for b in base]
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        try:
            optimizer = make(params)
        except (RuntimeError, TypeError, ValueError) as err:  # e.g. a torch without fused AdamW
            if name.startswith("apex"):
                raise
            notes[name] = f"not available: {type(err).__name__}: {err}"
            continue
        timings.append(_timed(name, optimizer.step))
        del optimizer, params
        device.release()
    numel = sum(b.numel() for b in base)
    case = f"fp32, {numel / 1e6:.1f}M params in {len(ADAM_SHAPES)} tensors, one step()"
    return case, timings[0], timings[1:], {"shapes": "8 x (2048, 2048) + 200 x (1000,) + 56 x (4096,)",
                                           "numel": numel, "hyper": {k: list(v) if isinstance(v, tuple) else v
                                                                     for k, v in ADAM_HYPER.items()}, **notes}


def _norm(kind: str, dtype_name: str, gen: torch.Generator) -> tuple[str, Timing, list[Timing], dict]:
    from apex.normalization import FusedLayerNorm, FusedRMSNorm

    dtype = device.DTYPES[dtype_name]
    hidden = NORM_SHAPE[-1]
    if kind == "fused_layer_norm":
        fused: nn.Module = FusedLayerNorm(hidden, eps=EPS)
        native: nn.Module | None = nn.LayerNorm(hidden, eps=EPS)
        names = ("apex FusedLayerNorm", "torch nn.LayerNorm")
    else:
        fused = FusedRMSNorm(hidden, eps=EPS)
        native = nn.RMSNorm(hidden, eps=EPS) if hasattr(nn, "RMSNorm") else None
        names = ("apex FusedRMSNorm", "torch nn.RMSNorm")
    fused = fused.to(device=device.DEVICE, dtype=dtype)
    with torch.no_grad():
        for p in fused.parameters():
            p.copy_(device.uniform(tuple(p.shape), gen, 0.5, 1.5, dtype=dtype))
    x = device.randn(NORM_SHAPE, gen, dtype=dtype).requires_grad_(True)
    grad_out = device.randn(NORM_SHAPE, gen, dtype=dtype)

    def fwd_bwd(module: nn.Module) -> Callable[[], object]:
        inputs = (x, *module.parameters())
        return lambda: torch.autograd.grad(module(x), inputs, grad_out)

    fused_timing = _timed(names[0], fwd_bwd(fused))
    natives: list[Timing] = []
    notes: dict[str, str] = {}
    if native is None:
        notes[names[1]] = f"not available in torch {torch.__version__}"
    else:
        native = native.to(device=device.DEVICE, dtype=dtype)
        native.load_state_dict(fused.state_dict())
        natives.append(_timed(names[1], fwd_bwd(native)))
    case = f"{dtype_name}, input {NORM_SHAPE[0]}x{NORM_SHAPE[1]}, forward+backward"
    return case, fused_timing, natives, notes


def run_case(case: Case, seed: int) -> tuple[Check, list[dict]]:
    gen = device.generator(case_seed(seed, case.name))
    if case.family == "fused_adam":
        kernel = "FusedAdam"
        label, fused, natives, notes = _adam(gen)
    else:
        kernel = "FusedLayerNorm" if case.family == "fused_layer_norm" else "FusedRMSNorm"
        label, fused, natives, notes = _norm(case.family, case.param("dtype"), gen)
    device.release()
    details: dict = {"seed": seed, "case_seed": case_seed(seed, case.name), "warmup": WARMUP, "iters": ITERS,
                     "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", **({"notes": notes} if notes else {})}
    if not natives:
        details["fused"] = fused.to_json()
        return Check(case.layer, case.name, Status.INFO,
                     f"{kernel} ({label}): {fused.median_ms:.3f} ms median; no native alternative to compare "
                     f"({'; '.join(f'{k}: {v}' for k, v in notes.items())})", details), []
    best = min(natives, key=lambda t: t.median_ms)
    speedup, sentence = verdict(fused, best)
    timing = {
        "kernel": kernel,
        "case": label,
        "fused": fused.to_json(),
        "natives": [t.to_json() for t in natives],
        "best_native": best.name,
        "speedup": round(speedup, 4),
        "verdict": sentence,
    }
    details["timing"] = timing
    summary = (f"{kernel} ({label}): {sentence}; median {fused.median_ms:.3f} ms vs "
               + ", ".join(f"{t.name} {t.median_ms:.3f} ms" for t in natives))
    return Check(case.layer, case.name, Status.INFO, summary, details), [timing]
