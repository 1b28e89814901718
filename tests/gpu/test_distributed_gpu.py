"""verify --distributed on real GPUs: every GPU in one NCCL group, Apex's distributed pieces vs torch.

On one GPU (the H200 test host) the layer is SKIP with the reason; on two or more, every check runs and a
rank hung in a real NCCL collective is one FAIL. Not yet run on a multi-GPU host (see docs/distributed.md).
"""

from __future__ import annotations

import random

import pytest

from tests.support import importable, leftover_processes, rank_token
from verify.checks import Status
from verify.distributed import run_distributed_layer
from verify.distributed.cases import CASES
from verify.gpu.worker import FAULT_ENV

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)
COUNT = torch.cuda.device_count()


def _usable() -> frozenset[str]:
    return importable(m for c in CASES for m in c.needs)


@pytest.fixture
def token(monkeypatch) -> str:
    return rank_token(monkeypatch)


def _layer(**kwargs):
    seed = random.SystemRandom().randrange(2**31)
    results = run_distributed_layer(
        requested=True, device_count=COUNT, usable_modules=_usable(), seed=seed, **kwargs
    )
    for check in results.checks:
        print(f"{check.status.value:4} {check.id}: {check.summary}")
    print(f"seed {seed}; block: {results.block and {k: results.block[k] for k in ('world_size', 'wall_s')}}")
    return results


@pytest.mark.skipif(COUNT != 1, reason="the one-GPU path")
def test_one_gpu_makes_every_distributed_check_skip(token):
    results = _layer(check_timeout_s=60)
    assert [c.status for c in results.checks] == [Status.SKIP] * len(CASES)
    assert all("1 CUDA device is visible" in c.summary for c in results.checks)
    assert results.block["ran"] is False
    assert leftover_processes(token) == []


@pytest.mark.skipif(COUNT < 2, reason="needs 2 or more GPUs")
def test_every_gpu_joins_one_nccl_group_and_apex_matches_torch(token):
    results = _layer(check_timeout_s=120)
    checks = {c.name: c for c in results.checks}
    assert not [c for c in results.checks if c.status is Status.FAIL]
    assert checks["all_reduce.correctness"].status is Status.PASS
    figures = checks["all_reduce.bandwidth"].details["figures"]
    assert figures["bytes"] == 256 * 2**20 and figures["busbw_gbps"] > 0 and figures["timer"] == "CUDA events"
    block = results.block
    assert block["world_size"] == COUNT and block["backend"] == "nccl" and block["nccl_version"]
    assert sorted(r["device"].split()[0] for r in block["ranks"]) == sorted(f"cuda:{i}" for i in range(COUNT))
    assert all(r["env"]["NCCL_NVLS_ENABLE"] == "0" for r in block["ranks"])
    usable = _usable()
    for case in CASES:
        if case.needs_cuda:
            expected = Status.PASS if case.needs <= usable else Status.SKIP
            assert checks[case.name].status is expected, checks[case.name].summary
    assert leftover_processes(token) == []


@pytest.mark.skipif(COUNT < 2, reason="needs 2 or more GPUs")
def test_a_rank_hung_in_an_nccl_collective_is_one_fail(monkeypatch, token):
    monkeypatch.setenv(FAULT_ENV, "all_reduce.correctness@1:hang")
    results = _layer(check_timeout_s=30)
    failed = [c for c in results.checks if c.status is Status.FAIL]
    assert [c.name for c in failed] == ["all_reduce.correctness"]
    assert "rank 1 did not finish within 30 s" in failed[0].summary
    assert {c.name: c for c in results.checks}["all_reduce.bandwidth"].status is Status.INFO
    assert leftover_processes(token) == []
