"""One DistributedFusedAdam step (Apex contrib, ZeRO-2: sharded state, reduce-scatter, all-gather) vs AdamW.

Every rank starts from the same params, backpropagates its own data (loss = sum(param * x_rank), so the
gradient is x_rank exactly) and takes one step. DistributedFusedAdam averages the gradients across the
ranks and updates its shard; torch.optim.AdamW steps the same params with the average of every rank's
x, recomputed from the seed. Small buckets make the shards split params, as large models do.
"""

from __future__ import annotations

import torch

from verify.checks import Check
from verify.distributed.cases import DistCase
from verify.distributed.context import RankContext, result
from verify.distributed.tolerances import DFA_PARAMS, DFA_UPDATE_AGREEMENT
from verify.gpu.cases import case_seed
from verify.gpu.compare import compare, relative_l2

# (65537,) crosses a 64Ki-element boundary; 256000 elements span several 0.25 MB buckets
SHAPES = ((1,), (7, 13), (1023,), (65537,), (256, 1000))
LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.999), 1e-8, 1e-2
BUCKET_CAP_MB = 0.25


def _tensors(ctx: RankContext, stream: str, scale: float) -> list[torch.Tensor]:
    gen = torch.Generator(device=ctx.device).manual_seed(
        case_seed(ctx.seed, f"distributed_fused_adam/{stream}")
    )
    return [torch.randn(s, generator=gen, device=ctx.device) * scale for s in SHAPES]


def run(case: DistCase, ctx: RankContext) -> Check:
    from apex.contrib.optimizers.distributed_fused_adam import DistributedFusedAdam

    init = _tensors(ctx, "params", 1.0)
    data = [_tensors(ctx, f"x/{r}", 0.01) for r in range(ctx.world_size)]
    params = [torch.nn.Parameter(p.clone()) for p in init]
    optimizer = DistributedFusedAdam(
        params,
        lr=LR,
        betas=BETAS,
        eps=EPS,
        weight_decay=WEIGHT_DECAY,
        adam_w_mode=True,
        bucket_cap_mb=BUCKET_CAP_MB,
        average_grad_sync=True,
        dtype=torch.float32,
    )
    optimizer.zero_grad()  # as a training loop does; the buckets start empty
    loss = torch.stack([(p * x).sum() for p, x in zip(params, data[ctx.rank], strict=True)]).sum()
    loss.backward()  # the post-backward hooks fill the buckets and start the reduce-scatter
    optimizer.step()
    torch.cuda.synchronize(ctx.device)

    ref = [torch.nn.Parameter(p.clone()) for p in init]
    for i, p in enumerate(ref):
        p.grad = torch.stack([d[i] for d in data]).mean(dim=0)
    torch.optim.AdamW(ref, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, foreach=False).step()

    comparisons = [
        compare(f"param {tuple(s)}", p.detach(), r.detach(), DFA_PARAMS)
        for s, p, r in zip(SHAPES, params, ref, strict=True)
    ]
    apex_update = torch.cat([(p.detach() - i).reshape(-1) for p, i in zip(params, init, strict=True)])
    ref_update = torch.cat([(r.detach() - i).reshape(-1) for r, i in zip(ref, init, strict=True)])
    agreement = relative_l2(apex_update, ref_update)
    numel = sum(p.numel() for p in params)
    details = {
        "shapes": [list(s) for s in SHAPES],
        "numel": numel,
        "lr": LR,
        "weight_decay": WEIGHT_DECAY,
        "bucket_cap_mb": BUCKET_CAP_MB,
        "tolerance": DFA_PARAMS.to_json(),
        "update_relative_l2": agreement,
        "update_limit": DFA_UPDATE_AGREEMENT,
        "comparisons": [c.to_json() for c in comparisons],
    }
    bad = [c.describe() for c in comparisons if not c.ok]
    if not agreement <= DFA_UPDATE_AGREEMENT:  # also catches NaN
        bad.append(f"total update differs by {agreement:.3g} relative L2 (limit {DFA_UPDATE_AGREEMENT:g})")
    if bad:
        return result(
            case, ctx, False, f"DistributedFusedAdam step differs from AdamW: {'; '.join(bad[:3])}", details
        )
    worst = max(comparisons, key=lambda c: c.tol_used)
    return result(
        case,
        ctx,
        True,
        f"one DistributedFusedAdam step on {numel} params in {len(SHAPES)} tensors matches"
        f" torch.optim.AdamW on the averaged gradient across {ctx.where}: update agrees to {agreement:.2g}"
        f" relative L2, worst {worst.describe()}",
        details,
    )
