"""An Apex whose FusedAdam or FusedLayerNorm returns a slightly wrong result FAILs the full run.

tests/gpu/wrong_result/sitecustomize.py wraps the real, compiled classes so that their results move by
4x the parity rtol of their dtype; `python -m verify` then runs as a user runs it. The same build without
the wrapper passes (test_gpu_layers.py::test_full_gpu_layers_all_pass).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, importable
from verify.runtime import exit_codes

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

WRAPPER = Path(__file__).resolve().parent / "wrong_result"


@pytest.fixture(autouse=True)
def compiled_apex() -> None:
    usable = importable(("amp_C", "fused_layer_norm_cuda"))
    if usable != {"amp_C", "fused_layer_norm_cuda"}:
        pytest.fail(
            f"a GPU host with an Apex that lacks its CUDA extensions (importable: {sorted(usable)}): "
            "the gpu tier needs Apex built with APEX_CPP_EXT=1 APEX_CUDA_EXT=1"
        )


def _verify(tmp_path: Path, wrong: str) -> tuple[int, dict[str, dict]]:
    report = tmp_path / f"wrong-{wrong or 'none'}.json"
    env = dict(
        os.environ,
        VERIFY_TEST_WRONG_RESULT=wrong,
        PYTHONPATH=os.pathsep.join([str(WRAPPER), str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "verify",
            "--json",
            str(report),
            "--seed",
            str(random.SystemRandom().randrange(2**31)),
            "--quiet",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    print(done.stdout[-4000:], done.stderr[-2000:])
    data = json.loads(report.read_text())
    return done.returncode, {c["id"]: c for c in data["checks"]}


def test_a_fused_adam_that_is_slightly_wrong_fails_the_run(tmp_path: Path) -> None:
    code, checks = _verify(tmp_path, "fused_adam")
    assert code == exit_codes.FAILED
    adam = {k: v for k, v in checks.items() if k.startswith("parity.fused_adam.")}
    assert len(adam) == 6 and all(c["status"] == "FAIL" for c in adam.values()), adam
    norms = {k: v for k, v in checks.items() if k.startswith("parity.fused_layer_norm.")}
    assert norms and all(c["status"] == "PASS" for c in norms.values())  # only what was made wrong fails


def test_a_fused_layer_norm_that_is_slightly_wrong_fails_the_run(tmp_path: Path) -> None:
    code, checks = _verify(tmp_path, "fused_layer_norm")
    assert code == exit_codes.FAILED
    norms = {k: v for k, v in checks.items() if k.startswith("parity.fused_layer_norm.")}
    assert len(norms) == 6 and all(c["status"] == "FAIL" for c in norms.values()), norms
    assert all(c["status"] == "PASS" for k, c in checks.items() if k.startswith("parity.fused_adam."))
