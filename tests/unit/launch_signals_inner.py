"""The inner pytest of test_launch_signals.py's SIGTERM test, run only by it (pytest collects `test_*.py`, so
a normal run never starts this file): it marks that it started, then waits to be terminated, and its
session fixture's teardown leaves the mark the outer test reads. Run on its own it fails: a test that
only waits has nothing to show unless someone terminates it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TERM_DIR = "APEX_TEST_TERMINATED_IN"  # where the marks go (the outer test's tmp_path)
WAIT_S = 120


@pytest.fixture(scope="session")
def left_behind_until_teardown() -> Iterator[None]:
    """Stands in for the registry and servers the suite's fixtures start: its teardown must run."""
    yield
    (Path(os.environ[TERM_DIR]) / "torn-down").write_text("yes")


def test_waits_to_be_terminated(left_behind_until_teardown: None) -> None:
    (Path(os.environ[TERM_DIR]) / "started").write_text(str(os.getpid()))
    time.sleep(WAIT_S)
    pytest.fail(f"not terminated within {WAIT_S} s: the outer test sends SIGTERM once this has started")
