"""--require parsing, verdict/exit-code rules and the renderers, on in-process data."""

from __future__ import annotations

import datetime

import pytest

from verify import expectations, module_map, render, report
from verify.checks import Check, Status


def test_require_default_and_names() -> None:
    assert expectations.parse_required(None) == module_map.default_required_features()
    assert expectations.parse_required(["fusedadam, amp_C", "FusedRMSNorm"]) == ("FusedAdam", "amp_C", "FusedRMSNorm")
    assert expectations.parse_required([""]) == ()
    assert expectations.modules_required(("FusedAdam", "FusedRMSNorm")) == {"amp_C", "fused_layer_norm_cuda"}


def test_require_unknown_suggests_closest() -> None:
    with pytest.raises(expectations.RequireError, match="did you mean 'FusedLayerNorm'"):
        expectations.parse_required(["FusedLayerNrom"])


def _report(checks: list[Check], *, unavailable: bool = False) -> dict:
    return report.build(mode="static", started_at=datetime.datetime.now(datetime.timezone.utc), duration_s=1.25,
                        environment={"python": {"version": "3.12", "executable": "python"}, "torch": None,
                                     "driver": {"version": None, "source": None}, "nvcc": None, "gcc": None},
                        apex={"installed": False, "kind": "not_installed", "path": None}, manifest=None,
                        extensions=[], checks=checks, timings=[], options={}, environment_unavailable=unavailable)


def test_exit_codes_and_verdict() -> None:
    ok = _report([Check("identity", "apex", Status.PASS, "fine"), Check("arch", "amp_C", Status.WARN, "jit")])
    assert (ok["verdict"], ok["exit_code"]) == ("PASS", 0)
    failed = _report([Check("identity", "apex", Status.FAIL, "bad")])
    assert (failed["verdict"], failed["exit_code"]) == ("FAIL", 1)
    unavailable = _report([Check("environment", "require_gpu", Status.FAIL, "no GPU")], unavailable=True)
    assert unavailable["exit_code"] == 3


def test_terminal_rendering_plain_and_ordered(monkeypatch) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    rep = _report([Check("expectations", "feature.FusedAdam", Status.FAIL, "amp_C missing"),
                   Check("environment", "python", Status.INFO, "Python 3.12")])
    text = render.terminal(rep)
    lines = text.splitlines()
    assert lines[0] == "── environment ──"
    assert any(line.startswith("FAIL  expectations.feature.FusedAdam") for line in lines)
    assert lines[-1].startswith("verify static: FAIL — 1 FAIL, 1 INFO in 1.2 s — exit 1")
    assert "\033[" not in text
    assert "\033[31;1m" in render.terminal(rep, color=True)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert "::error title=verify expectations.feature.FusedAdam::amp_C missing" in render.terminal(rep)


def test_markdown_has_verdict_and_checks() -> None:
    md = render.markdown(_report([Check("identity", "apex", Status.FAIL, "a | pipe")]))
    assert md.startswith("# verify report: FAIL")
    assert "| FAIL | `identity.apex` | a \\| pipe |" in md


def test_timings_render_and_validate_against_schema() -> None:
    import json

    import jsonschema
    import torch

    from verify import cuda_timer

    x = torch.randn(256, 256)
    fused = cuda_timer.measure("x.mul_", lambda: x.mul_(1.0), device="cpu", warmup=2, iters=5)
    native = cuda_timer.measure("x * 1", lambda: x * 1.0, device="cpu", warmup=2, iters=5)
    ratio, sentence = cuda_timer.verdict(fused, native)
    rep = _report([Check("timing", "mul", Status.INFO, sentence)])
    rep["timings"] = [{"kernel": "mul", "case": "256x256 fp32", "fused": fused.to_json(),
                       "natives": [native.to_json()], "best_native": native.name, "speedup": ratio,
                       "verdict": sentence}]
    schema = json.loads(report.SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator(schema).validate(json.loads(json.dumps(rep)))
    text = render.terminal(rep)
    assert "── timings" in text and "256x256 fp32" in text and f"{ratio:.2f}x" in text
    assert "| mul | 256x256 fp32 |" in render.markdown(rep)
