"""The benchmark's pieces on real torch (CPU): byte models, flag parsing, the model, flag restoring,
skip reasons, and the fused-vs-native comparison logic."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from torch import nn

from verify.bench import cli, micro, results, stages
from verify.bench import model as gpt
from verify.bench.apex_parts import ApexPart
from verify.bench.config import PRESETS, BenchConfig
from verify.timing import kernel_variants
from verify.timing.cuda_timer import Timing
from verify.timing.kernel_compare import Variant


def _cfg(**over: Any) -> BenchConfig:  # any of BenchConfig's fields, each its own type
    args = ["--device", "cpu", "--out", "/tmp/unused-bench-out"]
    return dataclasses.replace(cli.parse_config(args), **over)


def test_byte_models() -> None:
    assert micro.adam_step_bytes(1000) == 28_000
    # LayerNorm fp32, 16384 x 1024: 5 activation passes + mean/rstd written and read + 5 parameter vectors
    assert micro.norm_fwd_bwd_bytes(16384, 1024, 4, has_bias=True, stats_per_row=2) == (
        5 * 16384 * 1024 * 4 + 2 * 2 * 16384 * 4 + 5 * 1024 * 4
    )
    assert (
        micro.norm_fwd_bwd_bytes(10, 8, 2, has_bias=False, stats_per_row=1)
        == 5 * 10 * 8 * 2 + 2 * 10 * 4 + 3 * 8 * 2
    )
    assert micro.copy_bytes_moved(2**31) == 2**32


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("250M", 250_000_000),
        ("1.5e8", 150_000_000),
        ("2.5G", 2_500_000_000),
        ("300_000_000", 300_000_000),
        ("64k", 64_000),
    ],
)
def test_param_counts(text: str, value: int) -> None:
    assert cli.parse_param_count(text) == value


@pytest.mark.parametrize("text", ["", "lots", "-5M", "0"])
def test_bad_param_counts(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cli.parse_param_count(text)


def test_stage_selection_keeps_benchmark_order() -> None:
    assert cli.parse_stages("native-tf32,1,5") == ("adam-fp32", "native-bf16", "native-tf32")
    assert cli.parse_stages("all") == tuple(s.key for s in stages.STAGES)
    assert cli.parse_stages("none") == ()


def test_presets_and_flag_overrides() -> None:
    cfg = cli.parse_config(["--device", "cpu", "--steps", "7", "--big-params", "1M"])
    assert cfg.preset == "cpu-smoke" and cfg.steps == 7 and cfg.big_params == 1_000_000
    assert cfg.d_model == PRESETS["cpu-smoke"]["d_model"]
    quick = cli.parse_config(["--quick", "--layers", "3"])
    assert quick.preset == "quick" and quick.layers == 3 and quick.seq == PRESETS["quick"]["seq"]
    default = cli.parse_config([])
    assert default.preset == "default" and default.big_params >= 250_000_000
    assert default.norm_shapes == ((32, 512, 1024), (16384, 4096))
    assert default.heads * default.head_dim == default.d_model


def test_model_forward_and_pluggable_norm() -> None:
    made: list[int] = []

    def norm(d: int) -> nn.Module:
        made.append(d)
        return nn.LayerNorm(d)

    torch.manual_seed(0)
    net = gpt.build(vocab=50, seq=12, d_model=32, layers=3, heads=2, norm=norm)
    assert made == [32] * (2 * 3 + 1)  # two per block + the final one
    idx = torch.randint(0, 50, (2, 12))
    logits = net(idx)
    assert logits.shape == (2, 12, 50)
    loss = gpt.lm_loss(logits, idx)
    assert torch.isfinite(loss)
    assert net.head.weight is net.tok.weight  # tied: counted once
    assert gpt.param_count(net) == sum(p.numel() for p in set(net.parameters()))


def test_batches_are_random_tokens_and_repeatable() -> None:
    cfg = _cfg()
    a, b = stages.make_batches(cfg, torch.device("cpu")), stages.make_batches(cfg, torch.device("cpu"))
    assert torch.equal(a, b)
    assert a.shape == (4, cfg.batch, cfg.seq + 1) and a.unique().numel() > cfg.vocab // 2


def test_initial_state_is_the_same_for_every_call() -> None:
    cfg = _cfg()
    s1, s2 = stages.initial_state(cfg), stages.initial_state(cfg)
    assert s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)


@pytest.mark.parametrize("precision", ["tf32", "fp32", "bf16"])
def test_precision_flags_are_restored(precision: str) -> None:
    before = (
        torch.get_float32_matmul_precision(),
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )
    with pytest.raises(RuntimeError), stages.precision_flags(precision):
        assert torch.backends.cuda.matmul.allow_tf32 is (precision == "tf32")
        assert torch.get_float32_matmul_precision() == ("high" if precision == "tf32" else "highest")
        raise RuntimeError("a stage that fails must not leave TF32 on")
    after = (
        torch.get_float32_matmul_precision(),
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )
    assert after == before


def test_apex_stage_skips_with_every_distinct_reason() -> None:
    apex = {
        "FusedAdam": ApexPart("FusedAdam", False, "Apex is not installed"),
        "FusedLayerNorm": ApexPart(
            "FusedLayerNorm", False, "extension fused_layer_norm_cuda does not import"
        ),
    }
    cfg = _cfg()
    run = stages.run_stage(
        stages.stage_by_key("fusedadam-fusedln-fp32"), cfg, torch.device("cpu"), {}, torch.zeros(1), apex
    )
    assert run.status == "SKIP"
    assert run.reason == (
        "needs FusedAdam: Apex is not installed; "
        "needs FusedLayerNorm: extension fused_layer_norm_cuda does not import"
    )


def _timing(name: str, median: float) -> Timing:
    samples = tuple(median * f for f in (0.98, 0.99, 1.0, 1.0, 1.01, 1.02, 0.995))
    return Timing(
        name=name,
        median_ms=median,
        p10_ms=median * 0.99,
        p90_ms=median * 1.01,
        min_ms=median * 0.98,
        iters=len(samples),
        device="cpu",
        samples=samples,
    )


def test_stage_comparisons_say_who_wins_with_an_interval() -> None:
    def run(key: str, median: float) -> stages.StageRun:
        return stages.StageRun(stages.stage_by_key(key), "OK", timing=_timing(key, median), losses=[1.0])

    # the comparisons are JSON rows (dict[str, object]): read here as the report's values
    out: list[dict[str, Any]] = stages._comparisons(
        {"adam-fp32": run("adam-fp32", 100.0), "fusedadam-fp32": run("fusedadam-fp32", 80.0)}
    )
    assert len(out) == 1 and out[0]["status"] == "OK" and out[0]["figure"] == "host_inclusive"
    assert out[0]["speedup"] == pytest.approx(1.25) and out[0]["winner"] == "fused"
    lo, hi = out[0]["interval"]
    assert lo < 1.25 < hi and lo > 1.1  # well outside the tie band of the host-inclusive figure
    assert out[0]["verdict"].startswith("per training step fusedadam-fp32 is 1.25x faster")
    tie: list[dict[str, Any]] = stages._comparisons(
        {"adam-fp32": run("adam-fp32", 100.0), "fusedadam-fp32": run("fusedadam-fp32", 99.5)}
    )
    assert tie[0]["winner"] == "tie" and tie[0]["verdict"].startswith("per training step they tie (1.01x")


def _norm_variants(rows: int = 64, hidden: int = 128) -> list:
    x = torch.randn(rows, hidden, requires_grad=True)
    dy = torch.randn(rows, hidden)
    weight, bias = torch.rand(hidden) + 0.5, torch.rand(hidden) - 0.5
    # nn.LayerNorm on both sides: the comparison machinery on real torch, no Apex needed
    return kernel_variants.norm_variants("fused_layer_norm", x, dy, weight, bias, nn.LayerNorm)


def test_compare_times_real_kernels_and_reports_bandwidth_per_figure() -> None:
    cfg = _cfg(micro_rounds=3)
    n_bytes = micro.norm_fwd_bwd_bytes(64, 128, 4, has_bias=True, stats_per_row=2)
    item: dict[str, Any] = micro._compare(
        "FusedLayerNorm",
        "(64, 128) fp32",
        n_bytes,
        _norm_variants(),
        cfg,
        torch.device("cpu"),
        copy_gbps=10.0,
    )
    assert item["status"] == "OK" and item["bytes"] == n_bytes
    named = [i["name"] for i in results.implementations(cast(results.MicroItemJSON, item))]
    assert named == ["apex FusedLayerNorm", "torch nn.LayerNorm"]
    for figure in ("kernel_time", "host_inclusive"):
        assert item[figure]["speedup"] > 0 and item["winner"][figure] in ("fused", "native", "tie")
        assert len(item[figure]["ratios"]) == 3  # --micro rounds
        for impl in results.implementations(cast(results.MicroItemJSON, item)):
            gbps, pct = impl["GBps"][figure], impl["pct_of_copy"][figure]
            assert gbps is not None and gbps > 0
            assert pct == pytest.approx(100 * gbps / 10.0, rel=2e-2)
    assert item["verdict"]


def test_compare_records_a_failing_implementation() -> None:
    cfg = _cfg(micro_rounds=2)

    def broken():
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device\nmore")

    variants = [Variant("apex K", "fused", broken), Variant("native K", "native", lambda: lambda: None)]
    item: dict[str, Any] = micro._compare("K", "case", 8, variants, cfg, torch.device("cpu"), copy_gbps=None)
    assert item["status"] == "FAIL"
    assert (
        item["fused"]["reason"]
        == "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    )
    native = item["natives"][0]
    assert native["status"] == "OK" and native["pct_of_copy"]["host_inclusive"] is None
    assert item["verdict"].startswith("no comparison: apex K FAIL (RuntimeError")


def test_markdown_renders_both_figures_and_the_winners() -> None:
    import datetime

    cfg = _cfg(micro_rounds=2)
    item: dict[str, Any] = micro._compare(
        "FusedLayerNorm", "(64, 128) fp32", 1000, _norm_variants(), cfg, torch.device("cpu"), copy_gbps=200.0
    )
    doc = results.build(
        cfg_json=cfg.to_json(),
        environment={
            "headline": {
                "device": "cuda:0",
                "gpu": "H200",
                "torch": "2.11",
                "cuda": "13.0",
                "python": "3.12",
                "apex_commit": None,
            }
        },
        apex={},
        timer="cuda_events",
        copy={"status": "OK", "bytes": 2**31, "GBps": 200.0},
        stages={"baseline": None, "loss_rel_tol": 0.05, "stages": [], "comparisons": []},
        optimizer=[],
        norms=[item],
        started=datetime.datetime(2026, 1, 1),
        duration_s=1.0,
    )
    md = results.markdown(doc)
    assert "| kernel | case | implementation | kernel ms (p10–p90) | loop ms (p10–p90) |" in md
    winners = item["winner"]
    assert (
        f"- FusedLayerNorm (64, 128) fp32: {item['verdict']} (winner: kernel {winners['kernel_time']}, "
        f"loop {winners['host_inclusive']})"
    ) in md
    kernel_ms = item["natives"][0]["kernel_time"]["median_ms"]
    assert f"| FusedLayerNorm | (64, 128) fp32 | torch nn.LayerNorm | {kernel_ms:.3f} (" in md
    assert "200.0 GB/s (2 GiB device-to-device copy" in md and "Bandwidth is from the kernel time" in md
    assert "CPU smoke run" not in md


def test_compiled_stages_are_the_eager_recipes_compiled_and_skip_a_cpu_smoke_run() -> None:
    compiled = [s for s in stages.STAGES if s.compiled]
    assert [s.key for s in compiled] == ["native-bf16-compiled", "apex-bf16-compiled"]
    # each is an eager stage's recipe (optimizer, norm, precision) run as torch.compile(model)
    eager = {(s.optimizer, s.norm, s.precision): s.key for s in stages.STAGES if not s.compiled}
    assert [eager[(s.optimizer, s.norm, s.precision)] for s in compiled] == ["native-bf16", "apex-bf16"]
    pairs = {(a, n) for a, n, _ in stages.COMPARISONS}
    assert ("apex-bf16-compiled", "native-bf16-compiled") in pairs
    cpu = torch.device("cpu")
    stage7 = stages.stage_by_key("native-bf16-compiled")
    assert (
        stages.compile_skip(stage7, cpu) == "compiled stages run on CUDA only (--device cpu is a smoke run)"
    )
    assert stages.compile_skip(stages.stage_by_key("native-bf16"), cpu) == ""
    run = stages.run_stage(stage7, _cfg(), cpu, {}, torch.zeros(1), {})
    assert (run.status, run.timing) == ("SKIP", None) and "CUDA only" in run.reason


@pytest.mark.slow
def test_a_compiled_stage_trains_like_its_eager_twin_on_the_cpu() -> None:
    torch.set_num_threads(1)
    cfg = _cfg(steps=3, warmup=0, stages=("native-bf16", "native-bf16-compiled"))
    state, batches = stages.initial_state(cfg), stages.make_batches(cfg, torch.device("cpu"))
    eager = stages.run_stage(stages.stage_by_key("native-bf16"), cfg, torch.device("cpu"), state, batches, {})
    compiled = stages.run_stage(
        stages.stage_by_key("native-bf16-compiled"),
        cfg,
        torch.device("cpu"),
        state,
        batches,
        {},
        compile_on_cpu=True,
    )
    if any(c.isspace() for c in str(Path(torch.__file__).parent)):  # a checkout in "a folder with spaces"
        assert compiled.status == "SKIP" and "path with a space" in compiled.reason, compiled.reason
        return
    assert compiled.status == "OK", compiled.reason
    # warm-up 0 asked, but the compile happens in warm-up steps: 2 of them, so 2 + 3 losses
    assert len(compiled.losses) == stages.COMPILED_MIN_WARMUP + 3 and len(eager.losses) == 3
    assert compiled.timing is not None and compiled.timing.iters == 3
    assert compiled.losses[0] == pytest.approx(eager.losses[0], rel=2e-2)  # same weights, same first batch
