"""scripts/test_machine_state.py against the real engine: after a run, only what the run tagged and made is
removed (`make test` leaves the machine as it found it). The test uses a tag prefix of its own,
so it never touches another run's images on a shared engine."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support import REPO

SCRIPT = REPO / "scripts" / "test_machine_state.py"
DOCKER = "/usr/bin/docker"


def _state(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, check=False
    )


def _exists(tag: str) -> bool:
    return subprocess.run([DOCKER, "image", "inspect", tag], capture_output=True, timeout=60).returncode == 0


def test_only_the_new_images_with_the_suites_tags_are_removed(
    tmp_path: Path, docker_client, base_image: str
) -> None:
    prefix = f"apex-machine-state-{uuid.uuid4().hex[:8]}"
    old, new, foreign = f"{prefix}-old:1", f"{prefix}-new:1", f"not-{prefix}:1"
    subprocess.run([DOCKER, "tag", base_image, old], check=True, timeout=60)  # there before the run
    state = tmp_path / "engine.json"
    try:
        snap = _state("snapshot", str(state))
        assert snap.returncode == 0, snap.stderr
        before = json.loads(state.read_text())
        assert before["dockerd_pid"] is None and docker_client.images.get(old).id in before["images"]
        assert _state("snapshot", str(state)).stdout.startswith(
            "test_machine_state: "
        )  # the first one is kept
        context = tmp_path / "ctx"
        context.mkdir()
        (context / "Dockerfile").write_text(f"FROM {base_image}\nLABEL made-by={prefix}\n")
        for tag in (new, foreign):
            subprocess.run(
                [DOCKER, "build", "-q", "-t", tag, str(context)],
                check=True,
                capture_output=True,
                timeout=300,
                env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
            )
        dry = _state("cleanup", str(state), "--dry-run", "--tag-prefix", prefix)
        assert dry.returncode == 0, dry.stderr
        assert (
            f"would remove image {new}" in dry.stdout and old not in dry.stdout and foreign not in dry.stdout
        )
        assert _exists(new) and state.exists()  # a dry run removes nothing
        done = _state("cleanup", str(state), "--tag-prefix", prefix)
        assert done.returncode == 0, done.stderr
        assert f"removing image {new}" in done.stdout
        assert not _exists(new) and _exists(old) and _exists(foreign) and _exists(base_image)
        assert "stopped dockerd" not in done.stdout  # the engine was running before: it keeps running
        assert not state.exists()
        assert _state("cleanup", str(state)).returncode == 2  # no snapshot: says so, removes nothing
    finally:
        for tag in (old, new, foreign):
            subprocess.run([DOCKER, "rmi", tag], capture_output=True, timeout=60)
