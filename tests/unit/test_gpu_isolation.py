"""verify isolation: a check that kills, hangs or breaks its worker costs that check, not the report.

Real subprocesses on the CPU: the torch-free selftest groups run through the same worker and runner as
the GPU groups, and VERIFY_FAULT_INJECT makes a chosen case abort, hang, raise or exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from verify.checks import Status
from verify.gpu import runner
from verify.gpu.cases import case_seed
from verify.gpu.worker import FAULT_ENV

SEED = 20260708


def _by_name(result):
    return {c.name: c for c in result.checks}


def test_a_healthy_group_runs_every_case_in_one_worker(monkeypatch):
    monkeypatch.delenv(FAULT_ENV, raising=False)
    result = runner.run_group("selftest", SEED, check_timeout_s=30)
    assert [(c.name, c.status) for c in result.checks] == [
        ("selftest.first", Status.PASS),
        ("selftest.second", Status.PASS),
        ("selftest.third", Status.PASS),
    ]
    assert len(result.workers) == 1 and result.workers[0]["exit"] == "exit code 0"
    assert all(c.details["seed"] == SEED for c in result.checks)
    # the results crossed the process boundary intact: recompute what each worker case computed
    for check in result.checks:
        values = [(case_seed(SEED, check.name) >> shift) % 97 for shift in range(0, 48, 4)]
        assert check.details["total"] == sum(v * v for v in values)
    assert {c.details["pid"] for c in result.checks} != {os.getpid()}


def test_a_crash_fails_that_case_and_the_rest_run_in_a_fresh_worker(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "selftest.second:crash")
    result = runner.run_group("selftest", SEED, check_timeout_s=30)
    checks = _by_name(result)
    assert checks["selftest.first"].status is Status.PASS
    assert checks["selftest.third"].status is Status.PASS
    crashed = checks["selftest.second"]
    assert crashed.status is Status.FAIL
    assert "SIGABRT" in crashed.summary and crashed.details["worker_exit"] == "killed by SIGABRT"
    assert "injecting fault 'crash'" in crashed.details["stderr_tail"]
    assert len(result.workers) == 2
    assert checks["selftest.first"].details["pid"] != checks["selftest.third"].details["pid"]


def test_a_hang_is_killed_at_the_check_timeout(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "selftest.first:hang")
    started = time.monotonic()
    result = runner.run_group("selftest", SEED, check_timeout_s=1.5)
    elapsed = time.monotonic() - started
    checks = _by_name(result)
    hung = checks["selftest.first"]
    assert hung.status is Status.FAIL and "did not finish within 1.5 s" in hung.summary
    assert hung.details["worker_exit"] == "killed by SIGKILL" and hung.duration_s >= 1.4
    assert checks["selftest.second"].status is Status.PASS and checks["selftest.third"].status is Status.PASS
    assert elapsed < 15


def test_an_exception_is_one_fail_and_the_worker_goes_on(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "selftest.second:raise")
    result = runner.run_group("selftest", SEED, check_timeout_s=30)
    checks = _by_name(result)
    failed = checks["selftest.second"]
    assert failed.status is Status.FAIL
    assert failed.summary.startswith(
        "selftest.second raised InjectedFault: injected fault at selftest.second"
    )
    assert "Traceback" in failed.details["traceback_tail"]
    assert checks["selftest.first"].status is checks["selftest.third"].status is Status.PASS
    assert len(result.workers) == 1


def test_an_exit_in_a_case_reports_the_exit_code(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "selftest.third:exit")
    result = runner.run_group("selftest", SEED, check_timeout_s=30)
    checks = _by_name(result)
    assert (
        checks["selftest.third"].status is Status.FAIL and "exit code 7" in checks["selftest.third"].summary
    )
    assert checks["selftest.first"].status is Status.PASS


def test_a_group_name_targets_its_first_case(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "selftest:raise")
    checks = _by_name(runner.run_group("selftest", SEED, check_timeout_s=30))
    assert [checks[n].status for n in ("selftest.first", "selftest.second", "selftest.third")] == [
        Status.FAIL,
        Status.PASS,
        Status.PASS,
    ]


def test_a_worker_that_dies_in_setup_is_one_fail_naming_what_did_not_run(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "selftest.setup:crash")
    result = runner.run_group("selftest", SEED, check_timeout_s=30)
    assert len(result.checks) == 1 and len(result.workers) == 1  # no retry: setup would die again
    check = result.checks[0]
    assert check.name == "selftest.setup" and check.status is Status.FAIL
    assert "died during setup (killed by SIGABRT)" in check.summary
    assert check.details["not_run"] == ["selftest.first", "selftest.second", "selftest.third"]


def test_restarts_are_capped_and_what_is_left_is_named(monkeypatch):
    monkeypatch.setattr(runner, "MAX_WORKERS_PER_GROUP", 1)
    monkeypatch.setenv(FAULT_ENV, "selftest.first:crash")
    result = runner.run_group("selftest", SEED, check_timeout_s=30)
    checks = _by_name(result)
    assert checks["selftest.first"].status is Status.FAIL
    left = checks["selftest.not_run"]
    assert left.status is Status.FAIL and left.details["not_run"] == ["selftest.second", "selftest.third"]
    assert "2 selftest check(s) not run" in left.summary


def test_other_groups_survive_a_crashed_group(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "selftest.setup:crash")
    results = runner.run_groups(["selftest", "selftest_peer"], SEED, check_timeout_s=30)
    assert [r.group for r in results] == ["selftest", "selftest_peer"]
    assert results[0].checks[0].status is Status.FAIL
    assert [(c.name, c.status) for c in results[1].checks] == [("selftest_peer.only", Status.PASS)]


def _worker(*args: str, env_fault: str | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ)
    env.pop(FAULT_ENV, None)
    if env_fault:
        env[FAULT_ENV] = env_fault
    return subprocess.run(
        [sys.executable, "-m", "verify.gpu.worker", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "fault", "code", "message"),
    [
        (("nope", "--seed", "1"), None, 2, "unknown group 'nope': use one of parity_adam"),
        (("selftest", "--seed", "1", "--cases", "bogus"), None, 2, "--cases bogus: not in group selftest"),
        (("selftest", "--seed", "1"), "selftest:explode", 2, "is not TARGET:MODE with MODE one of crash"),
    ],
)
def test_worker_usage_errors_are_one_line_and_exit_2(args, fault, code, message):
    done = _worker(*args, env_fault=fault)
    assert done.returncode == code
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_a_gpu_group_without_cuda_exits_3_with_the_reason():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    done = _worker("parity_adam", "--seed", "1")
    assert done.returncode == 3
    assert "no CUDA device visible to torch" in done.stderr and "Traceback" not in done.stderr


def test_the_protocol_is_json_lines_on_stdout():
    import json

    done = _worker("selftest", "--seed", "5", "--cases", "selftest.third")
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["event"] for e in events] == ["ready", "start", "result", "done"]
    assert events[2]["check"]["id"] == "parity.selftest.third"


def test_a_broken_cuda_context_hands_the_rest_to_a_fresh_worker(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "selftest.first:poison")
    result = runner.run_group("selftest", SEED, check_timeout_s=30)
    checks = _by_name(result)
    assert checks["selftest.first"].status is Status.FAIL
    assert "broken after this case" in checks["selftest.first"].details["cuda_context"]
    assert checks["selftest.second"].status is checks["selftest.third"].status is Status.PASS
    assert (
        len(result.workers) == 2
        and result.workers[0]["exit"] == "exit code 1"
        and "poisoned" in result.workers[0]
    )


def test_a_held_worker_sets_up_then_waits_for_release(monkeypatch):
    """The exclusive timing group's worker starts beside the parity groups but runs nothing until released."""
    monkeypatch.delenv(FAULT_ENV, raising=False)
    worker = runner._Worker("selftest", SEED, ["selftest.first", "selftest.second"], hold=True)
    try:
        deadline = time.monotonic() + 30
        while not worker.events.queue and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # a worker that did not wait would have started its cases by now
        events = [event["event"] for _tag, event in list(worker.events.queue) if event]
        assert events == ["ready"]  # set up, and held: no case started
        started = time.monotonic()
        result = runner.run_group(
            "selftest", SEED, 30, ["selftest.first", "selftest.second"], first_worker=worker
        )
    finally:
        worker.kill()
        worker.finish()
    assert [c.status for c in result.checks] == [Status.PASS, Status.PASS]
    assert len(result.workers) == 1 and result.workers[0]["pid"] == worker.proc.pid  # no second process
    assert time.monotonic() - started < 10
