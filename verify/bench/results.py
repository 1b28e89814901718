"""bench.json (the data, versioned) and bench.md (the same data for people), both written atomically."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, TypedDict, cast

from verify import __version__
from verify.runtime import atomic

SCHEMA_VERSION = "2"  # bumped only on an incompatible change to bench.json (2: two figures per kernel timing)
JSON_NAME = "bench.json"
MD_NAME = "bench.md"

BYTE_MODELS = {
    "adam_step": "7 x 4 B per fp32 parameter: read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, "
    "exp_avg_sq",
    "norm_fwd_bwd": "5 x rows x hidden x element size (forward reads x and writes y; backward reads dy and x, "
    "writes dx) + 2 x 4 B per row per statistic (mean and rstd for LayerNorm, rstd for RMSNorm: "
    "written forward, read backward) + parameters (LayerNorm 5, RMSNorm 3 x hidden x element "
    "size: weight/bias read forward, weight read and grads written backward)",
    "copy": "2 x bytes: a device-to-device copy reads and writes every byte",
}

# which figure each part of bench.json reports (verify.timing.rules)
FIGURES = {
    "stages": "host_inclusive: CUDA events around each training step, back to back after the warm-up steps; "
    "stage comparisons: bootstrap over the steps of each stage (independent samples, tie band "
    "of the host-inclusive figure)",
    "micro": "both: kernel_time (torch.profiler, sum of the GPU kernels one call launches) and host_inclusive "
    "(CUDA events around N back-to-back calls, / N), interleaved rounds, one verdict per figure; every "
    "thread on one CPU core, one torch thread, no garbage collection in a timed block (each item's "
    "`host`, verify.timing.host), as in verify's timing layer",
    "copy_bandwidth": "host_inclusive: CUDA events around each copy (a single kernel: the same as its kernel time)",
}


# ---- the parts of bench.json that the markdown and the plots read by key (the rest ride along untyped) ----

Figure = Literal["kernel_time", "host_inclusive"]


class FigureJSON(TypedDict):
    """One timing figure (verify.timing): the statistics read here; its other keys ride along."""

    median_ms: float
    p10_ms: float
    p90_ms: float


class StageJSON(TypedDict):
    """One training stage (verify.bench.stages)."""

    number: int
    title: str
    optimizer: str
    norm: str
    precision: str
    compiled: bool
    apex_features: list[str]
    status: str
    reason: str
    timing: FigureJSON | None
    peak_mem_gib: float | None
    speedup_vs_baseline: float | None
    loss_final: float | None
    losses: list[float]
    loss_consistent: bool | None


class StageComparisonJSON(TypedDict):
    what: str
    status: str
    reason: str
    verdict: str | None
    winner: str | None


class BoundJSON(TypedDict, total=False):
    kind: str
    host_overhead_ms: float


class ImplementationJSON(TypedDict, total=False):
    """One implementation of a kernel comparison (verify.timing.kernel_compare) with its bandwidth."""

    name: str
    status: str
    reason: str
    kernel_time: FigureJSON | None
    host_inclusive: FigureJSON | None
    bound: BoundJSON | None
    GBps: dict[str, float | None]
    pct_of_copy: dict[str, float | None]


class VerdictJSON(TypedDict):
    speedup: float
    winner: str


class MicroItemJSON(TypedDict, total=False):
    """One fused-vs-native comparison (verify.bench.micro)."""

    kernel: str
    case: str
    status: str
    verdict: str
    fused: ImplementationJSON | None
    natives: list[ImplementationJSON]
    kernel_time: VerdictJSON | None
    host_inclusive: VerdictJSON | None
    winner: dict[str, str | None]


class MicroJSON(TypedDict):
    optimizer: list[MicroItemJSON]
    norm: list[MicroItemJSON]


class CopyJSON(TypedDict):
    status: str
    reason: str
    bytes: int
    GBps: float | None


class HeadlineJSON(TypedDict):
    """verify.bench.facts' headline."""

    device: str
    gpu: str | None
    torch: str
    cuda: str | None
    apex_commit: str | None
    python: str


class BenchEnvironmentJSON(TypedDict):
    headline: HeadlineJSON


class ConfigJSON(TypedDict):
    """verify.bench.config.BenchConfig.to_json: the sizes the markdown states; the rest ride along."""

    layers: int
    d_model: int
    heads: int
    vocab: int
    batch: int
    seq: int
    warmup: int
    steps: int
    lr: float


class SummaryJSON(TypedDict):
    OK: int
    SKIP: int
    FAIL: int


class _BenchJSON(TypedDict):
    schema_version: str
    kind: str
    tool_version: str
    created_at: str
    duration_s: float
    timer: str
    figures: dict[str, str]
    environment: BenchEnvironmentJSON
    config: ConfigJSON
    apex: dict[str, object]
    byte_models: dict[str, str]
    copy_bandwidth: CopyJSON | None
    stage_baseline: str | None
    loss_rel_tol: float
    stages: list[StageJSON]
    stage_comparisons: list[StageComparisonJSON]
    micro: MicroJSON
    plots: list[str]
    summary: SummaryJSON
    exit_code: int


class BenchJSON(_BenchJSON, total=False):
    """bench.json as build() makes it; the command adds plots_note where it could not plot."""

    plots_note: str


def build(
    *,
    cfg_json: Mapping[str, object],
    environment: Mapping[str, object],
    apex: dict[str, object],
    timer: str,
    copy: Mapping[str, object] | None,
    stages: Mapping[str, object],
    optimizer: Sequence[Mapping[str, object]],
    norms: Sequence[Mapping[str, object]],
    started: datetime.datetime,
    duration_s: float,
) -> BenchJSON:
    """The document; its parts come from their producers as plain JSON objects (stages.run_stages,
    micro, facts.collect, BenchConfig.to_json) and are typed here as the readers below index them."""
    stage_list = cast("list[StageJSON]", stages["stages"])
    items = cast("list[MicroItemJSON]", [*optimizer, *norms])
    statuses = [s["status"] for s in stage_list] + [m["status"] for m in items]
    if copy is not None:
        statuses.append(cast("CopyJSON", copy)["status"])
    summary: SummaryJSON = {
        "OK": statuses.count("OK"),
        "SKIP": statuses.count("SKIP"),
        "FAIL": statuses.count("FAIL"),
    }
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "apex-bench",
        "tool_version": __version__,
        "created_at": started.isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 2),
        "timer": timer,
        "figures": FIGURES,
        "environment": cast("BenchEnvironmentJSON", environment),
        "config": cast("ConfigJSON", cfg_json),
        "apex": apex,
        "byte_models": BYTE_MODELS,
        "copy_bandwidth": cast("CopyJSON | None", copy),
        "stage_baseline": cast("str | None", stages["baseline"]),
        "loss_rel_tol": cast(float, stages["loss_rel_tol"]),
        "stages": stage_list,
        "stage_comparisons": cast("list[StageComparisonJSON]", stages["comparisons"]),
        "micro": {
            "optimizer": cast("list[MicroItemJSON]", optimizer),
            "norm": cast("list[MicroItemJSON]", norms),
        },
        "plots": [],
        "summary": summary,
        "exit_code": 1 if summary["FAIL"] else 0,
    }


def implementations(item: MicroItemJSON) -> list[ImplementationJSON]:
    """Every implementation of a kernel comparison item, the fused one first."""
    fused = item.get("fused")
    return ([fused] if fused else []) + list(item.get("natives") or [])


def _ms(t: FigureJSON | None) -> tuple[str, str]:
    if not t:
        return "", ""
    return f"{t['median_ms']:.3f}", f"{t['p10_ms']:.3f}–{t['p90_ms']:.3f}"


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:g} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:g} MiB"


def _reason(item: StageJSON | StageComparisonJSON | ImplementationJSON | CopyJSON) -> str:
    return f"{item['status']}: {item['reason']}".replace("|", "/")


def _stage_rows(doc: BenchJSON) -> list[str]:
    cfg = doc["config"]
    steps = cfg["warmup"] + cfg["steps"]
    rows = [
        f"| # | stage | optimizer | norm | precision | ms/iter (median, host-inclusive) | p10–p90 | peak mem (GiB) | "
        f"speedup vs {doc['stage_baseline'] or '-'} | loss after {steps} steps |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for s in doc["stages"]:
        precision = s["precision"] + (", torch.compile" if s.get("compiled") else "")
        head = f"| {s['number']} | {s['title']} | {s['optimizer']} | {s['norm']} | {precision} |"
        if s["status"] != "OK":
            rows.append(f"{head} {_reason(s)} | | | | |")
            continue
        med, spread = _ms(s["timing"])
        mem = f"{s['peak_mem_gib']:.2f}" if s["peak_mem_gib"] is not None else "n/a"
        speed = f"{s['speedup_vs_baseline']:.2f}x" if s["speedup_vs_baseline"] is not None else ""
        loss = f"{s['loss_final']:.4f}" + ("" if s["loss_consistent"] in (True, None) else " ⚠")
        rows.append(f"{head} {med} | {spread} | {mem} | {speed} | {loss} |")
    return rows


def _fig(impl: ImplementationJSON, figure: Figure) -> str:
    t = impl.get(figure)
    return f"{t['median_ms']:.3f} ({t['p10_ms']:.3f}–{t['p90_ms']:.3f})" if t else "n/a"


def _opt(value: object, spec: str) -> str:
    return f"{value:{spec}}" if isinstance(value, (int, float)) else ""


def _winners(item: MicroItemJSON) -> str:
    w = item.get("winner") or {}
    return f"winner: kernel {w.get('kernel_time') or 'n/a'}, loop {w.get('host_inclusive') or 'n/a'}"


def _micro_rows(items: list[MicroItemJSON]) -> list[str]:
    rows = [
        "| kernel | case | implementation | kernel ms (p10–p90) | loop ms (p10–p90) | bound | kernel GB/s | "
        "% of copy (kernel) |",
        "|---|---|---|---:|---:|---|---:|---:|",
    ]
    for item in items:
        for impl in implementations(item):
            if impl["status"] != "OK":
                rows.append(
                    f"| {item['kernel']} | {item['case']} | {impl['name']} | {_reason(impl)} | | | | |"
                )
                continue
            bound = impl.get("bound") or {}
            bound_text = (
                f"host (+{bound['host_overhead_ms']:.3f} ms)"
                if bound.get("kind") == "host"
                else bound.get("kind") or ""
            )
            rows.append(
                f"| {item['kernel']} | {item['case']} | {impl['name']} | {_fig(impl, 'kernel_time')} | "
                f"{_fig(impl, 'host_inclusive')} | {bound_text} | {_opt(impl['GBps']['kernel_time'], '.1f')} | "
                f"{_opt(impl['pct_of_copy']['kernel_time'], '.1f')} |"
            )
    verdicts = [
        f"- {item['kernel']} {item['case']}: {item['verdict']} ({_winners(item)})"
        for item in items
        if item.get("host_inclusive") is not None or item["status"] == "FAIL"
    ]
    return rows + ([""] + verdicts if verdicts else [])


def _comparison_line(c: StageComparisonJSON) -> str:
    return f"{c['verdict']} (winner: {c['winner']})" if c["status"] == "OK" else _reason(c)


def markdown(doc: BenchJSON) -> str:
    env = doc["environment"]["headline"]
    cfg = doc["config"]
    gpu = env["gpu"] or f"no GPU ({env['device']})"
    lines = [
        f"# Apex benchmark: {gpu}",
        "",
        f"{doc['created_at']} · GPU {gpu} · torch {env['torch']} · CUDA {env['cuda']} · "
        f"Apex commit {env['apex_commit'] or 'unknown'} · Python {env['python']} · timer: {doc['timer']} · "
        f"took {doc['duration_s']:.1f} s",
        "",
    ]
    if env["device"] == "cpu":
        lines += [
            "> CPU smoke run: tiny sizes, perf_counter timings. It shows the command works; its numbers "
            "say nothing about a GPU.",
            "",
        ]
    lines += [
        "## Training stages",
        "",
        f"GPT-style model: {cfg['layers']} layers, d_model {cfg['d_model']}, {cfg['heads']} heads, vocab "
        f"{cfg['vocab']}; batch {cfg['batch']} x seq {cfg['seq']}; the same initial weights and token batches "
        f"for every stage; {cfg['warmup']} warm-up + {cfg['steps']} timed steps (lr {cfg['lr']}). "
        f"⚠ marks a loss more than {100 * doc['loss_rel_tol']:.0f}% away from the baseline's. "
        f"Figure: {doc['figures']['stages']}.",
        "",
        *_stage_rows(doc),
        "",
    ]
    lines += [f"- {c['what']}: {_comparison_line(c)}" for c in doc["stage_comparisons"]]
    copy = doc["copy_bandwidth"]
    if copy is not None:
        ceiling = (
            (f"{copy['GBps']:.1f} GB/s ({_size(copy['bytes'])} device-to-device copy, bytes read + written)")
            if copy["status"] == "OK"
            else _reason(copy)
        )
        lines += [
            "",
            "## Kernels",
            "",
            f"Copy bandwidth ceiling: {ceiling}.",
            "",
            f"Figures: {doc['figures']['micro']}. Bandwidth is from the kernel time.",
            "",
        ]
        lines += ["### Optimizer step", "", *_micro_rows(doc["micro"]["optimizer"]), ""]
        lines += ["### Norm forward + backward", "", *_micro_rows(doc["micro"]["norm"]), ""]
        lines += ["### Byte models (minimum bytes moved)", ""]
        lines += [f"- {name}: {text}" for name, text in doc["byte_models"].items()]
    if doc["plots"]:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in doc["plots"]]
    s = doc["summary"]
    lines += ["", f"Summary: {s['OK']} ran, {s['SKIP']} skipped, {s['FAIL']} failed.", ""]
    return "\n".join(lines)


def write(doc: BenchJSON, out: Path) -> tuple[Path, Path]:
    """bench.json and bench.md into --out, a folder bench owns: a link planted there is refused, not followed."""
    with atomic.TreeBatch(out) as batch:
        batch.add(JSON_NAME, (atomic.json_dumps(doc, indent=2) + "\n").encode("utf-8"))
        batch.add(MD_NAME, markdown(doc).encode("utf-8", "backslashreplace"))
    return out / JSON_NAME, out / MD_NAME
