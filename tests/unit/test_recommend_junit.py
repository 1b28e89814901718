"""The report's first screen (what to use per feature, from timings decided from injected rounds) and the
JUnit XML file (written by the safe writer, parsed back with xml.etree, counted against the report)."""

from __future__ import annotations

import datetime
import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, cast

import jsonschema

from verify.checks import Check, Status
from verify.domain.report_json import ReportJSON, TimingJSON
from verify.report import assemble, junit, recommend, render
from verify.timing import kernel_variants, stats
from verify.timing.rules import HOST_INCLUSIVE, KERNEL

FUSED_LN = kernel_variants.FUSED_LAYER_NORM
COMPILED_LN = kernel_variants.COMPILED_LAYER_NORM


def _rounds(ms: float, seed: int, n: int = 16, spread: float = 0.01) -> list[float]:
    rng = random.Random(seed)
    return [ms * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def _row(
    kernel: str, case: str, fused: str, native: str, fused_ms: float, native_ms: float, **extra: Any
) -> TimingJSON:
    """A timing row as verify's timing layer writes it, its verdicts decided by the real statistics."""
    k = stats.decide(KERNEL, fused, native, _rounds(fused_ms, 1), _rounds(native_ms, 2))
    loop_native = extra.pop("loop_native_ms", native_ms)
    loop = stats.decide(HOST_INCLUSIVE, fused, native, _rounds(fused_ms, 3), _rounds(loop_native, 4))
    row = {
        "kernel": kernel,
        "case": case,
        "device": "cuda:0 (NVIDIA H200)",
        "fused": {"name": fused, "status": "OK"},
        "natives": [{"name": native, "status": "OK"}],
        KERNEL: k.to_json(),
        HOST_INCLUSIVE: loop.to_json(),
        "winner": {KERNEL: k.winner, HOST_INCLUSIVE: loop.winner},
        "verdict": stats.sentence(k, loop),
        **extra,
    }
    return cast(TimingJSON, row)


def test_compiled_torch_faster_is_said_with_its_factor() -> None:
    row = _row("FusedLayerNorm", "bf16, input 8192x4096, forward+backward", FUSED_LN, COMPILED_LN, 0.26, 0.17)
    rec = recommend.recommend(row)
    assert rec["use"] == COMPILED_LN and rec["feature"] == "LayerNorm" and rec["dtype"] == "bf16"
    assert rec["speedup"] is not None and 1.5 < rec["speedup"] < 1.56  # 0.26 / 0.17 = 1.53
    assert rec["line"].startswith(
        f"LayerNorm (bf16): compiled torch ({COMPILED_LN}), {rec['speedup']:.2f}x faster kernels than {FUSED_LN} ("
    )


def test_apex_faster_says_keep_it_and_a_tie_says_tie() -> None:
    adam = _row("FusedAdam", "fp32, 33.8M params", "apex FusedAdam", kernel_variants.ADAMW_FUSED, 1.0, 1.3)
    rec = recommend.recommend(adam)
    assert rec["use"] == "apex FusedAdam"
    assert rec["line"].startswith(
        "Adam (fp32): keep apex FusedAdam, 1.30x faster kernels than torch AdamW(fused=True)"
    )
    tie = _row(
        "FusedRMSNorm", "fp32, input", "apex FusedRMSNorm", kernel_variants.COMPILED_RMS_NORM, 0.32, 0.321
    )
    rec = recommend.recommend(tie)
    assert rec["use"] == "tie" and rec["speedup"] is None
    assert rec["line"].startswith("RMSNorm (fp32): tie, apex FusedRMSNorm and compiled torch")
    # an implementation with no plain name is named once (the H200 printed "torch AdamW(fused=True)" twice)
    adam_tie = _row(
        "FusedAdam", "fp32, 33.8M params", "apex FusedAdam", kernel_variants.ADAMW_FUSED, 1.0, 1.0
    )
    assert recommend.recommend(adam_tie)["line"].startswith(
        "Adam (fp32): tie, apex FusedAdam and torch AdamW(fused=True) within the kernels tie band"
    )


def test_a_loop_that_names_another_winner_is_added_and_a_shared_gpu_recommends_nothing() -> None:
    # kernels tie, but the loop (host time included) is 2x faster for torch: said after the kernels' word
    row = _row("FusedLayerNorm", "fp32, input", FUSED_LN, COMPILED_LN, 0.32, 0.32, loop_native_ms=0.16)
    line = recommend.recommend(row)["line"]
    assert "tie" in line and "per call in a loop (host time included) compiled torch is 2.00x faster" in line
    shared = _row(
        "FusedLayerNorm", "bf16, input", FUSED_LN, COMPILED_LN, 0.26, 0.17, withheld="another process"
    )
    rec = recommend.recommend(shared)
    assert rec["use"] is None and "no recommendation, the GPU was shared during timing" in rec["line"]


def _report(checks: list[Check], timings: list[TimingJSON] | None = None) -> ReportJSON:
    return assemble.build(
        mode="full",
        started_at=datetime.datetime(2026, 12, 3, 14, 0, tzinfo=datetime.timezone.utc),
        duration_s=12.5,
        environment={
            "python": {"version": "3.12", "executable": "python"},
            "torch": {
                "version": "2.11.0+cu130",
                "gpu": {"name": "NVIDIA H200", "capability": "9.0", "sm": "sm_90"},
            },
            "driver": {"version": None, "source": None},
            "nvcc": None,
            "gcc": None,
        },
        apex={"installed": True, "kind": "nvidia", "path": None},
        manifest=None,
        extensions=[],
        checks=checks,
        timings=timings or [],
        options={},
    )


def test_the_first_screen_says_what_to_use_and_the_report_validates() -> None:
    rows = [
        _row("FusedLayerNorm", "bf16, input 8192x4096", FUSED_LN, COMPILED_LN, 0.26, 0.17),
        _row("FusedAdam", "fp32, 33.8M params", "apex FusedAdam", kernel_variants.ADAMW_FUSED, 1.0, 1.01),
    ]
    rep = _report([Check("timing", "fused_layer_norm.bf16", Status.INFO, "x")], rows)
    assert [r["use"] for r in rep["recommendations"]] == [COMPILED_LN, "tie"]
    text = render.terminal(rep)
    lines = text.splitlines()
    assert lines[0].startswith("── what to use on NVIDIA H200, torch 2.11.0+cu130")
    assert lines[1] == rep["recommendations"][0]["line"] and lines[2].startswith("Adam (fp32): tie")
    assert "## What to use" in render.markdown(rep)
    assert "what to use" not in render.terminal(rep, quiet=True)
    schema = json.loads(assemble.SCHEMA_PATH.read_text())
    for r in rep["recommendations"]:  # the recommendations block validates on its own
        jsonschema.validate(r, schema["properties"]["recommendations"]["items"])


def test_junit_counts_match_the_report(tmp_path: Path) -> None:
    checks = [
        Check("parity", "fused_adam.adam.fp32", Status.PASS, "agree"),
        Check(
            "compile", "fused_layer_norm.bf16.compiled", Status.WARN, "breaks the graph (1 graph break(s))"
        ),
        Check(
            "extensions", "fused_layer_norm_cuda", Status.FAIL, "missing: built without APEX_CUDA_EXT=1 <&>"
        ),
        Check("large", "fused_adam.fp32.past_2_31", Status.SKIP, "needs 36.0 GiB; cuda:0 has 24.0 GiB"),
        Check("timing", "fused_adam.fp32", Status.INFO, "kernels tie\x01 (a control character)"),
    ]
    rep = _report(checks)
    path = tmp_path / "out" / "verify.xml"
    path.parent.mkdir()
    junit.write(path, rep, report_path="reports/x/report.json")
    root = ET.parse(path).getroot()
    cases = root.findall("./testsuite/testcase")
    assert root.tag == "testsuites" and len(cases) == len(rep["checks"]) == int(root.get("tests", "-1"))
    assert int(root.get("failures", "-1")) == rep["summary"]["FAIL"] == len(root.findall(".//failure")) == 1
    assert int(root.get("skipped", "-1")) == rep["summary"]["SKIP"] == len(root.findall(".//skipped")) == 1
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    # one suite per layer, in the report's layer order
    assert list(suites) == [
        "verify.extensions",
        "verify.parity",
        "verify.compile",
        "verify.timing",
        "verify.large",
    ]
    failure = root.find(".//testcase[@name='fused_layer_norm_cuda']/failure")
    assert failure is not None and failure.get("message") == "missing: built without APEX_CUDA_EXT=1 <&>"
    assert "details: reports/x/report.json" in (failure.text or "")
    warned = root.find(".//testcase[@name='fused_layer_norm.bf16.compiled']")
    assert warned is not None and warned.find("failure") is None and warned.find("skipped") is None
    out = warned.find("system-out")
    assert out is not None and (out.text or "").startswith("WARN: breaks the graph")
    info = root.find(".//testcase[@name='fused_adam.fp32']/system-out")
    assert info is not None and "kernels tie? (a control character)" in (info.text or "")
