"""--require parsing, verdict/exit-code rules and the renderers, on in-process data."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import cast

import pytest

from tests.support import REPO
from verify.checks import Check, Status
from verify.domain.report_json import EnvironmentJSON, GpuJSON, ReportJSON, TimingJSON, TorchJSON
from verify.layers import expectations, module_map
from verify.report import assemble as report
from verify.report import reader, render
from verify.runtime import field_types as ft
from verify.runtime import input_files


def test_require_default_and_names() -> None:
    assert expectations.parse_required(None) == module_map.default_required_features()
    assert expectations.parse_required(["fusedadam, amp_C", "FusedRMSNorm"]) == (
        "FusedAdam",
        "amp_C",
        "FusedRMSNorm",
    )
    assert expectations.parse_required([""]) == ()
    assert expectations.modules_required(("FusedAdam", "FusedRMSNorm")) == {"amp_C", "fused_layer_norm_cuda"}


def test_require_unknown_suggests_closest() -> None:
    with pytest.raises(expectations.RequireError, match="did you mean 'FusedLayerNorm'"):
        expectations.parse_required(["FusedLayerNrom"])


def _report(checks: list[Check], *, unavailable: bool = False) -> ReportJSON:
    return report.build(
        mode="static",
        started_at=datetime.datetime.now(datetime.timezone.utc),
        duration_s=1.25,
        environment={
            "python": {"version": "3.12", "executable": "python"},
            "torch": None,
            "driver": {"version": None, "source": None},
            "nvcc": None,
            "gcc": None,
        },
        apex={"installed": False, "kind": "not_installed", "path": None},
        manifest=None,
        extensions=[],
        checks=checks,
        timings=[],
        options={},
        environment_unavailable=unavailable,
    )


def test_exit_codes_and_verdict() -> None:
    ok = _report([Check("identity", "apex", Status.PASS, "fine"), Check("arch", "amp_C", Status.WARN, "jit")])
    assert (ok["verdict"], ok["exit_code"]) == ("PASS", 0)
    failed = _report([Check("identity", "apex", Status.FAIL, "bad")])
    assert (failed["verdict"], failed["exit_code"]) == ("FAIL", 1)
    unavailable = _report([Check("environment", "require_gpu", Status.FAIL, "no GPU")], unavailable=True)
    assert unavailable["exit_code"] == 3


def test_terminal_rendering_plain_and_ordered(monkeypatch) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    rep = _report(
        [
            Check("expectations", "feature.FusedAdam", Status.FAIL, "amp_C missing"),
            Check("environment", "python", Status.INFO, "Python 3.12"),
        ]
    )
    text = render.terminal(rep, verbose=True)  # every check by layer, as before the module table
    lines = text.splitlines()
    assert lines[0] == "── environment ──"
    assert any(line.startswith("FAIL  expectations.feature.FusedAdam") for line in lines)
    assert lines[-1].startswith("verify static: FAIL — 1 FAIL, 1 INFO in 1.2 s — exit 1")
    assert "\033[" not in text
    assert "\033[31;1m" in render.terminal(rep, color=True, verbose=True)
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

    from verify.timing import kernel_compare, kernel_variants

    torch.set_num_threads(1)  # 2 shared CI cores: see tests/unit/test_kernel_compare.py
    x = torch.randn(64, 256, requires_grad=True)
    dy = torch.randn(64, 256)
    variants = kernel_variants.norm_variants(
        "fused_layer_norm", x, dy, torch.rand(256) + 0.5, torch.rand(256) - 0.5, torch.nn.LayerNorm
    )
    result = kernel_compare.compare("FusedLayerNorm", "64x256 fp32", variants, "cpu")
    rep = _report([Check("timing", "fused_layer_norm.fp32", Status.INFO, result.sentence)])
    rep["timings"] = [cast(TimingJSON, result.to_json())]  # to_json's dict is a TimingJSON row
    assert rep["schema_version"] == "3"
    schema = json.loads(report.SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator(schema).validate(json.loads(json.dumps(rep)))
    text = render.terminal(rep)
    assert "── timings on cpu (kernel: GPU kernel time" in text and "64x256 fp32" in text
    kernel = rep["timings"][0]["kernel_time"]
    assert f"{kernel['winner']} {kernel['speedup']:.2f}x ({kernel['interval'][0]:.2f}-" in text
    md = render.markdown(rep)
    assert "| FusedLayerNorm | 64x256 fp32 |" in md and result.sentence in md


def test_a_v1_timing_row_does_not_validate_as_v2() -> None:
    import json

    import jsonschema

    rep = _report([])
    rep["timings"] = [
        {  # type: ignore[typeddict-unknown-key]  # a v1 row: the wrong shape on purpose
            "kernel": "mul",
            "case": "c",
            "fused": None,
            "natives": [],
            "best_native": None,
            "speedup": 1.0,
            "verdict": "tie",
        }
    ]
    schema = json.loads(report.SCHEMA_PATH.read_text())
    with pytest.raises(jsonschema.ValidationError, match="'device' is a required property"):
        jsonschema.Draft202012Validator(schema).validate(rep)


def test_the_gpu_line_names_a_node_of_many_gpus_and_what_differs() -> None:
    from verify.layers import environment

    def gpu(i: int, name: str = "NVIDIA H200", cap: str = "9.0") -> GpuJSON:
        return {
            "index": i,
            "name": name,
            "capability": cap,
            "sm": f"sm_{cap.replace('.', '')}",
            "memory_gib": 139.8,
            "multiprocessors": 132,
        }

    assert environment._other_gpus({"gpus": [gpu(0)]}) == ""  # one GPU: the line is what it always was
    assert environment._other_gpus({"gpus": [gpu(i) for i in range(8)]}).startswith("all 8 alike")
    mixed: TorchJSON = {"gpus": [gpu(0), gpu(1), gpu(2, "NVIDIA A100-SXM4-80GB", "8.0")]}
    assert environment._other_gpus(mixed) == "differs: cuda:2 NVIDIA A100-SXM4-80GB (sm_80)"
    env: EnvironmentJSON = {"torch": {"gpus": mixed["gpus"]}}
    assert environment.device_capabilities(env) == [(9, 0), (9, 0), (8, 0)]
    assert environment.device_capabilities({"torch": None}) == []


# --- the one reader (report.read / parse / read_bytes), its shape derived from the schema ------------------


@pytest.fixture(scope="module")
def static_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support import static_verify_report

    return static_verify_report(tmp_path_factory.mktemp("verify") / "report.json")


def test_a_report_verify_wrote_reads_into_the_record_and_writes_back_unchanged(static_report: Path) -> None:
    data = json.loads(static_report.read_text())
    record = reader.read(static_report)
    assert record.to_json() == data
    assert (record.verdict, record.mode, record.exit_code) == ("FAIL", "static", 1)
    assert (
        record.summary[Status.FAIL] == data["summary"]["FAIL"]
        and record.torch_version == data["environment"]["torch"]["version"]
    )
    assert {c.id for c in record.failing(Status.FAIL)} >= {"identity.apex"}
    assert reader.read_bytes(static_report.read_bytes(), static_report).to_json() == data
    audited = record.with_block("audit", {"image": "x"}).to_json()
    assert audited == {**data, "audit": {"image": "x"}}


def _is_report(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return False
    return isinstance(data, dict) and "schema_version" in data and "checks" in data and "verdict" in data


EVIDENCE = sorted(p for p in (REPO / "tests" / "fixtures" / "evidence").glob("*.json") if _is_report(p))


@pytest.mark.parametrize("path", EVIDENCE, ids=[p.name for p in EVIDENCE])
def test_reports_of_every_schema_version_in_the_evidence_are_read(path: Path) -> None:
    """Reports verify wrote on the H200 host and in containers, schema v1 and v2: all read, unchanged."""
    assert reader.read(path).to_json() == json.loads(path.read_text())


def test_the_accepted_shape_is_the_schemas(static_report: Path) -> None:
    shape = reader.read_shape()
    assert isinstance(shape, ft.Record)
    schema = reader.schema()
    assert set(shape.fields) == set(
        schema["properties"]
    )  # every top-level field the schema declares, no other
    data = json.loads(static_report.read_text())
    data["checks"][0]["status"] = "BOGUS"  # the schema's status enum is verify's Status
    data["extensions"][0]["status"] = ["ok"]
    data["a_newer_key"] = {"any": "thing"}  # a newer verify's block: read, kept
    data["schema_version"] = "1"  # an older verify's report: read
    with pytest.raises(input_files.InputFileError) as refused:
        reader.parse(data, "out/report.json")
    text = str(refused.value)
    assert text.startswith(
        "out/report.json: report.json.extensions[0].status: expected a string, got a list; "
        "report.json.checks[0].status: expected one of PASS, FAIL, WARN, SKIP, INFO as the value"
    )
    assert "a_newer_key" not in text and "schema_version" not in text
    assert [s.value for s in Status] == schema["$defs"]["status"][
        "enum"
    ]  # one status enum, written twice: kept equal
    with pytest.raises(input_files.InputFileError, match="expected an object, got a list"):
        reader.parse([], "r.json")
    with pytest.raises(input_files.InputFileError, match="is not UTF-8 text"):
        reader.read_bytes(b'{"verdict": "\xff"}', "r.json")
