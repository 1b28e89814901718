"""An environment value that used to become shell text, run for real.

`scripts/ensure-docker.sh` starts dockerd with its log at $DOCKERD_LOG. The script runs whole, in
private mount, network and PID namespaces with fresh tmpfs over /run, /tmp, /var/lib/docker and
/etc/docker: its dockerd is a daemon of its own (its socket, data, bridge) that dies with the
namespace, and the shared engine is never touched. No network there, so debootstrap fails (exit 3)
right after the daemon answers.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.faults.faultlib import DOCKERD, REPO

HOSTILE_LOG = "dockerd'; touch pwned; echo '.log"  # the old `sh -c "...>'$DOCKERD_LOG'..."` ran `touch pwned`


def test_dockerd_log_path_is_a_path_not_shell_text(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not Path(DOCKERD).is_file() or shutil.which("unshare") is None:
        pytest.skip("needs root, Debian's dockerd and unshare (util-linux)")
    work = tmp_path / "work"
    work.mkdir()
    # the script runs from a copy in work/: the tmpfs mounts below hide /tmp and /run, where a checkout
    # (and pytest's tmp_path) may well live
    shutil.copy2(REPO / "scripts" / "ensure-docker.sh", work / "ensure-docker.sh")
    inner = tmp_path / "inner.sh"
    inner.write_text(f"""set -e
mount -t tmpfs tmpfs /run
mkdir -p /run/lock /run/work
mount --bind {shlex.quote(str(work))} /run/work
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /var/lib/docker
mkdir -p /etc/docker && mount -t tmpfs tmpfs /etc/docker
ip link set lo up
cd /run/work
export DOCKERD_LOG="/run/work/{HOSTILE_LOG}"
exec bash /run/work/ensure-docker.sh
""")
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    proc = subprocess.run(
        [
            "unshare",
            "--mount",
            "--net",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "bash",
            str(inner),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert "starting dockerd" in proc.stdout, proc.stdout + proc.stderr
    assert not (work / "pwned").exists(), "a part of DOCKERD_LOG ran as a command"
    log = work / HOSTILE_LOG
    assert log.is_file() and "API listen on" in log.read_text(), "dockerd's log is not at the literal path"
    assert "daemon answers" in proc.stdout and proc.returncode == 3, (
        proc.stdout + proc.stderr
    )  # no network: debootstrap
