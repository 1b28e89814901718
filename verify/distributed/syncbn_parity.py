"""Apex's synchronized BatchNorm forward against torch.nn.SyncBatchNorm, on the same data in every rank.

Whichever the build carries: `apex.parallel.SyncBatchNorm` (tags up to 25.x, when it is the optimized
class over the `syncbn` module) or, where apex.parallel was removed (upstream 2025-26), the `syncbn`
module itself, driven the way apex.parallel's SyncBatchnormFunction drove it: per-rank Welford
statistics, an all-gather of (mean, biased var, count), welford_parallel, batchnorm_forward.
Each rank holds a different batch size, so the count-weighted merge is exercised.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from verify.checks import Check, Status
from verify.distributed.cases import DistCase
from verify.distributed.context import RankContext, result
from verify.distributed.tolerances import SYNCBN
from verify.gpu.cases import case_seed
from verify.gpu.compare import compare
from verify.gpu.device import DTYPES

CHANNELS, HW = 37, 9
EPS, MOMENTUM = 1e-5, 0.1


def _batch(rank: int) -> int:
    return 2 + rank % 3  # unequal per rank: 2, 3, 4, 2, ...


def _apex_impl():  # noqa: ANN202 - (name, class or module)
    try:
        from apex.parallel import SyncBatchNorm
    except Exception:  # noqa: BLE001 - removed upstream; the module below is what remains
        SyncBatchNorm = None
    if SyncBatchNorm is not None and SyncBatchNorm.__module__.endswith("optimized_sync_batchnorm"):
        return "apex.parallel.SyncBatchNorm", SyncBatchNorm
    import syncbn

    return "syncbn", syncbn


def _module_forward(syncbn, x, weight, bias, running_mean, running_var):  # noqa: ANN001, ANN202
    """apex.parallel.optimized_sync_batchnorm_kernel.SyncBatchnormFunction.forward (25.04), channels first."""
    x = x.contiguous()
    count = x.numel() // x.size(1)
    mean, var_biased = syncbn.welford_mean_var(x)
    count_t = torch.full((1,), count, dtype=mean.dtype, device=mean.device)
    combined = torch.cat([mean.view(-1), var_biased.view(-1), count_t], dim=0)
    gathered = [torch.empty_like(combined) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, combined)
    mean_all, var_all, count_all = torch.split(torch.stack(gathered, dim=0), x.size(1), dim=1)
    mean, var, inv_std = syncbn.welford_parallel(
        mean_all, var_all, count_all.reshape(-1).to(torch.int32), EPS
    )
    running_mean = running_mean * (1 - MOMENTUM) + MOMENTUM * mean.to(running_mean.dtype)
    running_var = running_var * (1 - MOMENTUM) + MOMENTUM * var.to(running_var.dtype)
    return syncbn.batchnorm_forward(x, mean, inv_std, weight, bias), running_mean, running_var


def run(case: DistCase, ctx: RankContext) -> Check:
    dtype_name = case.name.rsplit(".", 1)[-1]
    dtype = DTYPES[dtype_name]
    impl, apex_obj = _apex_impl()
    shared = torch.Generator(device=ctx.device).manual_seed(case_seed(ctx.seed, f"{case.name}/params"))
    weight = (torch.rand(CHANNELS, generator=shared, device=ctx.device) + 0.5).to(dtype)
    bias = (torch.randn(CHANNELS, generator=shared, device=ctx.device) * 0.1).to(dtype)
    own = torch.Generator(device=ctx.device).manual_seed(case_seed(ctx.seed, f"{case.name}/x/{ctx.rank}"))
    x = (torch.randn(_batch(ctx.rank), CHANNELS, HW, HW, generator=own, device=ctx.device) * 2 + 0.5).to(
        dtype
    )

    ref = (
        torch.nn.SyncBatchNorm(CHANNELS, eps=EPS, momentum=MOMENTUM)
        .to(device=ctx.device, dtype=dtype)
        .train()
    )
    try:
        with torch.no_grad():
            ref.weight.copy_(weight)
            ref.bias.copy_(bias)
            expected = ref(x)
    except Exception as err:  # noqa: BLE001 - the reference itself; every rank fails alike, the group stays in step
        return result(
            case,
            ctx,
            False,
            f"torch.nn.SyncBatchNorm ({dtype_name}) itself raised {type(err).__name__}:"
            f" {str(err).strip()[:200]}; Apex was not compared",
            {"impl": impl, "dtype": dtype_name},
            status=Status.WARN,
        )
    with torch.no_grad():
        if impl == "syncbn":
            zeros = torch.zeros(CHANNELS, device=ctx.device, dtype=dtype)
            got, run_mean, run_var = _module_forward(apex_obj, x, weight, bias, zeros, torch.ones_like(zeros))
        else:
            module = apex_obj(CHANNELS, eps=EPS, momentum=MOMENTUM).to(device=ctx.device, dtype=dtype).train()
            module.weight.copy_(weight)
            module.bias.copy_(bias)
            got, run_mean, run_var = module(x), module.running_mean, module.running_var
    torch.cuda.synchronize(ctx.device)
    tol = SYNCBN[dtype_name]
    comparisons = [
        compare("output", got, expected, tol),
        compare("running_mean", run_mean, ref.running_mean, tol),
        compare("running_var", run_var, ref.running_var, tol),
    ]
    batches = [_batch(r) for r in range(ctx.world_size)]
    details = {
        "impl": impl,
        "dtype": dtype_name,
        "shape": list(x.shape),
        "batch_per_rank": batches,
        "tolerance": tol.to_json(),
        "comparisons": [c.to_json() for c in comparisons],
    }
    bad = [c for c in comparisons if not c.ok]
    if bad:
        return result(
            case,
            ctx,
            False,
            f"{impl} ({dtype_name}) differs from torch.nn.SyncBatchNorm: "
            + "; ".join(c.describe() for c in bad),
            details,
        )
    return result(
        case,
        ctx,
        True,
        f"{impl} forward ({dtype_name}) matches torch.nn.SyncBatchNorm across {ctx.where},"
        f" batches {batches} of {CHANNELS}x{HW}x{HW}: {comparisons[0].describe()}; running stats agree",
        details,
    )
