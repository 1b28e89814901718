"""Kernel microbenchmarks: optimizer step and norm forward+backward, fused (Apex) vs native PyTorch.

Each case is one verify.timing.kernel_compare comparison, the same method and the same implementations
(verify/timing/kernel_variants.py) as verify's timing layer: two figures per implementation, `kernel` (GPU
kernel time from torch.profiler) and `host_inclusive` (time per call in a back-to-back loop), measured
in interleaved rounds, with a verdict per figure. These kernels are memory-bound, so each figure is
also reported as effective bandwidth: the minimum bytes the operation must move (the byte models
below) divided by the median time, and as a percentage of the device's copy bandwidth measured in the
same run (a large device-to-device copy, read + write), the practical ceiling for any of them.
The caller (verify.bench.cli) holds verify.timing.host.SteadyHost around them, as verify's timing worker
does, and passes its conditions as `host`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from verify.bench.apex_parts import ApexPart
from verify.bench.config import BenchConfig
from verify.bench.results import MicroItemJSON, implementations
from verify.timing import kernel_compare, kernel_variants
from verify.timing.cuda_timer import Timing, measure
from verify.timing.kernel_compare import Variant, one_line_error
from verify.timing.rules import CPU_ROUNDS, FIGURES, HOST_INCLUSIVE, KERNEL, ROUNDS, RoundPlan

BIG_TENSOR_DIM = 4096  # the >=250M-parameter case is made of (4096, 4096) Linear weights
STATS_BYTES = 4  # Apex and torch keep per-row norm statistics in fp32

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


# ---- byte models: the least traffic any implementation needs (documented in the README) ----


def adam_step_bytes(n_params: int, elem_bytes: int = 4) -> int:
    """Adam(W) step: read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq."""
    return 7 * n_params * elem_bytes


def norm_fwd_bwd_bytes(rows: int, hidden: int, elem_bytes: int, *, has_bias: bool, stats_per_row: int) -> int:
    """Norm forward + backward over `rows` rows of `hidden` features.

    Activations: forward reads x, writes y; backward reads dy and x again, writes dx (5 passes).
    Statistics: forward writes them, backward reads them (mean + rstd for LayerNorm, rstd for RMSNorm).
    Parameters: forward reads weight (+ bias), backward reads weight and writes weight (+ bias) grads.
    """
    activations = 5 * rows * hidden * elem_bytes
    stats = 2 * stats_per_row * rows * STATS_BYTES
    params = (5 if has_bias else 3) * hidden * elem_bytes
    return activations + stats + params


def copy_bytes_moved(n_bytes: int) -> int:
    """A device-to-device copy reads every byte once and writes it once."""
    return 2 * n_bytes


def _gbps(n_bytes: int, timing: Timing) -> float:
    return n_bytes / (timing.median_ms / 1e3) / 1e9


def _release(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---- copy ceiling ----


def _time_copy(cfg: BenchConfig, device: torch.device) -> Timing:
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    src = torch.randint(0, 256, (cfg.copy_bytes,), dtype=torch.uint8, device=device, generator=gen)
    dst = torch.empty_like(src)
    return measure(
        "device copy", lambda: dst.copy_(src), device=device, warmup=cfg.micro_warmup, iters=cfg.micro_iters
    )


def copy_bandwidth(cfg: BenchConfig, device: torch.device) -> dict[str, Any]:
    moved = copy_bytes_moved(cfg.copy_bytes)
    try:
        timing = _time_copy(cfg, device)
    except Exception as exc:
        return {
            "status": "FAIL",
            "reason": one_line_error(exc),
            "bytes": cfg.copy_bytes,
            "bytes_moved": moved,
            "timing": None,
            "GBps": None,
        }
    finally:
        _release(device)
    return {
        "status": "OK",
        "reason": "",
        "bytes": cfg.copy_bytes,
        "bytes_moved": moved,
        "timing": timing.to_json(),
        "GBps": round(_gbps(moved, timing), 2),
    }


# ---- one fused-vs-native comparison: verify.timing.kernel_compare, the same as verify's timing layer ----


def _bandwidth(
    n_bytes: int, figure: dict[str, object] | None, copy_gbps: float | None
) -> tuple[float | None, float | None]:
    if not figure or not figure.get("median_ms"):
        return None, None
    gbps = n_bytes / (float(figure["median_ms"]) / 1e3) / 1e9  # type: ignore[arg-type]  # checked truthy: a number
    return float(f"{gbps:.4g}"), (float(f"{100 * gbps / copy_gbps:.4g}") if copy_gbps else None)


def _compare(
    kernel: str,
    case: str,
    n_bytes: int,
    variants: list[Variant],
    cfg: BenchConfig,
    device: torch.device,
    copy_gbps: float | None,
    host: dict | None = None,
) -> dict[str, object]:
    """Both figures for every implementation (the first is the fused one) and the verdicts.

    The result is verify.timing.kernel_compare's comparison (the shape of verify's report `timings` entries)
    plus the byte count and, per implementation and figure, effective bandwidth and % of the copy ceiling.
    """
    try:
        item: dict[str, object] = kernel_compare.compare(
            kernel, case, variants, device, rounds_plan(cfg, device), host
        ).to_json()
    finally:
        _release(device)
    item["bytes"] = n_bytes
    impls = _implementations(item)
    for impl in impls:
        bandwidth = {figure: _bandwidth(n_bytes, impl[figure], copy_gbps) for figure in FIGURES}
        impl["GBps"] = {figure: bw[0] for figure, bw in bandwidth.items()}
        impl["pct_of_copy"] = {figure: bw[1] for figure, bw in bandwidth.items()}
    statuses = [i["status"] for i in impls]
    item["status"] = "FAIL" if "FAIL" in statuses else ("OK" if item[HOST_INCLUSIVE] is not None else "SKIP")
    return item


def _implementations(item: dict[str, object]) -> list[dict[str, Any]]:
    """results.implementations over an item as built here: plain dicts, annotated in place."""
    return cast("list[Any]", implementations(cast(MicroItemJSON, item)))


def rounds_plan(cfg: BenchConfig, device: torch.device) -> RoundPlan:
    base = ROUNDS if device.type == "cuda" else CPU_ROUNDS
    return dataclasses.replace(base, rounds=cfg.micro_rounds)


def _failed_item(kernel: str, case: str, exc: BaseException) -> dict[str, object]:
    return {
        "kernel": kernel,
        "case": case,
        "status": "FAIL",
        "verdict": one_line_error(exc),
        "fused": None,
        "natives": [],
        KERNEL: None,
        HOST_INCLUSIVE: None,
        "winner": {KERNEL: None, HOST_INCLUSIVE: None},
    }


# ---- optimizer step ----


def _optimizer_cases(cfg: BenchConfig) -> list[tuple[str, list[tuple[int, ...]]]]:
    small = [(cfg.linear_dim, cfg.linear_dim), (cfg.linear_dim,)] * cfg.linear_count
    dim = BIG_TENSOR_DIM if cfg.big_params >= BIG_TENSOR_DIM**2 else max(1, math.isqrt(cfg.big_params))
    count = math.ceil(cfg.big_params / dim**2)
    big: list[tuple[int, ...]] = [(dim, dim)] * count
    return [
        (f"{cfg.linear_count} x Linear({cfg.linear_dim}, {cfg.linear_dim}) fp32", small),
        (f"{count} x ({dim}, {dim}) fp32", big),
    ]


def _params(shapes: list[tuple[int, ...]], device: torch.device, seed: int) -> list[nn.Parameter]:
    gen = torch.Generator(device=device).manual_seed(seed)
    params = []
    for shape in shapes:
        p = nn.Parameter(torch.randn(shape, device=device, generator=gen) * 0.02)
        p.grad = torch.randn(shape, device=device, generator=gen) * 1e-3
        params.append(p)
    return params


def _optimizer_case(
    case: str,
    shapes: list[tuple[int, ...]],
    cfg: BenchConfig,
    device: torch.device,
    fused: ApexPart,
    copy_gbps: float | None,
    host: dict | None,
) -> dict[str, object]:
    params = _params(shapes, device, cfg.seed)
    n_params = sum(p.numel() for p in params)
    variants = kernel_variants.adam_variants(params, fused.cls if fused.usable else None, fused.reason)
    item = _compare(
        "FusedAdam",
        f"{case}, {n_params / 1e6:.2f}M params",
        adam_step_bytes(n_params),
        variants,
        cfg,
        device,
        copy_gbps,
        host,
    )
    item["params"] = n_params
    return item


def optimizer_micro(
    cfg: BenchConfig,
    device: torch.device,
    apex: dict[str, ApexPart],
    copy_gbps: float | None,
    log: Callable[[str], None],
    host: dict | None = None,
) -> list[dict[str, object]]:
    out = []
    for case, shapes in _optimizer_cases(cfg):
        try:
            item = _optimizer_case(case, shapes, cfg, device, apex["FusedAdam"], copy_gbps, host)
        except Exception as exc:  # e.g. out of memory for the parameters themselves
            item = _failed_item("FusedAdam", case, exc)
        finally:
            _release(device)
        out.append(item)
        log(_progress_line(item))
    return out


# ---- norm forward + backward ----

# (verify.timing.kernel_variants kind, fp32 statistics per row)
NORM_KINDS = (("fused_layer_norm", 2), ("fused_rms_norm", 1))


def _norm_case(
    kind: str,
    stats_per_row: int,
    shape: tuple[int, ...],
    dtype_name: str,
    cfg: BenchConfig,
    device: torch.device,
    part: ApexPart,
    copy_gbps: float | None,
    host: dict | None,
) -> dict[str, object]:
    feature = kernel_variants.norm_feature(kind)
    dtype = DTYPES[dtype_name]
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    hidden = shape[-1]
    x = torch.randn(shape, device=device, dtype=dtype, generator=gen).requires_grad_(True)
    dy = torch.randn(shape, device=device, dtype=dtype, generator=gen)
    # weights in the input's dtype for both sides: the same work, the same bytes; never ones and zeros
    weight = (torch.rand(hidden, device=device, generator=gen) + 0.5).to(dtype)
    bias = (torch.rand(hidden, device=device, generator=gen) - 0.5).to(dtype)
    has_bias = kind == "fused_layer_norm"
    variants = kernel_variants.norm_variants(
        kind, x, dy, weight, bias, part.cls if part.usable else None, part.reason
    )
    n_bytes = norm_fwd_bwd_bytes(
        math.prod(shape[:-1]), hidden, dtype.itemsize, has_bias=has_bias, stats_per_row=stats_per_row
    )
    item = _compare(feature, f"{tuple(shape)} {dtype_name}", n_bytes, variants, cfg, device, copy_gbps, host)
    item.update(shape=list(shape), dtype=dtype_name)
    return item


def norm_micro(
    cfg: BenchConfig,
    device: torch.device,
    apex: dict[str, ApexPart],
    copy_gbps: float | None,
    log: Callable[[str], None],
    host: dict | None = None,
) -> list[dict[str, object]]:
    out = []
    for shape in cfg.norm_shapes:
        for dtype_name in DTYPES:
            for kind, stats_per_row in NORM_KINDS:
                feature = kernel_variants.norm_feature(kind)
                try:
                    item = _norm_case(
                        kind, stats_per_row, shape, dtype_name, cfg, device, apex[feature], copy_gbps, host
                    )
                except Exception as exc:
                    item = _failed_item(feature, f"{tuple(shape)} {dtype_name}", exc)
                finally:
                    _release(device)
                out.append(item)
                log(_progress_line(item))
    return out


def _progress_line(item: dict[str, object]) -> str:
    parts = []
    for impl in _implementations(item):
        if impl["status"] == "OK" and impl[HOST_INCLUSIVE]:
            kernel = f"kernel {impl[KERNEL]['median_ms']:.3f} ms, " if impl[KERNEL] else ""
            parts.append(f"{impl['name']} {kernel}loop {impl[HOST_INCLUSIVE]['median_ms']:.3f} ms")
        else:
            parts.append(f"{impl['name']} {impl['status']}")
    return f"[micro] {item['kernel']} {item['case']}: " + "; ".join(parts) + f" -> {item['verdict']}"
