"""bench.json (the data, versioned) and bench.md (the same data for people), both written atomically."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

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


def build(
    *,
    cfg_json: dict[str, Any],
    environment: dict[str, Any],
    apex: dict[str, Any],
    timer: str,
    copy: dict[str, Any] | None,
    stages: dict[str, Any],
    optimizer: list[dict[str, Any]],
    norms: list[dict[str, Any]],
    started: datetime.datetime,
    duration_s: float,
) -> dict[str, Any]:
    statuses = [s["status"] for s in stages["stages"]] + [m["status"] for m in optimizer + norms]
    if copy is not None:
        statuses.append(copy["status"])
    summary = {k: statuses.count(k) for k in ("OK", "SKIP", "FAIL")}
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "apex-bench",
        "tool_version": __version__,
        "created_at": started.isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 2),
        "timer": timer,
        "figures": FIGURES,
        "environment": environment,
        "config": cfg_json,
        "apex": apex,
        "byte_models": BYTE_MODELS,
        "copy_bandwidth": copy,
        "stage_baseline": stages["baseline"],
        "loss_rel_tol": stages["loss_rel_tol"],
        "stages": stages["stages"],
        "stage_comparisons": stages["comparisons"],
        "micro": {"optimizer": optimizer, "norm": norms},
        "plots": [],
        "summary": summary,
        "exit_code": 1 if summary["FAIL"] else 0,
    }


def implementations(item: dict[str, Any]) -> list[dict[str, Any]]:
    """Every implementation of a kernel comparison item, the fused one first."""
    fused = item.get("fused")
    return ([fused] if fused else []) + list(item.get("natives") or [])


def _ms(t: dict[str, Any] | None) -> tuple[str, str]:
    if not t:
        return "", ""
    return f"{t['median_ms']:.3f}", f"{t['p10_ms']:.3f}–{t['p90_ms']:.3f}"


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:g} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:g} MiB"


def _reason(item: dict[str, Any]) -> str:
    return f"{item['status']}: {item['reason']}".replace("|", "/")


def _stage_rows(doc: dict[str, Any]) -> list[str]:
    cfg = doc["config"]
    steps = cfg["warmup"] + cfg["steps"]
    rows = [
        f"| # | stage | optimizer | norm | precision | ms/iter (median, host-inclusive) | p10–p90 | peak mem (GiB) | "
        f"speedup vs {doc['stage_baseline'] or '-'} | loss after {steps} steps |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for s in doc["stages"]:
        head = f"| {s['number']} | {s['title']} | {s['optimizer']} | {s['norm']} | {s['precision']} |"
        if s["status"] != "OK":
            rows.append(f"{head} {_reason(s)} | | | | |")
            continue
        med, spread = _ms(s["timing"])
        mem = f"{s['peak_mem_gib']:.2f}" if s["peak_mem_gib"] is not None else "n/a"
        speed = f"{s['speedup_vs_baseline']:.2f}x" if s["speedup_vs_baseline"] is not None else ""
        loss = f"{s['loss_final']:.4f}" + ("" if s["loss_consistent"] in (True, None) else " ⚠")
        rows.append(f"{head} {med} | {spread} | {mem} | {speed} | {loss} |")
    return rows


def _fig(impl: dict[str, Any], figure: str) -> str:
    t = impl.get(figure)
    return f"{t['median_ms']:.3f} ({t['p10_ms']:.3f}–{t['p90_ms']:.3f})" if t else "n/a"


def _opt(value: Any, spec: str) -> str:
    return f"{value:{spec}}" if isinstance(value, (int, float)) else ""


def _winners(item: dict[str, Any]) -> str:
    w = item.get("winner") or {}
    return f"winner: kernel {w.get('kernel_time') or 'n/a'}, loop {w.get('host_inclusive') or 'n/a'}"


def _micro_rows(items: list[dict[str, Any]]) -> list[str]:
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


def markdown(doc: dict[str, Any]) -> str:
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
    lines += [
        f"- {c['what']}: {c['verdict'] + ' (winner: ' + c['winner'] + ')' if c['status'] == 'OK' else _reason(c)}"
        for c in doc["stage_comparisons"]
    ]
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


def write(doc: dict[str, Any], out: Path) -> tuple[Path, Path]:
    return atomic.write_json(out / JSON_NAME, doc), atomic.write_text(out / MD_NAME, markdown(doc))
