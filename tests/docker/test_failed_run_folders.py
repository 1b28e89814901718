"""A command that fails leaves no empty --out folders behind: `build.py verify IMAGE --gpu require` on
the CPU engine (no NVIDIA runtime) is exit 3, and the folders it would have written to do not exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO


def test_verify_refused_by_the_daemon_leaves_no_empty_out_folder(
    docker_client, verify_image_tag: str, tmp_path: Path
) -> None:
    (tmp_path / "existing").mkdir()
    out = tmp_path / "existing" / "new" / "out"
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_ACTIONS"}
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "build.py"),
            "verify",
            verify_image_tag,
            "--gpu",
            "require",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 3 and "no NVIDIA GPU runtime" in proc.stderr, proc.stderr
    assert not (tmp_path / "existing" / "new").exists()
    assert (tmp_path / "existing").is_dir()
