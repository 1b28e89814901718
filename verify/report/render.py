"""Render a report for people: a terminal summary that reads well in a CI log, and Markdown.

Terminal: what to use per feature (verify.report.recommend, from the timings), the module table (verify.report.module_table: does each module import and run here), then only the
checks that are not PASS or INFO (`FAIL  extensions.amp_C  missing ...`), the timings table and one
verdict line; --verbose prints every check grouped by layer instead of the table. Colour only on a TTY (and never with NO_COLOR); on GitHub Actions
each FAIL also becomes an `::error::` annotation. A check's id and summary are printed on one line
whatever they hold (an import error, a manifest's module name), so no text of theirs starts a line
the Actions runner would read as a command (verify.runtime.workflow_commands).
"""

from __future__ import annotations

import os
from typing import Any, Literal, TextIO

from verify.checks import LAYERS
from verify.domain.report_json import CheckJSON, ReportJSON, TimingJSON
from verify.report import module_table
from verify.runtime import exit_codes, workflow_commands

_COLORS = {"PASS": "32", "FAIL": "31;1", "WARN": "33", "SKIP": "2", "INFO": "36"}
_NEEDS_A_LOOK = ("FAIL", "WARN", "SKIP")  # the default output's check lines; PASS and INFO with --verbose


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _paint(text: str, status: str, color: bool) -> str:
    return f"\033[{_COLORS[status]}m{text}\033[0m" if color else text


def _ordered(checks: list[CheckJSON]) -> list[CheckJSON]:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return sorted(checks, key=lambda c: rank.get(c["layer"], len(LAYERS)))  # stable inside a layer


def verdict_line(report: ReportJSON) -> str:
    s = report["summary"]
    counts = ", ".join(f"{s[k]} {k}" for k in ("FAIL", "WARN", "PASS", "SKIP", "INFO") if s.get(k))
    code = report["exit_code"]
    return (
        f"verify {report['mode']}: {report['verdict']} — {counts} in {report['duration_s']:.1f} s"
        f" — exit {code} ({exit_codes.MEANINGS.get(code, '?')})"
    )


def _num(value: Any, spec: str, suffix: str = "") -> str:
    return f"{value:{spec}}{suffix}" if isinstance(value, (int, float)) else "n/a"


def _figure_cells(t: TimingJSON, figure: Literal["kernel_time", "host_inclusive"]) -> tuple[str, str]:
    """('fused ms / native ms', 'winner speedup (lo-hi)') for one figure of a timing row."""
    v = t.get(figure)
    if not v:
        return "n/a", "not measured"
    if t.get("withheld"):  # other work on the GPU (verify.gpu.device_load): the figures, no winner
        return f"{_num(v['fused_ms'], '.3f')} / {_num(v['native_ms'], '.3f')}", "withheld (GPU shared)"
    lo, hi = v["interval"]
    this_run = v.get("this_run_winner") or v["winner"]
    # a loop gap made only by host time: the verdict is a tie, and what this run measured is shown with it
    winner = v["winner"] if this_run == v["winner"] else f"{v['winner']} (this run: {this_run} by host time)"
    return (
        f"{_num(v['fused_ms'], '.3f')} / {_num(v['native_ms'], '.3f')}",
        f"{winner} {_num(v['speedup'], '.2f', 'x')} ({lo:.2f}-{hi:.2f})",
    )


def _host_bound(t: TimingJSON) -> str:
    rows = [t.get("fused") or {}, *(t.get("natives") or [])]
    marks = [
        f"{r['name']} +{r['bound']['host_overhead_ms']:.3f} ms"
        for r in rows
        if (r.get("bound") or {}).get("kind") == "host"
    ]
    return ", ".join(marks) or "none"


def timings_table(timings: list[TimingJSON]) -> list[str]:
    if not timings:
        return []
    rows = [
        (
            "kernel",
            "case",
            "kernel ms apex / native",
            "kernel: winner",
            "loop ms apex / native",
            "loop: winner",
            "host-bound",
        )
    ]
    for t in timings:
        kernel_ms, kernel_verdict = _figure_cells(t, "kernel_time")
        loop_ms, loop_verdict = _figure_cells(t, "host_inclusive")
        rows.append(
            (
                t.get("kernel", ""),
                t.get("case", ""),
                kernel_ms,
                kernel_verdict,
                loop_ms,
                loop_verdict,
                _host_bound(t),
            )
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows]


def timings_heading(timings: list[TimingJSON]) -> str:
    devices = sorted({t.get("device") or "?" for t in timings})
    cores = sorted({str(t["host"]["cpu"]) for t in timings if (t.get("host") or {}).get("cpu") is not None})
    pinned = f", host threads pinned to CPU {', '.join(cores)}" if cores else ""
    return (
        f"── timings on {', '.join(devices)}{pinned} (kernel: GPU kernel time, torch.profiler; loop: per call"
        " in a back-to-back loop, CUDA events; speedup = native / apex, interleaved rounds, 95% interval) ──"
    )


def recommendation_heading(report: ReportJSON) -> str:
    torch_info = (report.get("environment") or {}).get("torch") or {}
    gpu = (torch_info.get("gpu") or {}).get("name") or "this GPU"
    return (
        f"── what to use on {gpu}, torch {torch_info.get('version', '?')} (from the timing layer: GPU kernel"
        " time decides, compiled torch included) ──"
    )


def recommendation_lines(report: ReportJSON) -> list[str]:
    """The report's first screen: per feature and dtype, what to use and by how much."""
    recs = report.get("recommendations") or []
    if not recs:
        return []
    return [recommendation_heading(report)] + [workflow_commands.one_line(r["line"]) for r in recs]


def _check_line(check: CheckJSON, width: int, color: bool) -> str:
    one_line = workflow_commands.one_line
    status = _paint(f"{check['status']:<4}", check["status"], color)
    return f"{status}  {one_line(check['id']):<{width}}  {one_line(check['summary'])}"


def _every_check(checks: list[CheckJSON], width: int, color: bool) -> list[str]:
    """--verbose: every check, under a heading per layer."""
    lines: list[str] = []
    layer = None
    for check in checks:
        if check["layer"] != layer:
            layer = check["layer"]
            lines.append(f"── {layer} ──")
        lines.append(_check_line(check, width, color))
    return lines


def _compatibility_block(report: ReportJSON, checks: list[CheckJSON], width: int, color: bool) -> list[str]:
    """The default: the module table, then only the checks that need a look (FAIL, WARN, SKIP)."""
    lines = module_table.text_lines(report)
    shown = [c for c in checks if c["status"] in _NEEDS_A_LOOK]
    width = max((len(workflow_commands.one_line(c["id"])) for c in shown), default=width)
    if shown:
        lines += ["── not PASS ──"] if lines else []
        lines.extend(_check_line(c, width, color) for c in shown)
    hidden = {s: sum(1 for c in checks if c["status"] == s) for s in ("PASS", "INFO")}
    if any(hidden.values()):
        counts = " and ".join(f"{n} {s}" for s, n in hidden.items() if n)
        lines.append(f"({counts} checks not shown: --verbose prints every check)")
    return lines


def terminal(report: ReportJSON, *, color: bool = False, quiet: bool = False, verbose: bool = False) -> str:
    """quiet: FAIL and WARN lines only; verbose: every check by layer; default: the compatibility block."""
    checks = _ordered(report["checks"])
    width = max((len(workflow_commands.one_line(c["id"])) for c in checks), default=10)
    if quiet:
        lines = [_check_line(c, width, color) for c in checks if c["status"] in ("FAIL", "WARN")]
    elif verbose:
        lines = _every_check(checks, width, color)
    else:
        lines = _compatibility_block(report, checks, width, color)
    if not quiet:
        lines = recommendation_lines(report) + lines
    if report.get("timings") and not quiet:
        lines.append(timings_heading(report["timings"]))
        lines.extend(timings_table(report["timings"]))
    if workflow_commands.active():
        lines.extend(
            workflow_commands.command("error", c["summary"], title=f"verify {c['id']}")
            for c in checks
            if c["status"] == "FAIL"
        )
    verdict = verdict_line(report)
    lines.append(_paint(verdict, report["verdict"], color))
    return "\n".join(lines) + "\n"


def _md(text: Any) -> str:
    return str(text if text is not None else "").replace("|", "\\|").replace("\n", " ")


def markdown(report: ReportJSON) -> str:
    env = report["environment"]
    torch_info = env.get("torch") or {}
    gpu = torch_info.get("gpu") or {}
    apex = report["apex"]
    manifest = report.get("manifest")
    gpu_text = f"{gpu.get('name')} (cc {gpu.get('capability')})" if gpu else "none"
    out = [
        f"# verify report: {report['verdict']}",
        "",
        f"`{verdict_line(report)}`",
        "",
        *_recommendations_md(report),
        *_modules_md(report),
        f"Created {report['created_at']} on `{report['host']['hostname']}` by verify {report['tool_version']}"
        f" (schema {report['schema_version']}), mode `{report['mode']}`.",
        "",
        "## Environment",
        "",
        "| item | value |",
        "|---|---|",
        f"| Python | {_md(env['python']['version'])} |",
        f"| torch | {_md(torch_info.get('version', 'not importable'))} |",
        f"| torch CUDA | {_md(torch_info.get('cuda') or 'none (CPU build)')} |",
        f"| C++11 ABI | {_md(torch_info.get('cxx11_abi'))} |",
        f"| torch archs | {_md(' '.join(torch_info.get('arch_list') or []) or 'none')} |",
        f"| GPU | {_md(gpu_text)} |",
        f"| driver | {_md((env.get('driver') or {}).get('version') or 'none')} |",
        f"| nvcc | {_md((env.get('nvcc') or {}).get('version') or 'not present')} |",
        f"| gcc | {_md((env.get('gcc') or {}).get('version') or 'not present')} |",
        "",
        "## Apex",
        "",
        f"- identity: **{apex.get('kind')}**" + (f" at `{apex['path']}`" if apex.get("path") else ""),
        f"- commit: {apex.get('commit') or 'unknown'}"
        + (f" (from {apex['commit_source']})" if apex.get("commit_source") else ""),
        f"- build manifest: {('`' + manifest['path'] + '`') if manifest else 'none'}",
        "",
    ]
    out += ["## Checks", "", "| status | check | summary |", "|---|---|---|"]
    for c in _ordered(report["checks"]):
        out.append(f"| {c['status']} | `{c['id']}` | {_md(c['summary'])} |")
    out.append("")
    if report.get("timings"):
        out += [
            "## Timings",
            "",
            f"{timings_heading(report['timings']).strip('─ ')}.",
            "",
            "| kernel | case | kernel ms apex / native | kernel: winner | loop ms apex / native | loop: winner "
            "| host-bound | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for t in report["timings"]:
            kernel_ms, kernel_verdict = _figure_cells(t, "kernel_time")
            loop_ms, loop_verdict = _figure_cells(t, "host_inclusive")
            out.append(
                f"| {_md(t.get('kernel'))} | {_md(t.get('case'))} | {kernel_ms} | {kernel_verdict} | {loop_ms}"
                f" | {loop_verdict} | {_md(_host_bound(t))} | {_md(t.get('verdict'))} |"
            )
        out.append("")
    if report.get("distributed"):
        out += _distributed_md(report["distributed"])
    return "\n".join(out)


def _recommendations_md(report: ReportJSON) -> list[str]:
    recs = report.get("recommendations") or []
    if not recs:
        return []
    return (
        ["## What to use", "", f"{recommendation_heading(report).strip('─ ')}.", ""]
        + [f"- {_md(r['line'])}" for r in recs]
        + [""]
    )


def _modules_md(report: ReportJSON) -> list[str]:
    """The module table (verify.report.module_table) plus each module's import error; [] without modules."""
    body = module_table.rows(report)
    if not body:
        return []
    errors = [_md(e.get("demangled_symbol") or e.get("error")) for e in report["extensions"]]
    out = [
        "## Modules",
        "",
        "| " + " | ".join(module_table.HEADER) + " | error |",
        "|" + "---|" * (len(module_table.HEADER) + 1),
    ]
    out += [
        f"| `{row[0]}` | " + " | ".join(_md(c) for c in row[1:]) + f" | {error} |"
        for row, error in zip(body, errors, strict=True)
    ]
    return out + [""]


def _distributed_md(dist: dict[str, Any]) -> list[str]:
    out = ["## Distributed", ""]
    if not dist.get("ran"):
        return out + [f"- not run: {_md(dist.get('skip_reason') or 'see the distributed checks')}", ""]
    off = ", ".join(f"{k}={v}" for k, v in (dist.get("multicast_off") or {}).items())
    out.append(
        f"- {dist['world_size']} ranks, {_md(dist['backend'])} on {_md(dist['device'])} ({_md(dist.get('origin'))});"
        f" NCCL {_md(dist.get('nccl_version') or 'n/a')}; NVLink multicast off ({_md(off)})"
    )
    ar = dist.get("all_reduce")
    if ar:
        out.append(
            f"- all-reduce of {ar['bytes'] / 2**20:g} MiB {_md(ar['dtype'])}: bus bandwidth **{ar['busbw_gbps']:.1f} GB/s**"
            f" (algorithm {ar['algbw_gbps']:.1f} GB/s), median {ar['median_ms']:.3f} ms of {ar['iters']} after"
            f" {ar['warmup']} warm-up ({_md(ar['timer'])}, slowest rank)"
        )
    out += ["", "| rank | pid | device | setup s |", "|---|---|---|---|"]
    out += [
        f"| {r['rank']} | {r['pid']} | {_md(r.get('device'))} | {_num(r.get('setup_s'), '.2f')} |"
        for r in dist.get("ranks", [])
    ]
    return out + [""]
