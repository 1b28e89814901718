"""FusedLayerNorm and FusedAdam on tensors past 2^31 elements (group large, opt-in with --large).

Sizes and memory in verify/gpu/large_sizes.py. The fused side runs on the whole tensor; the torch
reference on the same values, but only where it is affordable and where a 32-bit index would go wrong:
every STRIDE-th row (elements) below 2^31 and every row (element) past it. The norms are row-wise and
Adam elementwise, so the reference on a sample is exact for what it covers; the norms' weight and bias
grads (sums over every row) get a reference accumulated in fp32 chunk by chunk. A crash of the worker
(an illegal memory access) is turned into a FAIL naming the limit by verify.gpu.run_gpu_layers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from verify.checks import Check, Status
from verify.gpu import device, parity_adam, tolerances
from verify.gpu.cases import Case, case_seed
from verify.gpu.compare import Comparison, compare
from verify.gpu.large_sizes import GIB, LIMIT, SIZES, UPSTREAM, LargeSize

STRIDE_ROWS = 1024  # a sample of the rows below the limit (all rows past it are compared)
STRIDE_ELEMENTS = 4099  # prime: the sample meets every offset inside multi_tensor_apply's chunks
CHUNK_ELEMENTS = 2**26  # random fill and the fp32 reference, a chunk at a time (256 MiB in fp32)
ADAM_STEPS = 2
EPS = 1e-5


def setup() -> str:
    return device.require_cuda()


def free_memory() -> tuple[int, int]:
    """(free, total) bytes of the current device; a module attribute so the unit tier injects a figure."""
    return torch.cuda.mem_get_info()


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _fill(t: torch.Tensor, gen: torch.Generator, scale: float, shift: float = 0.0) -> torch.Tensor:
    """Fresh normal values, drawn in fp32 a chunk at a time (a full fp32 draw would double the memory)."""
    flat = t.view(-1)
    for start in range(0, flat.numel(), CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, flat.numel())
        draw = torch.randn(stop - start, generator=gen, device=t.device, dtype=torch.float32)
        flat[start:stop].copy_(draw * scale + shift)
    return t


def _free_refusal(size: LargeSize) -> str | None:
    free, total = free_memory()
    if free >= size.bytes_needed:
        return None
    return (
        f"{size.feature} past 2^31 elements needs {size.bytes_needed / GIB:.1f} GiB of GPU memory; "
        f"{free / GIB:.1f} of {total / GIB:.1f} GiB are free now: not run"
    )


def _summary(size: LargeSize, results: list[Comparison], what: str) -> tuple[Status, str]:
    failures = [c for c in results if not c.ok]
    head = f"{size.feature} on {size.numel:,} {size.dtype} elements ({size.numel - LIMIT:,} past 2^31)"
    if failures:
        return Status.FAIL, (
            f"{head}: wrong numbers past the 2^31-element limit ({UPSTREAM}): {failures[0].describe()}"
        )
    worst = max(results, key=lambda c: c.tol_used)
    return Status.PASS, f"{head}: this build handles it; {what} agree with torch ({worst.describe()})"


def layer_norm_case(
    case: Case, seed: int, size: LargeSize, fused_cls: type | None = None
) -> tuple[Check, list[dict]]:
    """fused_cls(hidden, eps=...): the norm run on the whole tensor (default Apex's FusedLayerNorm)."""
    if fused_cls is None:
        from apex.normalization import FusedLayerNorm

        fused_cls = FusedLayerNorm

    gen = device.generator(case_seed(seed, case.name))
    rows, hidden = size.shape
    dtype = device.DTYPES[size.dtype]
    module = fused_cls(hidden, eps=EPS).to(device=device.DEVICE, dtype=dtype)
    with torch.no_grad():
        module.weight.copy_(device.uniform((hidden,), gen, 0.5, 1.5, dtype=dtype))
        module.bias.copy_(device.uniform((hidden,), gen, -0.01, 0.01, dtype=dtype))
    x = _fill(torch.empty(size.shape, dtype=dtype, device=device.DEVICE), gen, 2.0, 0.5).requires_grad_(True)
    grad_out = _fill(torch.empty(size.shape, dtype=dtype, device=device.DEVICE), gen, 1.0)
    y = module(x)
    y.backward(grad_out)
    _sync()

    first_past = LIMIT // hidden  # rows from here on hold elements past 2^31
    idx = torch.cat([torch.arange(0, first_past, STRIDE_ROWS), torch.arange(first_past, rows)]).to(
        device.DEVICE
    )
    w, b = (p.detach().float() for p in (module.weight, module.bias))
    xs = x.detach()[idx].float().requires_grad_(True)
    ys = F.layer_norm(xs, (hidden,), w, b, EPS)
    ys.backward(grad_out[idx].float())
    tol = tolerances.NORM[size.dtype]
    results = [
        compare(f"output, {idx.numel()} sampled rows", y.detach()[idx], ys, tol["forward"]),
        compare(
            f"input grad, {idx.numel()} sampled rows",
            x.grad[idx] if x.grad is not None else None,
            xs.grad,
            tol["input_grad"],
        ),
    ]
    del ys, xs, y
    # weight and bias grads sum over every row: an fp32 reference accumulated chunk by chunk
    wr, br = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
    step = max(1, CHUNK_ELEMENTS // hidden)
    for start in range(0, rows, step):
        xr = x.detach()[start : start + step].float()
        F.layer_norm(xr, (hidden,), wr, br, EPS).backward(grad_out[start : start + step].float())
    results += [
        compare("weight grad (all rows)", module.weight.grad, wr.grad, tol["param_grad"]),
        compare("bias grad (all rows)", module.bias.grad, br.grad, tol["param_grad"]),
    ]
    status, summary = _summary(
        size, results, "output, input grad (sampled rows and every row past the limit) and weight/bias grads"
    )
    details = {
        "seed": seed,
        "case_seed": case_seed(seed, case.name),
        "size": size.to_json(),
        "sample": f"every {STRIDE_ROWS}th row below row {first_past}, every row from {first_past} to {rows}",
        "compared": [c.to_json() for c in results],
        "upstream": UPSTREAM,
    }
    return Check(case.layer, case.name, status, summary, details), []


def adam_case(
    case: Case, seed: int, size: LargeSize, fused_adam: Callable[..., torch.optim.Optimizer] | None = None
) -> tuple[Check, list[dict]]:
    """fused_adam(params, adam_w_mode=..., **hyper): the optimizer stepped on the whole tensor (default
    Apex's FusedAdam)."""
    if fused_adam is None:
        from apex.optimizers import FusedAdam

        fused_adam = FusedAdam

    gen = device.generator(case_seed(seed, case.name))
    numel = size.numel
    param = torch.nn.Parameter(_fill(torch.empty(numel, device=device.DEVICE), gen, parity_adam.PARAM_SCALE))
    param.grad = _fill(torch.empty(numel, device=device.DEVICE), gen, parity_adam.GRAD_SCALE)
    idx = torch.cat([torch.arange(0, LIMIT, STRIDE_ELEMENTS), torch.arange(LIMIT, numel)]).to(device.DEVICE)
    ref = torch.nn.Parameter(param.detach()[idx].clone())
    ref_grad = param.grad[idx].clone()
    fused = fused_adam([param], adam_w_mode=True, **parity_adam.HYPER)
    reference = torch.optim.AdamW([ref], foreach=False, **parity_adam.HYPER)
    for _ in range(ADAM_STEPS):
        fused.step()
        ref.grad = ref_grad.clone()
        reference.step()
    _sync()
    what = f"{idx.numel():,} sampled elements after {ADAM_STEPS} steps"
    results: list[Comparison] = [
        compare(f"param, {what}", param.detach()[idx], ref.detach(), tolerances.ADAM_PARAMS["fp32"])
    ]
    for key in ("exp_avg", "exp_avg_sq"):
        results.append(
            compare(
                f"{key}, {what}",
                fused.state[param][key][idx],
                reference.state[ref][key],
                tolerances.ADAM_STATE[key],
            )
        )
    status, summary = _summary(size, results, "param and state (sampled, and every element past the limit)")
    details: dict[str, Any] = {
        "seed": seed,
        "case_seed": case_seed(seed, case.name),
        "size": size.to_json(),
        "sample": f"every {STRIDE_ELEMENTS}th element below 2^31, every element from 2^31 to {numel}",
        "reference": "torch.optim.AdamW(foreach=False) on the sampled elements, same grads",
        "compared": [c.to_json() for c in results],
        "upstream": UPSTREAM,
    }
    return Check(case.layer, case.name, status, summary, details), []


def run_case(case: Case, seed: int) -> tuple[Check, list[dict]]:
    size = SIZES[case.name]
    refused = _free_refusal(size)
    if refused:
        return Check(case.layer, case.name, Status.SKIP, refused, {"size": size.to_json()}), []
    try:
        if case.family == "fused_adam":
            return adam_case(case, seed, size)
        return layer_norm_case(case, seed, size)
    finally:
        device.release()
