"""torch.distributed's all-reduce across the ranks: exact sums, then the bus bandwidth it reaches.

Correctness is exact, not within a tolerance: every rank adds integer-valued tensors whose partial
sums stay below the dtype's exact-integer limit, so any summation order NCCL picks gives the same
bits, and each rank recomputes the expected sum from the run's seed for every rank's input.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist

from verify.checks import Check, Status
from verify.distributed.cases import DistCase
from verify.distributed.context import RankContext, result
from verify.gpu.cases import case_seed
from verify.timing import cuda_timer

# one element, an odd count below a NCCL chunk, and over a million (many chunks, a ragged last one)
SIZES = (1, 1023, 2**20 + 7)
# Largest integer magnitude each dtype holds exactly (24 and 8 significand bits): inputs are drawn
# within EXACT_LIMIT / world_size, so no partial sum of the ranks' values can leave the exact range.
EXACT_LIMIT = {"fp32": 2**24, "bf16": 2**8}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class BandwidthPlan:
    nbytes: int
    warmup: int
    iters: int
    why: str


# nccl-tests' bus bandwidth reaches its plateau on NVLink nodes from a few hundred MiB; gloo on a
# CPU only needs to show the path works, on small shared test machines.
BANDWIDTH = {
    "cuda": BandwidthPlan(256 * 2**20, warmup=5, iters=20, why="large enough for NVLink's plateau"),
    "cpu": BandwidthPlan(4 * 2**20, warmup=2, iters=10, why="CPU smoke size (gloo test hook)"),
}


def _inputs(seed: int, rank: int, numel: int, dtype: str, world_size: int) -> torch.Tensor:
    bound = max(1, EXACT_LIMIT[dtype] // world_size)
    gen = torch.Generator().manual_seed(case_seed(seed, f"all_reduce/{dtype}/{numel}/{rank}"))
    return torch.randint(-bound, bound + 1, (numel,), generator=gen, dtype=torch.int64)


def _correctness(case: DistCase, ctx: RankContext) -> Check:
    problems: list[str] = []
    tried: list[dict] = []
    for dtype in DTYPES:
        for numel in SIZES:
            mine = _inputs(ctx.seed, ctx.rank, numel, dtype, ctx.world_size)
            tensor = mine.to(DTYPES[dtype]).to(ctx.device)
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            expected = torch.stack(
                [_inputs(ctx.seed, r, numel, dtype, ctx.world_size) for r in range(ctx.world_size)]
            ).sum(0)  # int64: exact in any order
            got = tensor.cpu().to(torch.float64)
            finite = torch.isfinite(got)
            wrong = ~finite | (got != expected.to(torch.float64))
            bad = int(wrong.sum().item())
            tried.append({"dtype": dtype, "numel": numel, "wrong": bad})
            if bad:
                first = int(torch.nonzero(wrong)[0].item())
                problems.append(
                    f"{dtype} x {numel}: {bad} element(s) differ from the exact sum (first at "
                    f"{first}: {got[first].item():g} vs {int(expected[first].item())})"
                )
    sizes = " / ".join(str(n) for n in SIZES)
    details = {"cases": tried, "op": "SUM"}
    if problems:
        return result(
            case, ctx, False, f"all-reduce SUM wrong on this rank: {'; '.join(problems[:3])}", details
        )
    return result(
        case,
        ctx,
        True,
        f"all-reduce SUM exact across {ctx.where}: {', '.join(DTYPES)} at {sizes} elements",
        details,
    )


def _bandwidth(case: DistCase, ctx: RankContext) -> Check:
    plan = BANDWIDTH[ctx.device.type]
    numel = plan.nbytes // 4
    # grows world-fold per call: finite while world ** (warmup + iters) < 3e38 (25 calls: up to 34 ranks)
    tensor = torch.ones(numel, dtype=torch.float32, device=ctx.device)
    timing = cuda_timer.measure(
        "all_reduce", lambda: dist.all_reduce(tensor), device=ctx.device, warmup=plan.warmup, iters=plan.iters
    )
    # the slowest rank's median bounds the collective: every rank reports the same figure
    medians = [torch.zeros(1, dtype=torch.float64, device=ctx.device) for _ in range(ctx.world_size)]
    dist.all_gather(medians, torch.tensor([timing.median_ms], dtype=torch.float64, device=ctx.device))
    per_rank = [float(m.item()) for m in medians]
    slowest_ms = max(per_rank)
    algbw = plan.nbytes / (slowest_ms / 1e3) / 1e9
    busbw = algbw * 2 * (ctx.world_size - 1) / ctx.world_size  # nccl-tests' bus bandwidth of all-reduce
    timer = "CUDA events" if ctx.device.type == "cuda" else "perf_counter (CPU)"
    figures = {
        "bytes": plan.nbytes,
        "dtype": "fp32",
        "world_size": ctx.world_size,
        "backend": ctx.backend,
        "warmup": plan.warmup,
        "iters": plan.iters,
        "timer": timer,
        "size_why": plan.why,
        "median_ms": round(slowest_ms, 5),
        "rank_median_ms": [round(m, 5) for m in per_rank],
        "algbw_gbps": round(algbw, 3),
        "busbw_gbps": round(busbw, 3),
    }
    return result(
        case,
        ctx,
        True,
        f"all-reduce of {plan.nbytes / 2**20:g} MiB fp32 across {ctx.where}: bus bandwidth {busbw:.1f} GB/s"
        f" (algorithm {algbw:.1f} GB/s; median {slowest_ms:.3f} ms of {plan.iters} after {plan.warmup}"
        f" warm-up, {timer}, slowest rank)",
        {"figures": figures, "timing": timing.to_json()},
        status=Status.INFO,
    )


def run(case: DistCase, ctx: RankContext) -> Check:
    return {"all_reduce.correctness": _correctness, "all_reduce.bandwidth": _bandwidth}[case.name](case, ctx)
