"""The tiers of scripts/test.sh, as written there: the apex-image tier (a real Apex compile, tens of minutes)
is selected only by TIER=apex-image, which .ci/run runs after `make test` (the unit tier), the slow tests and
the engine tiers, never by `make test` itself."""

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
    assert set(TIERS) == {"all", "unit", "slow", "docker", "apex-image", "gpu"}


@pytest.mark.slow
@pytest.mark.parametrize("tier", ["all", "unit", "slow", "docker", "gpu"])
def test_only_the_apex_image_tier_builds_apex(tier: str) -> None:
    assert _collected(TIERS[tier], "tests/apex_image") == []


@pytest.mark.slow
def test_the_apex_image_tier_selects_its_folder_and_nothing_else() -> None:
    assert len(_collected(TIERS["apex-image"], "tests/apex_image")) >= 5
    assert _collected(TIERS["apex-image"], "tests/unit/test_first_run.py") == []


def test_ci_runs_make_test_then_the_apex_image_tier() -> None:
    steps = [
        line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")
    ]
    make_test = next(i for i, s in enumerate(steps) if s.startswith("step ") and s.endswith(" make test"))
    assert make_test < next(i for i, s in enumerate(steps) if "TIER=apex-image" in s)


def test_ci_makes_room_for_its_one_cold_build() -> None:
    """Before the cold image build .ci/run reclaims what the tier's own disk check asks for (the same
    figure); it builds one image, the main job's route, and never the newest stack (a scheduled workflow)."""
    from tests.apex_image import conftest as apex_tier

    steps = [
        line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")
    ]
    builds = [i for i, s in enumerate(steps) if "TIER=apex-image" in s]
    reclaims = [i for i, s in enumerate(steps) if "test_machine_state.py reclaim" in s]
    assert len(builds) == 1 and len(reclaims) == 1, steps
    assert reclaims[0] < builds[0]
    assert not any("APEX_IMAGE_NEWEST" in s for s in steps)
    figures = {
        m.group(1)
        for i in reclaims
        for j in (i, i + 1)
        if (m := re.search(r"APEX_IMAGE_DISK_GIB:-(\d+)", steps[j]))
    }
    assert figures == {str(apex_tier.DISK_DEFAULT_GIB)}, figures


def test_the_suite_installs_only_into_its_own_venv_and_cleans_up_after_itself() -> None:
    script = (REPO / "scripts" / "test.sh").read_text()
    installs = [
        line.strip()
        for line in script.splitlines()
        if "pip install" in line and not line.lstrip().startswith("#")
    ]
    assert installs and all(line.startswith('"$VENV/bin/python" -m pip install') for line in installs), (
        installs
    )
    assert "test_machine_state.py snapshot" in script and "test_machine_state.py cleanup" in script
    ci = (REPO / ".ci" / "run").read_text()
    assert "TEST_KEEP_ENGINE=1" in ci and "test_machine_state.py cleanup" in ci  # once, after both tiers
    ignored = (REPO / ".gitignore").read_text().split()
    assert "/.venv-test/" in ignored and "/.test-state/" in ignored


def test_a_bad_cleanup_value_is_a_usage_error_before_anything_is_installed(tmp_path) -> None:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "test.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "TEST_CLEANUP": "yes please", "TEST_VENV": str(tmp_path / "v")},
    )
    assert done.returncode == 2 and "TEST_CLEANUP=yes please is not 1, 0 or dry-run" in done.stderr
    assert not (tmp_path / "v").exists()
