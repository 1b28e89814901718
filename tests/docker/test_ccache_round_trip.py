"""`build.py ccache import|export` through a real BuildKit: what goes in comes back out of
the cache mount, and a fresh mount exports empty. The cell is the README's no-registry cell: only its devel
stage runs (the local base), the same stage the tier's other builds use."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support import REPO

CELL = (
    "--cuda",
    "13.0",
    "--torch",
    "2.11.0",
    "--os",
    "debian12",
    "--python",
    "3.11",
    "--base-devel",
    "apex-toolchain/base:bookworm",
    "--base-runtime",
    "apex-toolchain/base:bookworm",
    "--torch-index-url",
    "https://pypi.org/simple",
    "--archs",
    "9.0",
)


def ccache(direction: str, folder: Path, logs: Path) -> subprocess.CompletedProcess:
    # the carried mount: the daemon's shared ccache mount (other builds' objects) stays untouched
    return subprocess.run(
        [
            sys.executable,
            "build.py",
            "ccache",
            direction,
            *CELL,
            "--dir",
            str(folder),
            "--ccache-mount",
            "carried",
            "--logs",
            str(logs),
            "--progress",
            "plain",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ),
    )


def test_import_replaces_the_mount_and_export_brings_it_back(docker_client, tmp_path: Path) -> None:
    unique = uuid.uuid4().hex
    carried = tmp_path / "carried"
    (carried / "0" / "1").mkdir(parents=True)
    (carried / "0" / "1" / "entryR").write_text(unique)
    done = ccache("import", carried, tmp_path / "logs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ccache import: 1 files, {len(unique)} bytes" in done.stdout
    back = tmp_path / "back"
    done = ccache("export", back, tmp_path / "logs")
    assert done.returncode == 0, done.stdout + done.stderr
    # exactly what was imported, nothing of an earlier import: the mount's content is replaced, not merged
    assert [p.relative_to(back).as_posix() for p in sorted(back.rglob("*")) if p.is_file()] == ["0/1/entryR"]
    assert (back / "0" / "1" / "entryR").read_text() == unique
    # an empty directory empties the mount: a cold build is really cold
    empty = tmp_path / "empty"
    empty.mkdir()
    assert ccache("import", empty, tmp_path / "logs").returncode == 0
    again = tmp_path / "again"
    done = ccache("export", again, tmp_path / "logs")
    assert done.returncode == 0 and list(again.iterdir()) == [], done.stdout + done.stderr
