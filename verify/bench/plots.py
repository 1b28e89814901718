"""PNG plots of a bench.json document. matplotlib is optional (the `plot` extra): without it, no plots.

Plots: stages.png (ms/iteration per stage with p10-p90 whiskers and the speedup on each bar),
kernels.png (fused-vs-best-native ratio per kernel case for both figures, kernel time and loop time,
and each implementation's share of the copy bandwidth ceiling by kernel time), losses.png (the loss curve of every stage: the stages train the same model).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from verify.bench.results import BenchJSON, Figure, StageJSON, implementations
from verify.runtime import atomic

APEX_COLOR = "#76b900"  # NVIDIA green
NATIVE_COLOR = "#ee4c2c"  # PyTorch orange
NATIVE_COLORS = (NATIVE_COLOR, "#1f77b4")
BASE_COLOR = "#888888"


def matplotlib_missing() -> str | None:
    """None when matplotlib imports, else the one-line reason plots are skipped."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"matplotlib is not installed ({exc}): plots skipped; `pip install matplotlib` to get them"
    return None


def _subtitle(doc: BenchJSON) -> str:
    h = doc["environment"]["headline"]
    apex = (h["apex_commit"] or "unknown")[:10]
    return (
        f"{h['gpu'] or h['device']} · torch {h['torch']} · CUDA {h['cuda']} · Apex {apex} · "
        f"{doc['created_at'][:10]}"
    )


def _save(fig: Any, out: Path, name: str) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    atomic.write_in_tree(out, name, buf.getvalue())  # --out is a folder bench owns: no link followed


def _stage_color(stage: StageJSON) -> str:
    if stage["apex_features"]:
        return APEX_COLOR
    return BASE_COLOR if stage["number"] == 1 else NATIVE_COLOR


def _stages_plot(doc: BenchJSON, plt: Any) -> Any:
    stages = doc["stages"]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    labels = [f"{s['number']}. {s['title']}" for s in stages]
    heights, lows, highs = [], [], []
    for s in stages:
        t = s["timing"] if s["status"] == "OK" else None
        heights.append(t["median_ms"] if t else 0.0)
        lows.append(t["median_ms"] - t["p10_ms"] if t else 0.0)
        highs.append(t["p90_ms"] - t["median_ms"] if t else 0.0)
    xs = range(len(stages))
    bars = ax.bar(xs, heights, color=[_stage_color(s) for s in stages], yerr=[lows, highs], capsize=4)
    for bar, s in zip(bars, stages, strict=True):
        if s.get("compiled"):
            bar.set_hatch("//")
    top = max(heights or [1.0]) or 1.0
    for x, s, h in zip(xs, stages, heights, strict=True):
        if s["status"] != "OK":
            ax.text(x, top * 0.02, s["status"], ha="center", va="bottom", rotation=90, color="black")
        elif s["speedup_vs_baseline"] is not None:
            ax.text(x, h + top * 0.02, f"{s['speedup_vs_baseline']:.2f}x", ha="center", va="bottom")
    ax.set_xticks(list(xs), labels, rotation=20, ha="right")
    ax.set_ylabel("ms / iteration (median, p10-p90)")
    ax.set_ylim(0, top * 1.15)
    ax.set_title(
        f"Training step per stage (green: uses Apex; hatched: torch.compile)\n{_subtitle(doc)}", fontsize=10
    )
    return fig


def _kernels_plot(doc: BenchJSON, plt: Any) -> Any:
    items = doc["micro"]["optimizer"] + doc["micro"]["norm"]
    labels = [f"{i['kernel']} {i['case']}" for i in items]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 0.45 * len(items) + 2.2), sharey=True)
    ys = list(range(len(items)))
    bars: tuple[tuple[float, Figure, str], ...] = ((-0.2, "kernel_time", ""), (0.2, "host_inclusive", "//"))
    for offset, figure, hatch in bars:
        verdicts = [i.get(figure) for i in items]
        ratios = [v["speedup"] if v else 0.0 for v in verdicts]
        left.barh(
            [y + offset for y in ys],
            ratios,
            height=0.4,
            hatch=hatch,
            color=[APEX_COLOR if r >= 1 else NATIVE_COLOR for r in ratios],
        )
        for y, v in zip(ys, verdicts, strict=True):
            text = (
                f" {'kernel' if figure == 'kernel_time' else 'loop'} {v['speedup']:.2f}x {v['winner']}"
                if v
                else f" {figure}: n/a"
            )
            left.text(v["speedup"] if v else 0.02, y + offset, text, va="center", fontsize=7)
    left.axvline(1.0, color="black", linewidth=0.8)
    left.set_yticks(ys, labels, fontsize=8)
    left.invert_yaxis()
    left.set_xlabel("best native time / Apex time (>1: Apex faster); plain: kernel time, hatched: loop time")
    # one bar per implementation of each case, labelled, so a skipped Apex kernel shows as a gap
    slots = max((len(implementations(i)) for i in items), default=1)
    height = 0.8 / slots
    for y, item in zip(ys, items, strict=True):
        native_index = 0
        for k, impl in enumerate(implementations(item)):
            if impl["name"].startswith("apex"):
                color = APEX_COLOR
            else:
                color = NATIVE_COLORS[native_index % len(NATIVE_COLORS)]
                native_index += 1
            pct = (impl["pct_of_copy"]["kernel_time"] or 0.0) if impl["status"] == "OK" else 0.0
            yk = y - 0.4 + height * (k + 0.5)
            right.barh(yk, pct, height=height, color=color)
            label = f"{pct:.0f}%" if impl["status"] == "OK" else impl["status"]
            right.text(pct, yk, f" {impl['name']} {label}", va="center", fontsize=6)
    right.axvline(100.0, color="black", linewidth=0.8)
    copy = doc["copy_bandwidth"]
    right.set_xlabel(
        f"% of copy bandwidth by kernel time ({(copy.get('GBps') if copy else None) or 0:.0f} GB/s)"
    )
    pcts = [
        (i["pct_of_copy"] or {}).get("kernel_time") or 0.0 for item in items for i in implementations(item)
    ]
    right.set_xlim(0, max([130.0] + [p * 1.3 for p in pcts]))  # room for the labels
    fig.suptitle(f"Kernels: Apex vs native PyTorch\n{_subtitle(doc)}", fontsize=10)
    return fig


def _losses_plot(doc: BenchJSON, plt: Any) -> Any:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for s in doc["stages"]:
        if s["status"] == "OK" and s["losses"]:
            ax.plot(range(1, len(s["losses"]) + 1), s["losses"], label=f"{s['number']}. {s['title']}")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend(fontsize=8)
    ax.set_title(f"Loss per stage (same weights, same batches)\n{_subtitle(doc)}", fontsize=10)
    return fig


def write_plots(doc: BenchJSON, out: Path) -> list[str]:
    """Write the plots that have data; returns their file names (relative to out)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    plans = []
    if doc["stages"]:
        plans += [("stages.png", _stages_plot), ("losses.png", _losses_plot)]
    if doc["micro"]["optimizer"] or doc["micro"]["norm"]:
        plans.append(("kernels.png", _kernels_plot))
    written = []
    for name, draw in plans:
        fig = draw(doc, plt)
        try:
            _save(fig, out, name)
        finally:
            plt.close(fig)
        written.append(name)
    return written
