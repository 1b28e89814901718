"""Exit classes under faults, without an engine or root: a full disk is the environment (exit 3), never bad
input (exit 2), shown with /dev/full (every write to it fails with ENOSPC) as the file a command writes; an
unwritable path the user named stays exit 2."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from toolchain import cli
from toolchain.errors import EnvironmentUnavailable, UsageError
from verify.runtime import exit_codes

FULL = Path("/dev/full")
pytestmark = pytest.mark.skipif(not FULL.is_char_device(), reason="no /dev/full on this machine")


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_build_py_writing_to_a_full_disk_is_exit_3_in_one_line(tmp_path: Path) -> None:
    done = _run("build.py", "bake", "--output", str(FULL))
    assert done.returncode == exit_codes.ENVIRONMENT, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert "the disk is full (no space left on device)" in line and "Traceback" not in done.stderr
    (tmp_path / "a-file").write_text("")
    unwritable = _run("build.py", "bake", "--output", str(tmp_path / "a-file" / "bake.json"))
    assert unwritable.returncode == exit_codes.USAGE  # a bad path is the user's input: 2


@pytest.mark.slow  # python -m verify imports torch and runs its import probe: several seconds
def test_verify_writing_its_report_to_a_full_disk_is_exit_3() -> None:
    done = _run("-m", "verify", "--static", "--json", str(FULL))
    assert done.returncode == exit_codes.ENVIRONMENT, done.stderr
    assert "verify: cannot write report to /dev/full: the disk is full" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_or_quota_at_the_top_is_environment_unavailable(code: int) -> None:
    made = cli._os_error(OSError(code, "No space left on device", "/data/out/.report.json.k3j2h1g0.tmp"))
    assert isinstance(made, EnvironmentUnavailable) and made.exit_code == exit_codes.ENVIRONMENT
    assert str(made) == (
        "the disk is full (no space left on device) writing /data/out/report.json; free space, or point "
        "--out/--logs at another filesystem"
    )


def test_other_os_errors_on_a_named_path_are_usage_and_without_a_path_the_environment() -> None:
    denied = cli._os_error(PermissionError(errno.EACCES, "Permission denied", "/data/out"))
    assert isinstance(denied, UsageError) and denied.exit_code == exit_codes.USAGE
    assert str(denied).startswith("/data/out: Permission denied; pass a path that exists")
    socket = cli._os_error(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
    assert isinstance(socket, EnvironmentUnavailable) and socket.exit_code == exit_codes.ENVIRONMENT
