"""All cells in one table: out/matrix-report.md and out/matrix-report.html (with a bar per kernel
speedup), written atomically from the rows matrix_report.py collects."""

from __future__ import annotations

import datetime as dt
import html
from pathlib import Path

from toolchain.runs.matrix_report import Row, collect
from verify.runtime import atomic

MD_NAME = "matrix-report.md"
HTML_NAME = "matrix-report.html"

COLUMNS = ("cell", "CUDA", "torch", "Python", "OS", "archs", "build", "verify", "extensions",
           "kernels (native / Apex time)", "details")


def _cells(row: Row) -> list[str]:
    cell = row.cell
    archs = ";".join(cell.get("archs") or [])
    extras = cell.get("extras") or []
    return [
        row.id,
        cell.get("cuda", ""),
        cell.get("torch", ""),
        cell.get("python", ""),
        cell.get("os", ""),
        archs + (f" +{','.join(extras)}" if extras else ""),
        row.build_text(),
        row.verify_text(),
        row.extensions_text(),
        row.kernels_text(),
        row.details_text(),
    ]


def _md_escape(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render_markdown(rows: list[Row], created_at: str) -> str:
    ok = sum(r.ok for r in rows)
    lines = [
        "# Apex image matrix",
        "",
        f"{len(rows)} cells, {ok} ok, {len(rows) - ok} not ok — generated {created_at} by `build.py report`.",
        "Kernel figures are the best native PyTorch median time divided by Apex's (above 1: Apex is faster).",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for row in rows:
        cells = [_md_escape(c) for c in _cells(row)]
        if cells[6].startswith("FAILED"):
            cells[6] = f"**{cells[6]}**"
        lines.append("| " + " | ".join(cells) + " |")
    if not rows:
        lines.append("| " + " | ".join(["(no cells run yet: `build.py matrix`)"] + [""] * (len(COLUMNS) - 1)) + " |")
    return "\n".join(lines) + "\n"


_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222}
table{border-collapse:collapse;font-size:.9rem}th,td{border:1px solid #ccc;padding:.3rem .5rem;vertical-align:top}
th{background:#f3f3f3;text-align:left}tr.ok td.status{background:#e6f4e6}tr.bad td.status{background:#fbe3e3}
tr.other td.status{background:#fff6d6}code{font-size:.85rem}.bar{display:inline-block;height:.7rem;background:#4a7}
.bar.slow{background:#c55}.note{color:#555}
"""


def _bars(row: Row) -> str:
    parts = []
    for kernel, ratio in row.speedups().items():
        width = int(max(2.0, min(200.0, 60 * ratio)))  # clamp before int(): 60 * 1e308 is inf
        cls = "bar" if ratio >= 1 else "bar slow"
        parts.append(f'{html.escape(kernel)} {ratio:.2f}x <span class="{cls}" style="width:{width}px"></span>')
    return "<br>".join(parts) or "-"


def render_html(rows: list[Row], created_at: str) -> str:
    ok = sum(r.ok for r in rows)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = []
    for row in rows:
        cells = [html.escape(c) for c in _cells(row)]
        cells[0] = f"<code>{cells[0]}</code>"
        cells[9] = _bars(row)
        if row.report_path:
            cells[7] = f'<a href="{html.escape(Path(row.report_path).as_posix())}">{cells[7]}</a>'
        klass = "ok" if row.ok else "bad" if row.status not in ("pending", "not_run", "skipped") else "other"
        tds = "".join(
            f'<td class="status">{c}</td>' if i in (6, 7) else f"<td>{c}</td>" for i, c in enumerate(cells)
        )
        body.append(f'<tr class="{klass}">{tds}</tr>')
    if not rows:
        body.append(f'<tr><td colspan="{len(COLUMNS)}">no cells run yet: <code>build.py matrix</code></td></tr>')
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Apex image matrix</title>"
        f"<style>{_CSS}</style></head><body>\n<h1>Apex image matrix</h1>\n"
        f'<p class="note">{len(rows)} cells, {ok} ok, {len(rows) - ok} not ok — generated {html.escape(created_at)} '
        "by <code>build.py report</code>. Kernel figures: best native PyTorch median time ÷ Apex's "
        "(above 1: Apex is faster).</p>\n"
        f"<table><thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(body) + "\n</tbody></table>\n</body></html>\n"
    )


def write(out: Path, problems: list[str] | None = None) -> tuple[Path, Path, list[Row]]:
    """Write the Markdown and HTML tables; `problems` (when given) receives one line per unusable input."""
    rows = collect(out, problems)
    created_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    md_path = atomic.write_text(out / MD_NAME, render_markdown(rows, created_at))
    html_path = atomic.write_text(out / HTML_NAME, render_html(rows, created_at))
    return md_path, html_path, rows
