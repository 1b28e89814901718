"""`python -m verify bench` end to end in its CPU smoke mode (real torch, no Apex), and its flag errors."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support import REPO
from verify.bench import cli
from verify.bench.stages import LOSS_REL_TOL
from verify.runtime import exit_codes

TINY = ["--device", "cpu", "--seed", "1", "--steps", "3", "--warmup", "1"]
APEX_STAGES = {"fusedadam-fp32", "fusedadam-fusedln-fp32", "apex-bf16"}
NATIVE_STAGES = {"adam-fp32", "native-bf16", "native-tf32"}


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "verify", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    proc = _run([*TINY, "--out", str(out)])
    doc = json.loads((out / "bench.json").read_text()) if (out / "bench.json").exists() else None
    md = (out / "bench.md").read_text() if (out / "bench.md").exists() else ""
    return {"proc": proc, "out": out, "doc": doc, "md": md}


def _stages(doc: dict) -> dict[str, dict]:
    return {s["key"]: s for s in doc["stages"]}


@pytest.mark.slow
def test_smoke_run_exits_0_and_writes_json_and_markdown(smoke: dict) -> None:
    proc = smoke["proc"]
    assert proc.returncode == 0, proc.stderr
    assert smoke["doc"] is not None and smoke["md"]
    assert "finished in" in proc.stdout  # elapsed time is printed
    assert "Traceback" not in proc.stderr


def test_json_header_environment_and_config(smoke: dict) -> None:
    doc = smoke["doc"]
    assert doc["schema_version"] == "2" and doc["kind"] == "apex-bench"
    assert set(doc["figures"]) == {"stages", "micro", "copy_bandwidth"}
    head = doc["environment"]["headline"]
    assert head["torch"] == torch.__version__ and head["device"] == "cpu" and head["gpu"] is None
    assert "perf_counter" in doc["timer"]
    assert doc["config"]["preset"] == "cpu-smoke" and doc["config"]["steps"] == 3
    assert doc["summary"]["FAIL"] == 0 and doc["exit_code"] == 0


def test_apex_stages_skip_with_a_reason(smoke: dict) -> None:
    stages = _stages(smoke["doc"])
    for key in APEX_STAGES:
        assert stages[key]["status"] == "SKIP"
        assert "CUDA-only" in stages[key]["reason"] and "needs FusedAdam" in stages[key]["reason"]
        assert stages[key]["timing"] is None
    assert all(c["status"] == "SKIP" and c["reason"] for c in smoke["doc"]["stage_comparisons"])


def test_native_stages_train_the_same_model(smoke: dict) -> None:
    doc = smoke["doc"]
    stages = _stages(doc)
    vocab = doc["config"]["vocab"]
    base = stages["adam-fp32"]
    for key in NATIVE_STAGES:
        s = stages[key]
        assert s["status"] == "OK", s["reason"]
        assert s["loss_steps"] == 4 and all(math.isfinite(v) for v in s["losses"])
        # same init and batches: step 1 sees the same untrained model, near-uniform predictions
        assert s["loss_first"] == pytest.approx(base["loss_first"], rel=1e-2)
        assert abs(s["loss_first"] - math.log(vocab)) < 0.5
        assert s["loss_consistent"] is True
        assert abs(s["loss_final"] - base["loss_final"]) / base["loss_final"] <= LOSS_REL_TOL
        assert s["timing"]["median_ms"] > 0 and s["speedup_vs_baseline"] > 0
    # both FP32 (TF32 does nothing on a CPU) with the same update rule: nearly identical losses
    assert stages["native-tf32"]["loss_final"] == pytest.approx(base["loss_final"], rel=1e-4)
    assert doc["stage_baseline"] == "adam-fp32" and base["speedup_vs_baseline"] == 1.0


def test_microbenchmarks_time_natives_and_skip_apex(smoke: dict) -> None:
    doc = smoke["doc"]
    assert doc["copy_bandwidth"]["status"] == "OK" and doc["copy_bandwidth"]["GBps"] > 0
    optimizer, norms = doc["micro"]["optimizer"], doc["micro"]["norm"]
    assert len(optimizer) == 2 and optimizer[0]["case"].startswith("60 x Linear(")
    assert len(norms) == 2 * 2 * 2  # shapes x dtypes x (LayerNorm, RMSNorm)
    for item in optimizer + norms:
        fused = item["fused"]
        assert fused["name"].startswith("apex") and fused["status"] == "SKIP" and fused["reason"]
        natives = item["natives"]
        assert natives and all(i["status"] == "OK" for i in natives)
        for figure in ("kernel_time", "host_inclusive"):  # both figures for every native that ran
            assert all(i[figure]["median_ms"] > 0 and i["GBps"][figure] > 0 for i in natives)
            assert item[figure] is None and item["winner"][figure] is None  # no Apex, no verdict
        assert item["verdict"].startswith("no comparison: apex")
        host = item["host"]  # timed as verify's timing worker times: one core, one torch thread
        assert host["cpu"] in os.sched_getaffinity(0) and host["torch_threads"] == 1, host
    assert {n["dtype"] for n in norms} == {"fp32", "bf16"}
    assert optimizer[0]["bytes"] == 28 * optimizer[0]["params"]


def test_markdown_has_headline_table_and_kernel_tables(smoke: dict) -> None:
    md = smoke["md"]
    assert "| 1 | Adam + FP32 |" in md and "| 5 | native: AdamW(fused)" in md
    assert "SKIP: needs FusedAdam" in md
    assert (
        "Copy bandwidth ceiling" in md and "### Optimizer step" in md and "### Norm forward + backward" in md
    )
    assert "CPU smoke run" in md


def test_plots_are_written_when_matplotlib_is_installed(smoke: dict) -> None:
    pytest.importorskip("matplotlib")
    doc, out = smoke["doc"], smoke["out"]
    assert set(doc["plots"]) == {"stages.png", "losses.png", "kernels.png"}
    for name in doc["plots"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![stages.png](stages.png)" in smoke["md"]


@pytest.mark.slow
def test_no_plots_and_stage_selection(tmp_path: Path) -> None:
    proc = _run([*TINY, "--out", str(tmp_path), "--stages", "1,native-tf32", "--no-micro", "--no-plots"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert [s["key"] for s in doc["stages"]] == ["adam-fp32", "native-tf32"]
    assert doc["micro"] == {"optimizer": [], "norm": []} and doc["copy_bandwidth"] is None
    assert doc["plots"] == [] and not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--steps", "0"], "--steps"),
        (["--layers", "two"], "--layers"),
        (["--stages", "9"], "unknown stage '9'"),
        (["--stages", "fusedadm-fp32"], "did you mean 'fusedadam-fp32'"),
        (["--big-params", "lots"], "--big-params"),
        (["--device", "tpu"], "--device"),
        (["--d-model", "100"], "--d-model"),
        (["--frobnicate"], "--frobnicate"),
    ],
)
def test_bad_flags_exit_2_with_one_line(
    args: list[str], names: str, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    code = cli.main(
        [*args, "--device", "cpu", "--out", str(tmp_path)]
        if "--device" not in args
        else [*args, "--out", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == exit_codes.USAGE
    assert err.startswith("verify bench: error:") and err.count("\n") == 1, err
    assert names in err


def test_out_path_that_is_a_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    target = tmp_path / "taken"
    target.write_text("x")
    assert cli.main(["--device", "cpu", "--out", str(target)]) == exit_codes.USAGE
    assert "--out" in capsys.readouterr().err


def test_bad_flag_through_the_verify_entry_point() -> None:
    proc = _run(["--steps", "-3"])
    assert proc.returncode == exit_codes.USAGE
    assert proc.stderr.strip().count("\n") == 0 and "--steps" in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_no_cuda_without_device_cpu_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["--out", str(tmp_path)]) == exit_codes.ENVIRONMENT
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "--device cpu" in err and err.count("\n") == 1
    assert not (tmp_path / "bench.json").exists()


def test_help_exits_0(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["--help"]) == 0
    assert "--big-params" in capsys.readouterr().out
