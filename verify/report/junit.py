"""A verify report as JUnit XML, the format Jenkins, GitLab and GitHub test reporters read (`--junit PATH`).

One <testsuite> per layer, one <testcase> per check: classname `verify.<layer>`, name the check's name.
FAIL is a <failure>, SKIP a <skipped>, WARN and INFO pass with their summary in <system-out>; every
test case's text carries the summary and, when the run wrote one, the report's path (where the details
are). The document is built with xml.etree (which escapes what it must) and written with the safe writer.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from verify.checks import LAYERS
from verify.domain.report_json import CheckJSON, ReportJSON
from verify.runtime import atomic

# XML 1.0 cannot hold most control characters, not even escaped; an import error may carry them
_NOT_XML = {c: "?" for c in range(32) if c not in (9, 10, 13)} | {0xFFFE: "?", 0xFFFF: "?"}


def _text(value: object) -> str:
    text = str(value)
    return "".join("?" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text).translate(_NOT_XML)


def _layers(report: ReportJSON) -> list[tuple[str, list[CheckJSON]]]:
    by_layer: dict[str, list[CheckJSON]] = {}
    for check in report["checks"]:
        by_layer.setdefault(check["layer"], []).append(check)
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return sorted(by_layer.items(), key=lambda item: rank.get(item[0], len(LAYERS)))


def _case(check: CheckJSON, where: str) -> ET.Element:
    case = ET.Element(
        "testcase",
        classname=_text(f"verify.{check['layer']}"),
        name=_text(check["name"]),
        time=f"{check.get('duration_s', 0.0):.3f}",
    )
    summary = _text(check["summary"])
    body = f"{check['status']}: {summary}" + (f"\n{where}" if where else "")
    if check["status"] == "FAIL":
        ET.SubElement(case, "failure", message=summary, type="FAIL").text = body
    elif check["status"] == "SKIP":
        ET.SubElement(case, "skipped", message=summary).text = body
    else:  # PASS, WARN, INFO: passed; the summary is the test's output
        ET.SubElement(case, "system-out").text = body
    return case


def document(report: ReportJSON, report_path: str | os.PathLike | None = None) -> str:
    """The JUnit XML text for `report`; report_path: the JSON (or Markdown) report the run wrote."""
    where = f"details: {_text(os.fspath(report_path))}" if report_path else ""
    env = report.get("environment") or {}
    torch_info = env.get("torch") or {}
    gpu = (torch_info.get("gpu") or {}).get("name") or "no GPU"
    root = ET.Element(
        "testsuites",
        name=_text(f"verify {report['mode']}: torch {torch_info.get('version', '?')}, {gpu}"),
        tests=str(len(report["checks"])),
        failures=str(sum(1 for c in report["checks"] if c["status"] == "FAIL")),
        skipped=str(sum(1 for c in report["checks"] if c["status"] == "SKIP")),
        errors="0",
        time=f"{report.get('duration_s', 0.0):.3f}",
    )
    for layer, checks in _layers(report):
        suite = ET.SubElement(
            root,
            "testsuite",
            name=_text(f"verify.{layer}"),
            tests=str(len(checks)),
            failures=str(sum(1 for c in checks if c["status"] == "FAIL")),
            skipped=str(sum(1 for c in checks if c["status"] == "SKIP")),
            errors="0",
            timestamp=_text(report.get("created_at", "")),
            time=f"{sum(c.get('duration_s', 0.0) for c in checks):.3f}",
        )
        suite.extend(_case(c, where) for c in checks)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(path: str | os.PathLike, report: ReportJSON, report_path: str | os.PathLike | None = None) -> None:
    atomic.write_text(path, document(report, report_path))
