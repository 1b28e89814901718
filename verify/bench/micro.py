"""Kernel microbenchmarks: optimizer step and norm forward+backward, fused (Apex) vs native PyTorch.

These kernels are memory-bound, so each is also reported as effective bandwidth: the minimum bytes
the operation must move (the byte models below) divided by its median time, and as a percentage of
the device's copy bandwidth measured in the same run (a large device-to-device copy, read + write),
which is the practical ceiling for any of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from verify.bench.apex_parts import ApexPart
from verify.bench.config import BenchConfig
from verify.bench.stages import one_line_error
from verify.cuda_timer import Timing, measure, verdict

ADAM_LR = 1e-4  # small, so thousands of steps on random gradients keep parameters finite
ADAM_WEIGHT_DECAY = 0.01
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
    return measure("device copy", lambda: dst.copy_(src), device=device,
                   warmup=cfg.micro_warmup, iters=cfg.micro_iters)


def copy_bandwidth(cfg: BenchConfig, device: torch.device) -> dict[str, object]:
    moved = copy_bytes_moved(cfg.copy_bytes)
    try:
        timing = _time_copy(cfg, device)
    except Exception as exc:
        return {"status": "FAIL", "reason": one_line_error(exc), "bytes": cfg.copy_bytes, "bytes_moved": moved,
                "timing": None, "GBps": None}
    finally:
        _release(device)
    return {"status": "OK", "reason": "", "bytes": cfg.copy_bytes, "bytes_moved": moved,
            "timing": timing.to_json(), "GBps": round(_gbps(moved, timing), 2)}


# ---- one fused-vs-native comparison ----

Impl = tuple[str, Callable[[], Callable[[], object]] | None, str]  # (name, setup -> step fn, skip reason)


def _compare(kernel: str, case: str, n_bytes: int, impls: list[Impl], cfg: BenchConfig,
             device: torch.device, copy_gbps: float | None) -> dict[str, object]:
    """Time each implementation (the first is the fused one) and say which wins.

    The result has the shape of verify's report `timings` entries, plus bandwidth per implementation.
    """
    results = []
    timings: dict[str, Timing] = {}
    for name, setup, skip_reason in impls:
        entry: dict[str, object] = {"name": name, "status": "SKIP", "reason": skip_reason, "timing": None,
                                    "GBps": None, "pct_of_copy": None}
        if setup is not None:
            step = None
            try:
                step = setup()
                timing = measure(name, step, device=device, warmup=cfg.micro_warmup, iters=cfg.micro_iters)
                timings[name] = timing
                gbps = _gbps(n_bytes, timing)
                entry.update(status="OK", reason="", timing=timing.to_json(), GBps=round(gbps, 2),
                             pct_of_copy=round(100 * gbps / copy_gbps, 1) if copy_gbps else None)
            except Exception as exc:
                entry.update(status="FAIL", reason=one_line_error(exc))
            finally:
                del step  # frees the optimizer state / module before the next implementation
                _release(device)
        results.append(entry)
    fused_name = impls[0][0]
    natives = [timings[n] for n, _, _ in impls[1:] if n in timings]
    item: dict[str, object] = {
        "kernel": kernel, "case": case, "bytes": n_bytes, "implementations": results,
        "fused": timings[fused_name].to_json() if fused_name in timings else None,
        "natives": [t.to_json() for t in natives],
        "best_native": None, "speedup": None, "verdict": None,
    }
    if natives:
        best = min(natives, key=lambda t: t.median_ms)
        item["best_native"] = best.name
        if fused_name in timings:
            ratio, sentence = verdict(timings[fused_name], best)
            item["speedup"], item["verdict"] = round(ratio, 4), sentence
    if item["verdict"] is None:
        fused_entry = results[0]
        item["verdict"] = f"no comparison: {fused_name} {fused_entry['status']} ({fused_entry['reason']})"
    item["status"] = "FAIL" if any(r["status"] == "FAIL" for r in results) else (
        "OK" if item["speedup"] is not None else "SKIP")
    return item


# ---- optimizer step ----

def _optimizer_cases(cfg: BenchConfig) -> list[tuple[str, list[tuple[int, ...]]]]:
    small = [(cfg.linear_dim, cfg.linear_dim), (cfg.linear_dim,)] * cfg.linear_count
    dim = BIG_TENSOR_DIM if cfg.big_params >= BIG_TENSOR_DIM**2 else max(1, math.isqrt(cfg.big_params))
    count = math.ceil(cfg.big_params / dim**2)
    big = [(dim, dim)] * count
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


def _optimizer_case(case: str, shapes: list[tuple[int, ...]], cfg: BenchConfig, device: torch.device,
                    fused: ApexPart, copy_gbps: float | None) -> dict[str, object]:
    params = _params(shapes, device, cfg.seed)
    n_params = sum(p.numel() for p in params)
    kw = {"lr": ADAM_LR, "weight_decay": ADAM_WEIGHT_DECAY}

    def setup(make: Callable[..., torch.optim.Optimizer], **extra: object) -> Callable[[], Callable[[], object]]:
        # each implementation gets its own optimizer (and state) over the same parameters and gradients
        return lambda: make(params, **kw, **extra).step

    impls: list[Impl] = [
        ("apex FusedAdam", setup(fused.cls, adam_w_mode=True) if fused.usable else None, fused.reason),
        ("torch AdamW foreach", setup(torch.optim.AdamW, foreach=True), ""),
        ("torch AdamW fused", setup(torch.optim.AdamW, fused=True), ""),
    ]
    item = _compare("FusedAdam", f"{case}, {n_params / 1e6:.2f}M params", adam_step_bytes(n_params),
                    impls, cfg, device, copy_gbps)
    item["params"] = n_params
    return item


def optimizer_micro(cfg: BenchConfig, device: torch.device, apex: dict[str, ApexPart],
                    copy_gbps: float | None, log: Callable[[str], None]) -> list[dict[str, object]]:
    out = []
    for case, shapes in _optimizer_cases(cfg):
        try:
            item = _optimizer_case(case, shapes, cfg, device, apex["FusedAdam"], copy_gbps)
        except Exception as exc:  # e.g. out of memory for the parameters themselves
            item = {"kernel": "FusedAdam", "case": case, "status": "FAIL", "verdict": one_line_error(exc),
                    "implementations": [], "fused": None, "natives": [], "best_native": None, "speedup": None}
        finally:
            _release(device)
        out.append(item)
        log(_progress_line(item))
    return out


# ---- norm forward + backward ----

# (Apex feature, Apex name, native name, native class, has bias, fp32 statistics per row)
NORM_KINDS = (
    ("FusedLayerNorm", "apex FusedLayerNorm", "nn.LayerNorm", nn.LayerNorm, True, 2),
    ("FusedRMSNorm", "apex FusedRMSNorm", "nn.RMSNorm", nn.RMSNorm, False, 1),
)
NORM_EPS = 1e-5


def _norm_case(kind: tuple, shape: tuple[int, ...], dtype_name: str, cfg: BenchConfig, device: torch.device,
               part: ApexPart, copy_gbps: float | None) -> dict[str, object]:
    feature, fused_name, native_name, native_cls, has_bias, stats = kind
    dtype = DTYPES[dtype_name]
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    x = torch.randn(shape, device=device, dtype=dtype, generator=gen).requires_grad_(True)
    dy = torch.randn(shape, device=device, dtype=dtype, generator=gen)
    hidden = shape[-1]

    def setup(cls: type) -> Callable[[], Callable[[], object]]:
        def make() -> Callable[[], object]:
            # weights in the input's dtype for both sides: the same work, the same bytes
            module = cls(hidden, eps=NORM_EPS).to(device=device, dtype=dtype)
            inputs = [x, *module.parameters()]
            # autograd.grad returns fresh gradients: no accumulation traffic into .grad
            return lambda: torch.autograd.grad(module(x), inputs, dy)
        return make

    impls: list[Impl] = [
        (fused_name, setup(part.cls) if part.usable else None, part.reason),
        (native_name, setup(native_cls), ""),
    ]
    n_bytes = norm_fwd_bwd_bytes(math.prod(shape[:-1]), hidden, dtype.itemsize, has_bias=has_bias,
                                 stats_per_row=stats)
    item = _compare(feature, f"{tuple(shape)} {dtype_name}", n_bytes, impls, cfg, device, copy_gbps)
    item.update(shape=list(shape), dtype=dtype_name)
    return item


def norm_micro(cfg: BenchConfig, device: torch.device, apex: dict[str, ApexPart],
               copy_gbps: float | None, log: Callable[[str], None]) -> list[dict[str, object]]:
    out = []
    for shape in cfg.norm_shapes:
        for dtype_name in DTYPES:
            for kind in NORM_KINDS:
                try:
                    item = _norm_case(kind, shape, dtype_name, cfg, device, apex[kind[0]], copy_gbps)
                except Exception as exc:
                    item = {"kernel": kind[0], "case": f"{tuple(shape)} {dtype_name}", "status": "FAIL",
                            "verdict": one_line_error(exc), "implementations": [], "fused": None, "natives": [],
                            "best_native": None, "speedup": None}
                finally:
                    _release(device)
                out.append(item)
                log(_progress_line(item))
    return out


def _progress_line(item: dict[str, object]) -> str:
    parts = []
    for impl in item.get("implementations", []):  # type: ignore[union-attr]
        if impl["status"] == "OK":
            parts.append(f"{impl['name']} {impl['timing']['median_ms']:.3f} ms ({impl['GBps']:.0f} GB/s)")
        else:
            parts.append(f"{impl['name']} {impl['status']}")
    return f"[micro] {item['kernel']} {item['case']}: " + "; ".join(parts) + f" -> {item['verdict']}"
