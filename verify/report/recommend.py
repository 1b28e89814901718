"""What to use, per feature, on this GPU and stack: the timing layer's verdicts said in one line each.

    recommendations(report["timings"])
    -> [{"feature": "LayerNorm", "dtype": "bf16", "use": "torch.compile(nn.LayerNorm)", "figure": "kernel_time",
         "speedup": 1.52, "line": "LayerNorm (bf16): compiled torch, 1.52x faster kernels than apex
         FusedLayerNorm (1.48-1.55)"}, ...]

Pure functions of the timing rows (verify/timing/kernel_compare.py's JSON): the kernel figure decides (the
GPU time one call costs, which a compiled or CUDA-graphed training step keeps), the loop figure is added
when it says something else. A verdict inside the tie band says "tie"; a withheld one (another process
on the GPU) says so and recommends nothing.
"""

from __future__ import annotations

from typing import Any

from verify.domain.report_json import RecommendationJSON, TimingJSON

# the Apex class -> the feature a user chooses an implementation for
FEATURES = {"FusedLayerNorm": "LayerNorm", "FusedRMSNorm": "RMSNorm", "FusedAdam": "Adam"}
COMPILED_PREFIX = "torch.compile("
KERNEL, LOOP = "kernel_time", "host_inclusive"


def plain_name(implementation: str) -> str:
    """How a line names an implementation: compiled torch is 'compiled torch', the rest as measured."""
    if implementation.startswith(COMPILED_PREFIX):
        return "compiled torch"
    return implementation


def _named(implementation: str) -> str:
    """'compiled torch (torch.compile(nn.LayerNorm))', or the implementation once when it has no plain name."""
    plain = plain_name(implementation)
    return plain + (f" ({implementation})" if plain != implementation else "")


def _dtype(case: str) -> str | None:
    head = case.split(",", 1)[0].strip()
    return head if head in ("fp32", "bf16", "fp16") else None


def _span(lo: float, hi: float) -> str:
    return f"{lo:.2f}-{hi:.2f}"


def _loop_note(loop: dict[str, Any] | None, kernel_use: str) -> str:
    """The loop figure, when it names another implementation than the kernels do."""
    if not loop:
        return ""
    winner = loop.get("winner")
    use = {"fused": loop.get("fused"), "native": loop.get("native"), "tie": "tie"}.get(winner or "")
    if use is None or use == kernel_use:
        return ""
    if winner == "tie":
        return f"; per call in a loop they tie ({loop['speedup']:.2f}x)"
    ratio = loop["speedup"] if winner == "fused" else 1 / loop["speedup"]
    return f"; per call in a loop (host time included) {plain_name(use)} is {ratio:.2f}x faster"


def recommend(row: TimingJSON) -> RecommendationJSON:
    kernel = str(row.get("kernel") or "")
    feature = FEATURES.get(kernel, kernel)
    case = str(row.get("case") or "")
    dtype = _dtype(case)
    head = f"{feature} ({dtype})" if dtype else feature
    base: RecommendationJSON = {
        "feature": feature,
        "dtype": dtype,
        "case": case,
        "use": None,
        "figure": None,
        "speedup": None,
        "line": "",
    }
    fused = row.get("fused") or {}
    if row.get("withheld"):
        return {
            **base,
            "line": f"{head}: no recommendation, the GPU was shared during timing ({row['withheld']})",
        }
    if fused.get("status") != "OK":
        return {
            **base,
            "line": f"{head}: no comparison, apex {kernel} {fused.get('status')} ({fused.get('reason')})",
        }
    loop: dict[str, Any] | None = row.get("host_inclusive")
    kernel_verdict: dict[str, Any] | None = row.get("kernel_time")
    figure = KERNEL if kernel_verdict else LOOP
    v: dict[str, Any] = kernel_verdict or loop or {}
    if not v:
        return {
            **base,
            "line": f"{head}: no comparison ({row.get('verdict') or 'no native implementation ran'})",
        }
    what = "kernels" if figure == KERNEL else "per call in a loop"
    lo, hi = v["interval"]
    if v["winner"] == "tie":
        line = (
            f"{head}: tie, {v['fused']} and {_named(v['native'])} within the "
            f"{what} tie band ({v['speedup']:.2f}x, {_span(lo, hi)})"
        )
        return {**base, "use": "tie", "figure": figure, "line": line + _loop_note(loop, "tie")}
    if v["winner"] == "fused":
        use, other, ratio, span = v["fused"], v["native"], v["speedup"], _span(lo, hi)
        name = f"keep {use}"
    else:
        use, other, ratio, span = v["native"], v["fused"], 1 / v["speedup"], _span(1 / hi, 1 / lo)
        name = _named(use)
    line = f"{head}: {name}, {ratio:.2f}x faster {what} than {other} ({span})"
    if figure == KERNEL:
        line += _loop_note(loop, use)
    return {**base, "use": use, "figure": figure, "speedup": round(ratio, 4), "line": line}


def recommendations(timings: list[TimingJSON]) -> list[RecommendationJSON]:
    return [recommend(row) for row in timings]
