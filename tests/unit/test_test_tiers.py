"""The tiers of scripts/test.sh, as written there: the apex-image tier (a real Apex compile, tens of minutes)
is selected only by TIER=apex-image, which .ci/run runs after `make test`, never by `make test` itself."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support import REPO

TIERS = dict(
    re.findall(r'^\s+([\w-]+)\) markers="([^"]+)"', (REPO / "scripts" / "test.sh").read_text(), re.M)
)


def _collected(markers: str, folder: str) -> list[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            markers,
            folder,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: nothing selected
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_tiers_are_the_documented_ones() -> None:
    assert set(TIERS) == {"all", "unit", "docker", "apex-image", "gpu"}


@pytest.mark.parametrize("tier", ["all", "unit", "docker", "gpu"])
def test_only_the_apex_image_tier_builds_apex(tier: str) -> None:
    assert _collected(TIERS[tier], "tests/apex_image") == []


def test_the_apex_image_tier_selects_its_folder_and_nothing_else() -> None:
    assert len(_collected(TIERS["apex-image"], "tests/apex_image")) >= 5
    assert _collected(TIERS["apex-image"], "tests/unit/test_first_run.py") == []


def test_ci_runs_make_test_then_the_apex_image_tier() -> None:
    steps = [
        line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")
    ]
    assert steps.index("make test") < next(i for i, s in enumerate(steps) if "TIER=apex-image" in s)
