"""All cells in one table: out/matrix-report.md and out/matrix-report.html (with a bar per kernel
speedup), written atomically from the rows matrix_report.py collects."""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import math
from pathlib import Path

from toolchain.runs.cell_result import CellStatus
from toolchain.runs.matrix_report import Row, collect
from verify.checks import Status
from verify.runtime import atomic
from verify.runtime.messages import markdown_cell

MD_NAME = "matrix-report.md"
HTML_NAME = "matrix-report.html"


@dataclasses.dataclass(frozen=True)
class TableRow:
    """One line of the table: each column's text, by name (COLUMNS are their headers, in this order)."""

    cell: str
    cuda: str
    torch: str
    python: str
    os: str
    archs: str
    build: str
    verify: str
    extensions: str
    kernels: str
    details: str


HEADERS = {
    "cell": "cell",
    "cuda": "CUDA",
    "torch": "torch",
    "python": "Python",
    "os": "OS",
    "archs": "archs",
    "build": "build",
    "verify": "verify",
    "extensions": "extensions",
    "kernels": "kernels (native / Apex time)",
    "details": "details",
}
COLUMNS = tuple(HEADERS[f.name] for f in dataclasses.fields(TableRow))
_STATUS_COLUMNS = ("build", "verify")  # the cells the HTML colours by the row's outcome
_NOT_STARTED = (
    CellStatus.PENDING,
    CellStatus.NOT_RUN,
    CellStatus.INTERRUPTED,
    CellStatus.SKIPPED,
    CellStatus.BUILDING,
)


def table_row(row: Row) -> TableRow:
    cell = row.cell
    archs = ";".join(cell.archs)
    return TableRow(
        cell=row.id,
        cuda=cell.cuda,
        torch=cell.torch,
        python=cell.python,
        os=cell.os,
        archs=archs + (f" +{','.join(cell.extras)}" if cell.extras else ""),
        build=build_text(row),
        verify=verify_text(row),
        extensions=extensions_text(row),
        kernels=kernels_text(row),
        details=details_text(row),
    )


def build_text(row: Row) -> str:
    build = row.build
    if row.error and build is None:
        return "unreadable"
    if build is None and row.status in (CellStatus.VERIFIED, CellStatus.VERIFY_FAILED):
        return "-"  # `build.py verify IMAGE` of an image built elsewhere
    if build is not None and build.ok:
        return f"ok ({build.duration_s:.0f} s)" if build.duration_s is not None else "ok"
    if row.status in _NOT_STARTED:
        return row.status.value.replace("_", " ")
    if build is not None and build.status is CellStatus.ENVIRONMENT_UNAVAILABLE:
        return "environment unavailable"
    stage = build.stage_failed if build is not None else None
    return f"FAILED in {stage}" if stage else "FAILED"


def verify_text(row: Row) -> str:
    report = row.report
    if report is not None:
        counts = ", ".join(
            f"{n} {s.value}"
            for s, n in report.summary.items()
            if n and s in (Status.FAIL, Status.WARN, Status.SKIP)
        )
        where = f"{report.mode or '?'}" + (f", {report.gpu_name}" if report.gpu_name else "")
        return f"{report.verdict or '?'} ({where})" + (f": {counts}" if counts else "")
    verify = row.verify
    if verify is not None and verify.to_json():
        return f"exit {verify.exit_code}" + (f": {verify.error}" if verify.error else "")
    return "-"


def extensions_text(row: Row) -> str:
    """`ok/expected ok`, counted against the modules the build manifest expected (the cell's flags), so
    an optional module the cell never built is "not built (optional)", not missing; without a manifest,
    against every module verify looked for."""
    if row.report is None:
        return "-"
    extensions = row.report.extensions
    expected = row.report.expected_modules
    if expected is None:
        bad = [f"{e.module} ({e.status.replace('_', ' ')})" for e in extensions if e.status != "ok"]
        text = f"{len(extensions) - len(bad)}/{len(extensions)} ok"
        return text + (f"; {', '.join(bad)}" if bad else "")
    status = {e.module: e.status for e in extensions}
    wanted = list(dict.fromkeys(expected))
    ok = sum(status.get(m) == "ok" for m in wanted)
    bad = [f"{m} ({status.get(m, 'not checked').replace('_', ' ')})" for m in wanted if status.get(m) != "ok"]
    # an optional module that is there but broken still counts against the cell; one never built does not
    bad += [
        f"{e.module} ({e.status.replace('_', ' ')})"
        for e in extensions
        if e.module not in wanted and e.status not in ("ok", "missing")
    ]
    optional = sum(e.module not in wanted and e.status == "missing" for e in extensions)
    parts = [f"{ok}/{len(wanted)} ok", *([", ".join(bad)] if bad else [])]
    if optional:
        parts.append(f"{optional} not built (optional)")
    return "; ".join(parts)


def speedups(row: Row) -> dict[str, float]:
    """kernel -> geometric mean over its cases of the kernel-time speedup (native / Apex); >1: Apex faster."""
    by_kernel: dict[str, list[float]] = {}
    for kernel, ratio in row.report.speedups if row.report else ():
        by_kernel.setdefault(kernel, []).append(ratio)
    return {k: math.exp(sum(map(math.log, v)) / len(v)) for k, v in by_kernel.items()}


def kernels_text(row: Row) -> str:
    return "; ".join(f"{k} {v:.2f}x" for k, v in speedups(row).items()) or "-"


def details_text(row: Row) -> str:
    if row.error:
        return row.error
    build = row.build
    if build is not None and build.error:
        return build.error
    if build is not None and not build.ok and build.summary:
        return build.summary
    if build is not None and not build.ok and build.log_tail:
        return build.log_tail[-1]
    if row.report is not None:
        fails = row.report.failing(Status.FAIL)
        if fails:
            more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
            return f"{fails[0].id}: {fails[0].summary}{more}"
    return ""


def _md_escape(text: str) -> str:
    return markdown_cell(" ".join(str(text).split()))  # no raw HTML from a cell id or an error, one row


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
        texts = {name: _md_escape(text) for name, text in dataclasses.asdict(table_row(row)).items()}
        if texts["build"].startswith("FAILED"):
            texts["build"] = f"**{texts['build']}**"
        lines.append("| " + " | ".join(texts.values()) + " |")
    if not rows:
        lines.append(
            "| " + " | ".join(["(no cells run yet: `build.py matrix`)"] + [""] * (len(COLUMNS) - 1)) + " |"
        )
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
    for kernel, ratio in speedups(row).items():
        width = int(max(2.0, min(200.0, 60 * ratio)))  # clamp before int(): 60 * 1e308 is inf
        cls = "bar" if ratio >= 1 else "bar slow"
        parts.append(
            f'{html.escape(kernel)} {ratio:.2f}x <span class="{cls}" style="width:{width}px"></span>'
        )
    return "<br>".join(parts) or "-"


def render_html(rows: list[Row], created_at: str) -> str:
    ok = sum(r.ok for r in rows)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = []
    for row in rows:
        texts = {name: html.escape(text) for name, text in dataclasses.asdict(table_row(row)).items()}
        texts["cell"] = f"<code>{texts['cell']}</code>"
        texts["kernels"] = _bars(row)
        if row.report_path:
            texts["verify"] = (
                f'<a href="{html.escape(Path(row.report_path).as_posix())}">{texts["verify"]}</a>'
            )
        waiting = row.status in (CellStatus.PENDING, CellStatus.NOT_RUN, CellStatus.SKIPPED)
        klass = "ok" if row.ok else "other" if waiting else "bad"
        tds = "".join(
            f'<td class="status">{text}</td>' if name in _STATUS_COLUMNS else f"<td>{text}</td>"
            for name, text in texts.items()
        )
        body.append(f'<tr class="{klass}">{tds}</tr>')
    if not rows:
        body.append(
            f'<tr><td colspan="{len(COLUMNS)}">no cells run yet: <code>build.py matrix</code></td></tr>'
        )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Apex image matrix</title>'
        f"<style>{_CSS}</style></head><body>\n<h1>Apex image matrix</h1>\n"
        f'<p class="note">{len(rows)} cells, {ok} ok, {len(rows) - ok} not ok — generated {html.escape(created_at)} '
        "by <code>build.py report</code>. Kernel figures: best native PyTorch median time ÷ Apex's "
        "(above 1: Apex is faster).</p>\n"
        f"<table><thead><tr>{head}</tr></thead><tbody>\n"
        + "\n".join(body)
        + "\n</tbody></table>\n</body></html>\n"
    )


def write(out: Path, problems: list[str] | None = None) -> tuple[Path, Path, list[Row]]:
    """Write the Markdown and HTML tables; `problems` (when given) receives one line per unusable input."""
    rows = collect(out, problems)
    created_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    # --out is the run's folder, which the tool owns: a link planted there is refused, never followed
    out.mkdir(parents=True, exist_ok=True)
    with atomic.TreeBatch(out) as batch:
        batch.add(MD_NAME, render_markdown(rows, created_at).encode("utf-8", "backslashreplace"))
        batch.add(HTML_NAME, render_html(rows, created_at).encode("utf-8", "backslashreplace"))
    return out / MD_NAME, out / HTML_NAME, rows
