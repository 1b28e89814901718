"""Assemble the report (schema v3, verify/schema/report.schema.json): counts, verdict and exit code."""

from __future__ import annotations

import datetime
import os
import platform
import socket
from pathlib import Path
from typing import Any

from verify import SCHEMA_VERSION, __version__
from verify.checks import Check, Status
from verify.domain.report_json import EnvironmentJSON, ExtensionJSON, HostJSON, ReportJSON, TimingJSON
from verify.report import recommend
from verify.runtime import exit_codes

SCHEMA_PATH = Path(__file__).parents[1] / "schema" / "report.schema.json"


def host_info() -> HostJSON:
    return {
        "hostname": socket.gethostname(),
        "in_container": Path("/.dockerenv").exists() or Path("/run/.containerenv").exists(),
        "cpu_count": os.cpu_count(),
        "os": platform.platform(),
    }


def summarize(checks: list[Check]) -> dict[str, int]:
    counts = {s.value: 0 for s in Status}
    for check in checks:
        counts[check.status.value] += 1
    return counts


def exit_code(checks: list[Check], *, environment_unavailable: bool) -> int:
    """3 when something the run needs is missing (e.g. --require-gpu without a GPU), else 1 on any FAIL."""
    if environment_unavailable:
        return exit_codes.ENVIRONMENT
    if any(c.status is Status.FAIL for c in checks):
        return exit_codes.FAILED
    return exit_codes.OK


def build(
    *,
    mode: str,
    started_at: datetime.datetime,
    duration_s: float,
    environment: EnvironmentJSON,
    apex: dict[str, Any],
    manifest: dict[str, Any] | None,
    extensions: list[ExtensionJSON],
    checks: list[Check],
    timings: list[TimingJSON],
    options: dict[str, object],
    environment_unavailable: bool = False,
    distributed: dict[str, Any] | None = None,
) -> ReportJSON:
    summary = summarize(checks)
    code = exit_code(checks, environment_unavailable=environment_unavailable)
    report: ReportJSON = {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "created_at": started_at.isoformat(timespec="seconds"),
        "mode": mode,
        "options": options,
        "host": host_info(),
        "environment": environment,
        "apex": apex,
        "manifest": manifest,
        "extensions": extensions,
        "checks": [c.to_json() for c in checks],
        "timings": timings,
        "recommendations": recommend.recommendations(timings),
        "summary": summary,
        "verdict": "FAIL" if summary["FAIL"] or code != exit_codes.OK else "PASS",
        "exit_code": code,
        "duration_s": round(duration_s, 3),
    }
    if distributed is not None:  # the cross-GPU layer ran or was SKIP (full mode); absent otherwise
        report["distributed"] = distributed
    return report
