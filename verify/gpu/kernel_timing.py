"""Time each fused kernel against the native PyTorch alternative on the same inputs (group timing).

verify.timing.kernel_compare does the measuring (two figures per implementation: GPU kernel time from
torch.profiler and host-inclusive time per call in a back-to-back loop, in interleaved rounds) and
the deciding (bootstrap interval per figure, tie bands in verify/timing/rules.py); the implementations
are verify/timing/kernel_variants.py's, the same as `verify bench` times. The check is INFO whichever side
wins: a fused kernel slower than today's PyTorch is information for the user (maybe drop Apex for
it), not a broken install; only a kernel that errors is a FAIL.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from verify.checks import Check, Status
from verify.gpu import device
from verify.gpu.cases import Case, case_seed
from verify.timing import compiled as compiled_torch
from verify.timing import host as timing_host
from verify.timing import kernel_compare, kernel_variants

ADAM_SHAPES = [(2048, 2048)] * 8 + [(1000,)] * 200 + [(4096,)] * 56  # 33.8M params: 8 large, 256 small
NORM_SHAPE = (8192, 4096)  # tokens x hidden of a mid-size transformer layer
# held for the worker's life from its first case on (after --hold: the parity groups are done, so the
# idlest core is chosen on a quiet machine); threads made during setup are moved too
_STEADY = timing_host.SteadyHost()
# why the compiled native alternatives are not timed (None: they are), set in configure() and setup()
_COMPILE_SKIP: str | None = None
_COMPILE_ASKED = True


def configure(*, compile_natives: bool = True) -> None:
    """The worker's options (verify.gpu.worker): --no-compile leaves compiled torch out of every case."""
    global _COMPILE_ASKED
    _COMPILE_ASKED = compile_natives


def _host() -> dict:
    return (_STEADY.conditions or _STEADY.start()).to_json()


def setup() -> str:
    """Everything slow and one-off, before the cases (and, held, beside the parity groups: see runner)."""
    global _COMPILE_SKIP
    # Inductor compiles in this process, not in a pool of workers: the host is held to one core anyway,
    # and a compile worker must not show up as another process beside the timing (device_load)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    described = device.require_cuda()
    _COMPILE_SKIP = "--no-compile" if not _COMPILE_ASKED else compiled_torch.inductor_problem()
    # the first profiler session in a process initialises CUPTI: not any case's time
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        torch.ones(8, device=device.DEVICE).add_(1)
        torch.cuda.synchronize()
    try:  # loading Apex and its extension libraries; if that fails, each case reports its own import error
        import apex.normalization  # noqa: F401
        import apex.optimizers  # noqa: F401
    except Exception:  # noqa: BLE001
        pass
    return described


def _adam(gen: torch.Generator) -> tuple[str, list[kernel_compare.Variant], dict]:
    from apex.optimizers import FusedAdam

    params = [nn.Parameter(device.randn(s, gen, scale=0.02)) for s in ADAM_SHAPES]
    for p in params:
        p.grad = device.randn(tuple(p.shape), gen, scale=0.01)  # read-only: shared by every variant
    numel = sum(p.numel() for p in params)
    case = f"fp32, {numel / 1e6:.1f}M params in {len(ADAM_SHAPES)} tensors, one step()"
    details = {
        "shapes": "8 x (2048, 2048) + 200 x (1000,) + 56 x (4096,)",
        "numel": numel,
        "hyper": {k: list(v) if isinstance(v, tuple) else v for k, v in kernel_variants.ADAM_HYPER.items()},
    }
    return case, kernel_variants.adam_variants(params, FusedAdam), details


def _norm(kind: str, dtype_name: str, gen: torch.Generator) -> tuple[str, list[kernel_compare.Variant], dict]:
    from apex.normalization import FusedLayerNorm, FusedRMSNorm

    dtype = device.DTYPES[dtype_name]
    hidden = NORM_SHAPE[-1]
    weight = device.uniform((hidden,), gen, 0.5, 1.5, dtype=dtype)
    bias = device.uniform((hidden,), gen, -0.5, 0.5, dtype=dtype)
    x = device.randn(NORM_SHAPE, gen, dtype=dtype).requires_grad_(True)
    grad_out = device.randn(NORM_SHAPE, gen, dtype=dtype)
    fused_cls = FusedLayerNorm if kind == "fused_layer_norm" else FusedRMSNorm
    case = f"{dtype_name}, input {NORM_SHAPE[0]}x{NORM_SHAPE[1]}, forward+backward"
    return (
        case,
        kernel_variants.norm_variants(
            kind, x, grad_out, weight, bias, fused_cls, compile_native=True, compile_skip=_COMPILE_SKIP or ""
        ),
        {"shape": list(NORM_SHAPE)},
    )


def run_case(case: Case, seed: int) -> tuple[Check, list[dict]]:
    gen = device.generator(case_seed(seed, case.name))
    if case.family == "fused_adam":
        kernel = "FusedAdam"
        label, variants, extra = _adam(gen)
    else:
        kernel = kernel_variants.norm_feature(case.family)
        label, variants, extra = _norm(case.family, case.param("dtype"), gen)
    result = kernel_compare.compare(kernel, label, variants, device.DEVICE, host=_host())
    del variants
    device.release()
    timing = result.to_json()
    details: dict = {
        "seed": seed,
        "case_seed": case_seed(seed, case.name),
        "device": result.device,
        "timing": timing,
        **extra,
    }
    fused = result.fused
    if fused.status == "FAIL":  # the fused kernel itself errors: that is a broken install
        return Check(
            case.layer,
            case.name,
            Status.FAIL,
            f"{kernel} ({label}) on {result.device}: {fused.reason}",
            details,
        ), [timing]
    return Check(case.layer, case.name, Status.INFO, f"{kernel} ({label}): {result.sentence}", details), [
        timing
    ]
