"""Bad input: a clear one-line message naming the input and the fix, exit 2, nothing built.

Every build command here runs with DOCKER_HOST pointing at a socket nobody listens on: were the
input accepted, the run would reach the daemon check and exit 3. Exit 2 and no out/ or logs/
directory show that validation refused it before anything could be built.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.faultlib import REPO, run_cli
from verify.runtime import exit_codes

GOOD_CELL = '[cells.ok]\ncuda = "12.4"\ntorch = "2.6"\n'
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def dead_docker(tmp_path: Path) -> dict[str, str]:
    return {"DOCKER_HOST": f"unix://{tmp_path}/nobody-listens.sock"}


def _matrix(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text('format_version = 1\n[defaults]\npython = "3.11"\narchs = ["8.0", "9.0"]\n' + text)
    return path


def _refused(result: subprocess.CompletedProcess, tmp_path: Path, *needles: str) -> str:
    err = result.stderr.strip()
    assert result.returncode == exit_codes.USAGE, result.stdout + result.stderr
    assert err.startswith("error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "logs").exists(), "something was started"
    return err


def _matrix_run(
    tmp_path: Path, matrix: Path, env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess:
    return run_cli(
        "matrix",
        "--matrix",
        str(matrix),
        "--out",
        str(tmp_path / "out"),
        "--logs",
        str(tmp_path / "logs"),
        *extra,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ('[cells.broken\ncuda = "12.4"\n', ("malformed TOML", "line")),
        (
            GOOD_CELL + '[cells.typo]\ncuda = "12.4"\npyhton = "3.11"\n',
            ("unknown key 'pyhton'", "did you mean 'python'"),
        ),
        (
            '[cells.old]\ncuda = "12.4"\ntorch = "2.8"\n',
            ("torch 2.8 has no wheel for CUDA 12.4", 'torch = "2.6"'),
        ),
        (
            '[cells.t]\ncuda = "12.4"\ntag = "Apex Image!"\n',
            ("tag 'Apex Image!'", "a docker tag cannot hold"),
        ),
        (
            '[cells.r]\ncuda = "12.4"\napex_ref = "feature..x"\n',
            ("apex_ref 'feature..x' is not a git commit",),
        ),
        (
            '[cells.d]\ncuda = "12.4"\nbase_devel = "nvidia/cuda@sha256:1234"\n',
            ("base_devel 'nvidia/cuda@sha256:1234' is not an image reference", "name@sha256:<64 hex digits>"),
        ),
    ],
    ids=[
        "malformed-toml",
        "unknown-key",
        "impossible-cell",
        "invalid-tag",
        "invalid-ref",
        "malformed-digest",
    ],
)
def test_bad_matrix_is_exit_2_and_nothing_built(
    tmp_path: Path, dead_docker: dict, text: str, needles: tuple
) -> None:
    _refused(_matrix_run(tmp_path, _matrix(tmp_path, text), dead_docker), tmp_path, *needles)


def test_every_problem_is_reported_at_once(tmp_path: Path, dead_docker: dict) -> None:
    text = '[cells.a]\ncuda = "12.4"\ntorch = "2.8"\n[cells.b]\ncuda = "12.4"\ngcc = "14"\n'
    err = _refused(
        _matrix_run(tmp_path, _matrix(tmp_path, text), dead_docker), tmp_path, "2 problems, nothing built"
    )
    assert "cell a:" in err and "cell b:" in err


@pytest.mark.parametrize(
    ("option", "make", "needle"),
    [
        ("--apex-src", lambda p: p / "no-such-dir", "no such directory"),
        ("--apex-src", lambda p: p, "not an Apex source tree (needs setup.py and apex/__init__.py)"),
        ("--wheelhouse", lambda p: p, "no .whl files there"),
        ("--extra-ca", lambda p: p / "no-ca.pem", "no such file"),
    ],
    ids=["apex-src-missing", "apex-src-not-apex", "empty-wheelhouse", "extra-ca-missing"],
)
def test_bad_local_input_is_exit_2_before_the_daemon(
    tmp_path: Path, dead_docker: dict, option, make, needle
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    matrix = _matrix(tmp_path, GOOD_CELL)
    _refused(_matrix_run(tmp_path, matrix, dead_docker, option, str(make(empty))), tmp_path, option, needle)
    image = run_cli(
        "image",
        "--matrix",
        str(matrix),
        "--cell",
        "ok",
        "--out",
        str(tmp_path / "out"),
        "--logs",
        str(tmp_path / "logs"),
        option,
        str(make(empty)),
        env=dead_docker,
        timeout=120,
    )
    _refused(image, tmp_path, option, needle)


def test_command_line_cell_errors_are_exit_2(tmp_path: Path, dead_docker: dict) -> None:
    result = run_cli(
        "image",
        "--cuda",
        "12.4",
        "--gcc",
        "14",
        "--out",
        str(tmp_path / "out"),
        "--logs",
        str(tmp_path / "logs"),
        env=dead_docker,
    )
    _refused(result, tmp_path, "command line: GCC 14 is newer than nvcc 12.4 allows", "--gcc 12")


def test_valid_input_reaches_the_daemon_check(tmp_path: Path, dead_docker: dict) -> None:
    """The control for the tests above: the same command with good input gets as far as the daemon."""
    result = _matrix_run(tmp_path, _matrix(tmp_path, GOOD_CELL), dead_docker)
    assert result.returncode == exit_codes.ENVIRONMENT, result.stderr
    assert "no Docker daemon answers" in result.stderr


def test_base_image_pinned_by_digest_is_accepted_and_passed_through(tmp_path: Path) -> None:
    devel, runtime = (
        f"nvidia/cuda@{DIGEST}",
        f"registry.example:5000/nvidia/cuda:12.4.1-runtime-ubuntu22.04@{DIGEST}",
    )
    result = run_cli("plan", "--cuda", "12.4", "--base-devel", devel, "--base-runtime", runtime, "--json")
    assert result.returncode == exit_codes.OK, result.stderr
    plan = json.loads(result.stdout)
    assert (
        plan["build_args"]["BASE_DEVEL_IMAGE"] == devel
        and plan["build_args"]["BASE_RUNTIME_IMAGE"] == runtime
    )
    assert (
        f"BASE_DEVEL_IMAGE={devel}" in plan["command"] and f"BASE_RUNTIME_IMAGE={runtime}" in plan["command"]
    )
    from toolchain.image import buildkit_build

    assert buildkit_build._image_digest(devel) == DIGEST, (
        "the pin is the provenance digest, even when not local"
    )


def test_manifest_from_another_image_is_exit_2_and_no_report(tmp_path: Path) -> None:
    """verify with the build manifest of another image (Apex built for another torch): exit 2, one line."""
    manifest = tmp_path / "build-manifest.json"
    manifest.write_text(json.dumps({
        "manifest_version": "1", "apex": {"commit": "6424da3b"}, "flags": {}, "expected_modules": ["amp_C"],
        "built_modules": ["amp_C"], "versions": {"torch": "2.4.1+cu121"}, "arch_list": "8.0",
    }))  # fmt: skip
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "verify", "--static", "--manifest", str(manifest), "--json", str(report)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == exit_codes.USAGE, result.stdout + result.stderr
    assert "build manifest is from another image: Apex was built for torch 2.4.1+cu121" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not report.exists()
    manifest.write_text("{not json")
    result = subprocess.run(
        [sys.executable, "-m", "verify", "--static", "--manifest", str(manifest)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == exit_codes.USAGE and "is not valid JSON" in result.stderr
