"""The report's first block: one row per Apex module, like DeepSpeed's ds_report.

Columns: module, the build flag that builds it, whether it imports, the SASS/PTX it carries for this
GPU, whether it runs here, and the features that need it. Read from a finished report (its
`extensions`, its arch checks' `via`, the GPU in `environment`), so the terminal and the Markdown
rendering show the same rows.
"""

from __future__ import annotations

from verify.domain.report_json import ExtensionJSON, ReportJSON
from verify.layers import module_map

HEADER = ("module", "flag", "imports", "SASS/PTX for this GPU", "runs here", "needed by")
_IMPORT_WORDS = {
    "ok": "yes",
    "missing": "no: not built",
    "undefined_symbol": "no: undefined symbol",
    "missing_cuda_library": "no: CUDA library missing",
    "other": "no: import error",
}
_NEEDED_BY_SHOWN = 3


def _needed_by(module: str) -> str:
    try:
        features = module_map.module(module).features
    except KeyError:  # named by a manifest, not in the module map
        return ""
    shown = ", ".join(features[:_NEEDED_BY_SHOWN])
    return shown + (", ..." if len(features) > _NEEDED_BY_SHOWN else "")


def _code_for_gpu(ext: ExtensionJSON, via: str | None, gpu_sm: str | None) -> str:
    arch = ext.get("arch")
    if ext["status"] != "ok" or not arch:
        return "-"
    built = " ".join(arch.get("sass", []) + arch.get("ptx", []))
    if not built:
        return "no GPU code"
    if gpu_sm is None:
        return f"{built} (no GPU here)"
    if arch.get("compatible") is False:
        return f"none for {gpu_sm} (built {built})"
    if via and via.startswith("compute_"):
        return f"PTX {via} (JIT)"
    return f"SASS {via}" if via else built


def _runs_here(ext: ExtensionJSON, gpu_sm: str | None) -> str:
    arch = ext.get("arch") or {}
    if ext["status"] != "ok":
        return "no"
    if not _is_cuda(ext["module"]):
        return "yes"
    if gpu_sm is None:
        return "no GPU"
    return {True: "yes", False: "no", None: "?"}[arch.get("compatible")]


def _is_cuda(module: str) -> bool:
    try:
        return module_map.module(module).cuda
    except KeyError:
        return True


def rows(report: ReportJSON) -> list[tuple[str, ...]]:
    """One row per module of report["extensions"], in report order, under HEADER."""
    gpu = ((report.get("environment") or {}).get("torch") or {}).get("gpu") or {}
    gpu_sm = gpu.get("sm")
    via = {c["name"]: (c.get("details") or {}).get("via") for c in report["checks"] if c["layer"] == "arch"}
    return [
        (
            e["module"],
            e.get("flag") or "-",
            _IMPORT_WORDS.get(e["status"], e["status"]),
            _code_for_gpu(e, via.get(e["module"]), gpu_sm),
            _runs_here(e, gpu_sm),
            _needed_by(e["module"]),
        )
        for e in report["extensions"]
    ]


def text_lines(report: ReportJSON) -> list[str]:
    """The table as aligned plain-text lines (header first); [] when the report has no modules."""
    body = rows(report)
    if not body:
        return []
    table = [HEADER, *body]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER) - 1)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in table]
