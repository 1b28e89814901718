"""verify --distributed on the CPU: real rank processes over gloo, real hangs, deaths and timeouts.

The VERIFY_DISTRIBUTED_CPU test hook runs the layer's own launcher, rendezvous and rank processes with
gloo on the CPU; VERIFY_FAULT_INJECT makes one rank hang before a collective (so its peer waits inside
it), die, or fail to start. Every test checks that no rank process is left behind, by a token in the
environment the ranks inherit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from tests.support import REPO, leftover_processes, rank_token
from verify.checks import Check, Status
from verify.distributed import launcher, run_distributed_layer
from verify.distributed.cases import CASES
from verify.distributed.merge import merge
from verify.distributed.plan import CPU_HOOK_ENV, cpu_hook_ranks, plan
from verify.gpu.worker import FAULT_ENV
from verify.report import assemble as report_mod

# slow: subprocess runs and waited-out hangs; TIER=slow (CI), not make test
pytestmark = pytest.mark.slow

SEED = 20261201
ALL_MODULES = frozenset(m for c in CASES for m in c.needs)


@pytest.fixture
def token(monkeypatch) -> str:
    return rank_token(monkeypatch)


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def _cpu_layer(monkeypatch, ranks: int = 2, **kwargs):
    monkeypatch.setenv(CPU_HOOK_ENV, str(ranks))
    return run_distributed_layer(
        requested=True, device_count=0, usable_modules=ALL_MODULES, seed=SEED, **kwargs
    )


# --- deciding what runs: pure, from real inputs ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "seen"), [(0, "no CUDA device is visible"), (1, "1 CUDA device is visible")]
)
def test_one_gpu_or_none_makes_every_check_skip_with_the_reason(token, count, seen):
    decided = plan(count, ALL_MODULES)
    assert decided.topology is None and decided.to_run == ()
    assert [c.name for c in decided.skipped] == [c.name for c in CASES]
    for check in decided.skipped:
        assert check.status is Status.SKIP and check.layer == "distributed"
        assert seen in check.summary and "need 2 or more" in check.summary
    results = run_distributed_layer(
        requested=True, device_count=count, usable_modules=ALL_MODULES, seed=SEED, check_timeout_s=5
    )
    assert [c.status for c in results.checks] == [Status.SKIP] * len(CASES)
    assert results.block["ran"] is False and seen in results.block["skip_reason"]
    assert leftover_processes(token) == []


def test_no_distributed_means_no_checks_and_no_block(token):
    results = run_distributed_layer(
        requested=False, device_count=8, usable_modules=ALL_MODULES, seed=SEED, check_timeout_s=5
    )
    assert results.checks == [] and results.block is None


def test_several_gpus_run_what_the_build_has_and_skip_the_rest():
    full = plan(8, ALL_MODULES)
    assert (full.topology.world_size, full.topology.backend, full.topology.device) == (8, "nccl", "cuda")
    assert [c.name for c in full.to_run] == [c.name for c in CASES] and full.skipped == ()
    core_only = plan(2, frozenset({"amp_C", "fused_layer_norm_cuda"}))
    assert [c.name for c in core_only.to_run] == ["all_reduce.correctness", "all_reduce.bandwidth"]
    skipped = _by_name(list(core_only.skipped))
    assert "needs syncbn (SyncBatchNorm)" in skipped["syncbn.forward.fp32"].summary
    assert "needs distributed_adam_cuda" in skipped["distributed_fused_adam.step"].summary
    assert skipped["distributed_fused_adam.step"].details["missing"] == ["distributed_adam_cuda"]


def test_the_cpu_hook_takes_a_rank_count_of_two_or_more():
    assert cpu_hook_ranks({}) is None
    assert cpu_hook_ranks({CPU_HOOK_ENV: "3"}) == 3
    for bad in (
        "1",
        "two",
        "-2",
        "17",
        "100000",
        "１２",
    ):  # 100000 would start rank processes until the limit
        with pytest.raises(ValueError, match=f"{CPU_HOOK_ENV}=.*from 2 to 16"):
            cpu_hook_ranks({CPU_HOOK_ENV: bad})
    decided = plan(8, ALL_MODULES, cpu_ranks=2)
    assert (decided.topology.backend, decided.topology.world_size) == ("gloo", 2)
    assert {c.name for c in decided.skipped} == {c.name for c in CASES if c.needs_cuda}
    assert all("needs CUDA" in c.summary for c in decided.skipped)


def test_merge_lets_the_worst_and_first_failing_rank_speak():
    def view(rank: int, status: Status, summary: str, duration: float = 1.0) -> Check:
        return Check("distributed", "x", status, summary, {"rank": rank}, duration)

    ok = merge("x", {0: view(0, Status.PASS, "fine"), 1: view(1, Status.PASS, "fine")}, 2)
    assert (ok.status, ok.summary) == (Status.PASS, "fine (all 2 ranks)")
    one = merge(
        "x",
        {0: view(0, Status.PASS, "fine"), 1: view(1, Status.FAIL, "wrong sum"), 2: view(2, Status.PASS, "")},
        3,
    )
    assert (one.status, one.summary) == (Status.FAIL, "rank 1 FAIL: wrong sum")
    assert [r["status"] for r in one.details["ranks"]] == ["PASS", "FAIL", "PASS"]
    both = merge(
        "x", {0: view(0, Status.FAIL, "timed out waiting", 4.0), 1: view(1, Status.FAIL, "injected", 0.1)}, 2
    )
    assert both.summary == "injected (rank 1, the first to fail; rank 0 FAILed too)"


# --- real rank processes over gloo --------------------------------------------------------------------------


def test_two_cpu_ranks_rendezvous_and_every_rank_reports(monkeypatch, token):
    results = _cpu_layer(monkeypatch, check_timeout_s=30)
    checks = _by_name(results.checks)
    correct = checks["all_reduce.correctness"]
    assert correct.status is Status.PASS, correct.summary
    assert [r["rank"] for r in correct.details["ranks"]] == [0, 1]
    cases = correct.details["ranks"][1]["details"]["cases"]
    assert {(c["dtype"], c["numel"]) for c in cases} == {
        (d, n) for d in ("fp32", "bf16") for n in (1, 1023, 2**20 + 7)
    }
    assert all(c["wrong"] == 0 for c in cases)
    bandwidth = checks["all_reduce.bandwidth"]
    figures = bandwidth.details["figures"]
    assert bandwidth.status is Status.INFO and figures["bytes"] == 4 * 2**20 and figures["busbw_gbps"] > 0
    assert figures["median_ms"] == max(figures["rank_median_ms"]) and len(figures["rank_median_ms"]) == 2
    assert all(checks[c.name].status is Status.SKIP for c in CASES if c.needs_cuda)
    block = results.block
    assert block["ran"] and block["world_size"] == 2 and block["backend"] == "gloo"
    pids = {r["pid"] for r in block["ranks"]}
    assert len(pids) == 2 and os.getpid() not in pids  # two real processes, not this one
    assert all(
        r["env"]["NCCL_NVLS_ENABLE"] == "0" for r in block["ranks"]
    )  # as each rank saw its environment
    assert [launch["outcome"] for launch in block["launches"]] == ["completed"]
    assert block["all_reduce"] == figures
    assert leftover_processes(token) == []


def test_a_rank_hanging_in_a_collective_is_one_fail_within_the_timeout(monkeypatch, token):
    monkeypatch.setenv(FAULT_ENV, "all_reduce.correctness@1:hang")  # rank 0 waits inside the all-reduce
    started = time.monotonic()
    results = _cpu_layer(monkeypatch, check_timeout_s=3)
    elapsed = time.monotonic() - started
    failed = [c for c in results.checks if c.status is Status.FAIL]
    assert [c.name for c in failed] == ["all_reduce.correctness"]
    hung = failed[0]
    assert (
        "rank 1 did not finish within 3 s" in hung.summary
        and "all 2 rank processes were killed" in hung.summary
    )
    assert hung.details["hung_ranks"] == [1]
    assert hung.duration_s <= 3 + launcher.REPORT_GRACE_S + 2
    assert "injecting fault 'hang'" in hung.details["stderr_tails"]["1"]
    # the check after it ran in a fresh group
    assert _by_name(results.checks)["all_reduce.bandwidth"].status is Status.INFO
    launches = results.block["launches"]
    assert [launch["outcome"] for launch in launches] == ["stopped", "completed"]
    assert launches[0]["ranks"][1]["exit"] == "killed by SIGKILL"
    assert elapsed < 60
    assert leftover_processes(token) == []


def test_the_group_time_limit_stops_a_hang_long_before_the_check_timeout(monkeypatch, token):
    monkeypatch.setenv(FAULT_ENV, "all_reduce.correctness@1:hang")
    started = time.monotonic()
    results = _cpu_layer(monkeypatch, check_timeout_s=300, group_timeout_s=12)
    elapsed = time.monotonic() - started
    checks = _by_name(results.checks)
    assert "before the layer's time limit of 12 s ran out" in checks["all_reduce.correctness"].summary
    not_run = checks["not_run"]
    assert not_run.status is Status.FAIL and not_run.details["not_run"] == ["all_reduce.bandwidth"]
    assert elapsed < 12 + launcher.REPORT_GRACE_S + 3
    assert leftover_processes(token) == []


def test_a_rank_that_dies_is_one_fail_and_the_rest_still_run(monkeypatch, token):
    monkeypatch.setenv(FAULT_ENV, "all_reduce.correctness@0:crash")
    results = _cpu_layer(monkeypatch, check_timeout_s=30)
    checks = _by_name(results.checks)
    died = checks["all_reduce.correctness"]
    assert died.status is Status.FAIL and "rank 0 died (killed by SIGABRT)" in died.summary
    assert checks["all_reduce.bandwidth"].status is Status.INFO
    assert [c.name for c in results.checks if c.status is Status.FAIL] == ["all_reduce.correctness"]
    assert leftover_processes(token) == []


def test_when_a_rank_dies_the_others_get_a_grace_not_the_whole_check_timeout(monkeypatch, token):
    # rank 1 exits inside the check while rank 0 is stuck: the parent stops waiting a grace after the death
    monkeypatch.setenv(FAULT_ENV, "all_reduce.bandwidth@0:hang,all_reduce.bandwidth@1:exit")
    results = _cpu_layer(monkeypatch, check_timeout_s=120)
    failed = _by_name(results.checks)["all_reduce.bandwidth"]
    assert failed.status is Status.FAIL
    assert f"rank 0 still running {launcher.REPORT_GRACE_S:g} s after rank 1 had ended" in failed.summary
    assert "rank 1 died (exit code 7)" in failed.summary
    assert failed.duration_s < launcher.REPORT_GRACE_S + 5
    assert failed.details["hung_ranks"] == [0] and failed.details["died_ranks"] == [1]
    assert _by_name(results.checks)["all_reduce.correctness"].status is Status.PASS
    assert leftover_processes(token) == []


def test_a_rank_that_cannot_start_is_one_setup_fail(monkeypatch, token):
    monkeypatch.setenv(FAULT_ENV, "setup@1:exit")
    results = _cpu_layer(monkeypatch, check_timeout_s=30)
    failed = [c for c in results.checks if c.status is Status.FAIL]
    assert [c.name for c in failed] == ["setup"]
    assert "rank 1 died (exit code 7)" in failed[0].summary
    assert failed[0].details["not_run"] == ["all_reduce.correctness", "all_reduce.bandwidth"]
    assert len(results.block["launches"]) == 1
    assert leftover_processes(token) == []


# --- the CLI ------------------------------------------------------------------------------------------------


def _verify(
    tmp_path: Path, *args: str, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (CPU_HOOK_ENV, FAULT_ENV)}
    env.update(env_extra or {})
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "verify", "--require", "", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _schema_valid(report: dict) -> None:
    schema = json.loads(report_mod.SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator(schema).validate(report)


def test_cli_runs_the_layer_and_writes_it_into_the_report(tmp_path, token):
    done = _verify(
        tmp_path,
        "--distributed",
        "--check-timeout",
        "3",
        "--json",
        "r.json",
        "--markdown",
        "r.md",
        env_extra={CPU_HOOK_ENV: "2", FAULT_ENV: "all_reduce.bandwidth@1:hang"},
    )
    assert "Traceback" not in done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    _schema_valid(report)
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["distributed.all_reduce.correctness"]["status"] == "PASS"
    assert checks["distributed.all_reduce.bandwidth"]["status"] == "FAIL"
    assert "rank 1 did not finish within 3 s" in checks["distributed.all_reduce.bandwidth"]["summary"]
    assert report["options"]["distributed"] == "on" and report["distributed"]["world_size"] == 2
    assert done.returncode == 1 and report["exit_code"] == 1
    assert "FAIL  distributed.all_reduce.bandwidth" in done.stdout
    assert "## Distributed" in (tmp_path / "r.md").read_text()
    assert leftover_processes(token) == []


def test_cli_without_gpus_skips_every_check_and_off_leaves_no_trace(tmp_path, token):
    done = _verify(tmp_path, "--json", "auto.json")
    report = json.loads((tmp_path / "auto.json").read_text())
    _schema_valid(report)
    dist = [c for c in report["checks"] if c["layer"] == "distributed"]
    assert [c["status"] for c in dist] == ["SKIP"] * len(CASES)
    assert report["distributed"]["ran"] is False and report["options"]["distributed"] == "auto"
    assert "SKIP  distributed.all_reduce.correctness" in done.stdout
    _verify(tmp_path, "--no-distributed", "--json", "off.json")
    off = json.loads((tmp_path / "off.json").read_text())
    assert "distributed" not in off and not [c for c in off["checks"] if c["layer"] == "distributed"]


@pytest.mark.parametrize(
    ("args", "env_extra", "says"),
    [
        (("--distributed", "--static"), {}, "--distributed with --static"),
        ((), {CPU_HOOK_ENV: "1"}, f"{CPU_HOOK_ENV}='1': must be a whole number of CPU ranks from 2 to 16"),
        (
            (),
            {CPU_HOOK_ENV: "100000"},
            f"{CPU_HOOK_ENV}='100000': must be a whole number",
        ),  # not 100000 processes
        ((), {CPU_HOOK_ENV: "１２"}, "must be a whole number"),  # a non-ASCII digit
    ],
)
def test_cli_usage_errors_are_one_line_and_exit_2(tmp_path, args, env_extra, says):
    done = _verify(tmp_path, *args, "--json", "r.json", env_extra=env_extra)
    assert done.returncode == 2
    assert done.stderr.startswith("verify: ") and says in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


def test_a_rank_started_by_hand_says_who_starts_it(tmp_path):
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "verify.distributed.rank",
            "--checks",
            "all_reduce.correctness",
            "--seed",
            "1",
            "--timeout",
            "5",
            "--backend",
            "gloo",
            "--device",
            "cpu",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert (
        "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set" in done.stderr and "Traceback" not in done.stderr
    )


def test_a_rank_that_cannot_be_started_stops_the_layer_without_stranding_the_others(
    monkeypatch: pytest.MonkeyPatch, token: str, tmp_path: Path
) -> None:
    # rank 0 starts; the interpreter for rank 1 is gone: a real OSError from Popen
    real_popen = subprocess.Popen
    started: list[subprocess.Popen] = []

    def popen(argv, **kwargs):
        if started:
            argv = [str(tmp_path / "no-such-python"), *argv[1:]]
        proc = real_popen(argv, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen)  # the one Popen every child goes through
    results = _cpu_layer(monkeypatch, check_timeout_s=30)
    stopped = _by_name(results.checks)["all"]
    assert stopped.status is Status.FAIL and "FileNotFoundError" in stopped.summary
    assert stopped.details["not_run"] == ["all_reduce.correctness", "all_reduce.bandwidth"]
    assert len(started) == 1 and started[0].poll() is not None
    assert leftover_processes(token) == []
