"""The suite's children get Ctrl-C at a terminal's default however the suite was started (tests/conftest.py):
the faults tier's SIGINT to a process group would otherwise be lost under a background launch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO

PROBE = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
LAUNCHER_IGNORES = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)  # `nohup cmd &` in a script
INNER = "APEX_TEST_LAUNCHED_IGNORING_SIGINT"
TERM_DIR = "APEX_TEST_TERMINATED_IN"  # the inner run of the SIGTERM test: where it leaves its marks
INNER_RUN = Path(__file__).with_name("launch_signals_inner.py")  # not a test_*.py: only this file runs it


def _ignored_in(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("SigIgn:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigIgn line")


def test_a_child_of_the_suite_takes_ctrl_c() -> None:
    child = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert child.stdout.strip() == "True", child.stdout + child.stderr
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        ignored = _ignored_in(sleeper.pid)
        assert [s.name for s in LAUNCHER_IGNORES if ignored & 1 << (s - 1)] == []
    finally:
        sleeper.kill()
        sleeper.wait()


def test_even_when_the_suite_itself_was_started_with_ctrl_c_ignored() -> None:
    """This file's first test, run by a pytest that starts with SIGHUP, SIGINT and SIGQUIT ignored (what
    `nohup cmd &` in a script hands it); without tests/conftest.py its child ignores them too."""
    if os.environ.get(INNER):
        return  # the inner run: its one check is the test above
    nested = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "",
        f"{__file__}::test_a_child_of_the_suite_takes_ctrl_c",
    ]

    def ignore_ctrl_c() -> None:
        for ignored in LAUNCHER_IGNORES:
            signal.signal(ignored, signal.SIG_IGN)

    done = subprocess.run(
        nested,
        cwd=REPO,
        env={**os.environ, INNER: "1"},
        preexec_fn=ignore_ctrl_c,  # a single-threaded test process: preexec_fn is safe here
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr


def test_sigterm_to_the_suite_tears_its_fixtures_down(tmp_path: Path) -> None:
    """`kill PID` on a running pytest: without tests/conftest.py's handler it dies with the registry (and
    whatever else a fixture started) still running."""
    inner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "",
            str(INNER_RUN),
        ],
        cwd=REPO,
        env={**os.environ, TERM_DIR: str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for _ in range(6000):  # the inner pytest's start-up, however loaded the machine: up to 10 min
            if (tmp_path / "started").exists() or inner.poll() is not None:
                break
            time.sleep(0.1)
        assert (tmp_path / "started").exists(), inner.communicate(timeout=60)[0]
        inner.terminate()
        output = inner.communicate(timeout=300)[0]
    finally:
        inner.kill()
    assert (tmp_path / "torn-down").read_text() == "yes", output
    assert inner.returncode == pytest.ExitCode.INTERRUPTED, output
