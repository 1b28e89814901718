"""Helpers of the fault-injection tier (tests/faults); conftest.py holds its fixtures.

Fault-injection tier: each fault made for real (a daemon killed mid-build, a truncated
wheel, a full filesystem, Ctrl-C, two runs at once, bad input) and what the user then sees.

The docker tier's session fixtures (engine, local base image, offline wheelhouse, the built
verify-runtime image) are reused from tests/docker/conftest.py, loaded by path (tests/ is no package).
A test that needs a daemon of its own gets one: a second dockerd with its own data/exec roots,
socket and bridge under a temp dir, never the shared /var/run/docker.sock that other tests use.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.support import REPO

DRIVER = Path(__file__).with_name("matrix_driver.py")
DOCKERD = "/usr/sbin/dockerd"
DOCKER = "/usr/bin/docker"

_spec = importlib.util.spec_from_file_location(
    "apex_docker_tier_fixtures", REPO / "tests" / "docker" / "conftest.py"
)
assert _spec and _spec.loader
_docker_tier = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_docker_tier)
# re-exported so pytest registers them for this directory too (same definitions as the docker tier)
docker_client = _docker_tier.docker_client
wheelhouse = _docker_tier.wheelhouse
test_ca = _docker_tier.test_ca
logs = _docker_tier.logs
verify_image_tag = _docker_tier.verify_image_tag
cell_factory = _docker_tier.cell_factory
make_cell = _docker_tier.make_cell
BASE_IMAGE = _docker_tier.BASE_IMAGE
CI_TAG = _docker_tier.CI_TAG


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    cwd: Path = REPO,
    prefix: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    """`python build.py ARGS` as a user runs it: a real process, its exit code and its output."""
    return subprocess.run(
        [*prefix, sys.executable, str(REPO / "build.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def driver_command(
    out: Path, logs_dir: Path, cells: list[str], *, wheelhouse: Path | None = None, verify: str = "none"
) -> list[str]:
    """The matrix runner in a process of its own, for CPU cells (see matrix_driver.py)."""
    command = [sys.executable, str(DRIVER), "--out", str(out), "--logs", str(logs_dir), "--verify", verify]
    if wheelhouse is not None:
        command += ["--wheelhouse", str(wheelhouse)]
    return command + cells


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def log_has(log_dir: Path, text: str) -> bool:
    return any(text in p.read_text(errors="replace") for p in log_dir.rglob("build.log"))


class SecondDaemon:
    """A dockerd of this test's own: its socket, roots and bridge live under `root` (vfs storage, so
    no overlay mounts outlive it; a bridge without NAT, so RUN steps start but reach nothing).
    Never `--bridge=none`: a dockerd started with it deletes the host's docker0, which the shared
    daemon's containers need."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.bridge = f"apxf{uuid.uuid4().hex[:8]}"  # <= 15 chars, unique per test run
        self.proc: subprocess.Popen | None = None
        self.children: list[int] = []

    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.host}

    def start(self) -> None:
        subprocess.run(["ip", "link", "add", "name", self.bridge, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", "172.31.254.1/24", "dev", self.bridge], check=True)
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True)
        log = open(self.root / "dockerd.log", "w")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [DOCKERD, "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
             "--pidfile", str(self.root / "dockerd.pid"), "-H", self.host, "--bridge", self.bridge,
             "--iptables=false", "--ip-masq=false", "--storage-driver=vfs"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        wait_for(lambda: self.docker("version", check=False).returncode == 0, 60, "the second dockerd")
        self.children = children_of(self.proc.pid)  # its managed containerd

    def docker(self, *args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([DOCKER, "-H", self.host, *args], capture_output=True, check=check, **kw)

    def load_base(self) -> None:
        save = subprocess.Popen([DOCKER, "save", BASE_IMAGE], stdout=subprocess.PIPE)
        subprocess.run([DOCKER, "-H", self.host, "load"], stdin=save.stdout, check=True, capture_output=True)
        assert save.wait() == 0

    def kill(self) -> None:
        """The fault: the daemon dies (SIGKILL, as in an OOM kill or a crash)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=20)
        self.kill()
        for pid in self.children + _shims_of(self.root):  # only processes this daemon started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        for mount in reversed(_mounts_under(self.root)):
            subprocess.run(["umount", "-l", mount], check=False)
        # a RUN container killed with its daemon leaves its veth pair behind, attached to our bridge
        attached = subprocess.run(
            ["ip", "-o", "link", "show", "master", self.bridge], capture_output=True, text=True, check=False
        ).stdout
        for line in attached.splitlines():
            subprocess.run(
                ["ip", "link", "del", line.split(":")[1].strip().split("@")[0]],
                check=False,
                capture_output=True,
            )
        subprocess.run(["ip", "link", "del", self.bridge], check=False, capture_output=True)


def children_of(pid: int) -> list[int]:
    """pid's children now; a process that ends while it is read has none (no error: it is gone)."""
    found = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").glob("*/children"))
    except OSError:
        return []
    for task in tasks:
        with contextlib.suppress(OSError):
            found += [int(x) for x in task.read_text().split()]
    return found


def _shims_of(root: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if str(root).encode() in (proc / "cmdline").read_bytes() and int(proc.name) != os.getpid():
                pids.append(int(proc.name))
    return pids


def _mounts_under(root: Path) -> list[str]:
    return [
        line.split()[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split()[1].startswith(str(root))
    ]
