"""What scripts/ensure-docker.sh installs: `make image` needs only docker.io and debootstrap (no
recommends); the registry, podman and skopeo only when a test tier asks (ENSURE_TEST_TOOLS=1, set by
scripts/test.sh for the engine tiers). Run with ENSURE_LIST=1 (prints, changes nothing) and, in case that
broke, a PATH whose apt-get, sudo and dockerd refuse to run."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

SCRIPT = REPO / "scripts" / "ensure-docker.sh"


def listed(tmp_path: Path, **env: str) -> list[str]:
    for tool in ("apt-get", "sudo", "dockerd", "debootstrap"):
        stub = tmp_path / tool
        stub.write_text("#!/bin/sh\necho refused >&2\nexit 97\n")
        stub.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(SCRIPT)],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "ENSURE_LIST": "1", **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_the_default_is_the_engine_and_debootstrap_only(tmp_path: Path) -> None:
    assert listed(tmp_path) == ["docker.io debootstrap"]
    text = SCRIPT.read_text()
    assert re.search(r'apt-get install -y -qq --no-install-recommends "\$\{BASE_PACKAGES\[@\]\}"', text)


def test_the_test_tools_only_on_request_and_never_for_a_local_base(tmp_path: Path) -> None:
    assert listed(tmp_path, ENSURE_TEST_TOOLS="1") == [
        "docker.io debootstrap",
        "docker-registry podman skopeo",
    ]
    assert listed(tmp_path, ENSURE_TEST_TOOLS="1", ENSURE_BASE_ONLY="1") == ["docker.io debootstrap"]


@pytest.mark.parametrize(
    ("tier", "asks"), [("unit", False), ("docker", True), ("all", True), ("apex-image", True), ("gpu", False)]
)
def test_the_engine_tiers_of_test_sh_ask_for_the_test_tools(tier: str, asks: bool) -> None:
    line = next(
        line.strip()
        for line in (REPO / "scripts" / "test.sh").read_text().splitlines()
        if "ENSURE_TEST_TOOLS=1" in line
    )
    proc = subprocess.run(
        ["bash", "-c", f'{line}\necho "${{ENSURE_TEST_TOOLS:-}}"'],
        env={"PATH": "/usr/bin:/bin", "TIER": tier},
        capture_output=True,
        text=True,
        check=True,
    )
    assert (proc.stdout.strip() == "1") is asks
