"""verify isolation through the real CLI, and the security properties that can be shown here.

GPU check groups (parity, timing) run only where torch sees a CUDA device, so on a CPU machine the
crashed-group path is shown by tests/unit/test_gpu_isolation.py (the same runner and worker with the
torch-free selftest groups and VERIFY_FAULT_INJECT) and on the H200 host. What the CLI shows here is
the same isolation one layer earlier: each extension import runs in a child process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support import DOCKERFILE as DOCKERFILE_PATH
from tests.support import REPO, dockerfile
from verify.runtime import exit_codes

DOCKERFILE = DOCKERFILE_PATH.read_text()


def test_an_extension_that_crashes_or_hangs_on_import_is_one_fail_and_the_report_is_written(
    tmp_path: Path,
) -> None:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "amp_C.py").write_text("import os\nos.abort()  # a .so that dies while loading\n")
    (mods / "fused_layer_norm_cuda.py").write_text("import time\ntime.sleep(600)  # one that hangs\n")
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "verify", "--static", "--check-timeout", "4", "--json", str(report), "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": f"{mods}:{REPO}", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == exit_codes.FAILED, result.stdout + result.stderr
    data = json.loads(report.read_text())
    ext = {e["module"]: e for e in data["extensions"]}
    assert "the importing process died (signal 6)" in ext["amp_C"]["error"]
    assert "importing took longer than 4 s" in ext["fused_layer_norm_cuda"]["error"]
    assert ext["apex_C"]["status"] == "missing", "modules after the crash were still probed"
    assert data["verdict"] == "FAIL" and data["exit_code"] == exit_codes.FAILED


def test_every_shipped_target_runs_as_a_numeric_non_root_user() -> None:
    """runtime and runtime-devel need nvcc to build (not here); verify-runtime is built and checked
    by the docker tier (`id -u` != 0). All of them end in USER ${APP_UID}, default 10001."""
    stages = dockerfile().stages
    assert dict(dockerfile().global_args)["APP_UID"] == "10001"
    for target in ("runtime", "runtime-devel", "runtime-slim", "verify-runtime"):
        body = stages[target]
        users = [line.split()[1] for line in body.instructions if line.startswith("USER ")]
        assert users and users[-1] == "${APP_UID}", target
        assert "APP_UID" in body.args(), f"{target}: USER ${{APP_UID}} would be empty"
        useradd = body  # the stage that creates the user: the target itself or the nearest stage it stands on
        while (
            'useradd --create-home --uid "$APP_UID"' not in useradd.with_scripts()
            and useradd.parent in stages
        ):
            useradd = stages[useradd.parent]
        assert (
            'useradd --create-home --uid "$APP_UID"' in useradd.with_scripts() and "APP_UID" in useradd.args()
        ), target


def test_the_builder_is_given_every_provenance_input() -> None:
    """The manifest's provenance comes from the apex-build stage's builder call: the Apex ref and where
    the source came from (git URL@resolved commit), the base image and its digest, the wheel hashes."""
    stage = dockerfile().stages["apex-build"]
    body = stage.text
    for flag, source in (
        ("--apex-ref", '"$APEX_REF"'),
        ("--apex-source", '"$(cat /src/apex-source.txt)"'),
        ("--base-image", '"$BASE_DEVEL_IMAGE"'),
        ("--base-image-digest", '"$BASE_DEVEL_DIGEST"'),
        ("--wheel-hashes", "/opt/apex/inputs/wheels.sha256"),
    ):
        assert f"{flag} {source}" in body, flag
    for arg in ("APEX_REF", "BASE_DEVEL_IMAGE", "BASE_DEVEL_DIGEST"):
        assert arg in stage.args(), f"{arg} is not declared in apex-build: it would be empty"
    from toolchain.image import buildkit_build

    assert "BASE_DEVEL_DIGEST" in (REPO / "toolchain" / "image" / "buildkit_build.py").read_text()
    assert buildkit_build._image_digest("nvidia/cuda@sha256:" + "0" * 64) == "sha256:" + "0" * 64


def test_secrets_reach_builds_only_as_buildkit_secret_mounts() -> None:
    """No ARG or ENV carries a secret (those land in the image history); the CA is a secret mount."""
    for line in DOCKERFILE.splitlines():
        if re.match(r"^(ARG|ENV)\b", line):
            assert not re.search(r"(?i)(token|password|secret|_key\b|cert)", line), line
    assert DOCKERFILE.count("--mount=type=secret,id=extra_ca") >= 2
