"""Signals to verify and verify bench, with real processes and real signals.

What a signal must do (verify/runtime/entry_point.py): act at once (not after --check-timeout), kill every child
the run started (the import probe, GPU workers, and whatever they started), print one line and exit 1,
and leave no report half-written (no `.tmp`; an earlier report at the path stays as it was).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.faultlib import REPO, children_of, wait_for
from verify.runtime import exit_codes

EARLIER = '{"an earlier report": "must survive"}\n'


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _leftovers(proc: subprocess.Popen, spawned: list[int]) -> list[int]:
    """Which of the processes the run started are still alive once it ended; those are then killed
    (only those: by pid), so that a failing test leaves nothing behind either."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    time.sleep(0.5)  # a SIGKILLed orphan is reaped by init
    left = [pid for pid in spawned if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def _env(extra_path: Path | None = None, **kw: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("APEX_BUILD_MANIFEST", "GITHUB_ACTIONS")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (extra_path, REPO) if p)
    return {**env, **kw}


def _hanging_extension(tmp_path: Path) -> tuple[Path, Path, Path]:
    """amp_C that starts a grandchild (`sleep`), writes its pid, says it is running, then hangs."""
    mods, started, grandchild = tmp_path / "mods", tmp_path / "import-started", tmp_path / "grandchild.pid"
    mods.mkdir()
    (mods / "amp_C.py").write_text(
        "import subprocess, time\n"
        f"open({str(grandchild)!r}, 'w').write(str(subprocess.Popen(['sleep', '300']).pid))\n"
        f"open({str(started)!r}, 'w').close()\n"
        "time.sleep(300)  # a .so whose static initialiser never returns\n"
    )
    return mods, started, grandchild


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT to the process group (Ctrl-C)", "SIGHUP"])
def test_a_signal_during_the_import_probe_stops_at_once_and_leaves_no_child(tmp_path: Path, how: str) -> None:
    mods, started, grandchild_file = _hanging_extension(tmp_path)
    report = tmp_path / "r.json"
    report.write_text(EARLIER)
    proc = subprocess.Popen(
        [sys.executable, "-m", "verify", "--static", "--check-timeout", "600", "--json", str(report)],
        cwd=tmp_path, env=_env(mods), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # its own group, as a shell's foreground job: Ctrl-C goes to the group
    )  # fmt: skip
    spawned: list[int] = []
    try:
        wait_for(started.exists, 60, "the probe to hang in amp_C")
        spawned = [*children_of(proc.pid), int(grandchild_file.read_text())]
        t0 = time.monotonic()
        if how.startswith("SIGINT"):
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, getattr(signal, how))
        stdout, stderr = proc.communicate(timeout=300)  # a bound, not a speed: the check timeout is 600 s
        elapsed = time.monotonic() - t0
    finally:
        left = _leftovers(proc, spawned)
    name = how.split()[0]
    assert proc.returncode == exit_codes.FAILED, stdout + stderr
    assert elapsed < 300, f"took {elapsed:.1f} s: the signal waited for the check timeout (600 s)"
    assert stderr.splitlines() == [
        f"verify: interrupted by {name}; child processes stopped; no report written "
        "or left half-written (exit 1)"
    ], stderr
    assert len(spawned) == 2, "the import probe child and its grandchild were seen"
    assert left == [], "the probe child and what it started were killed with verify"
    assert report.read_text() == EARLIER
    assert list(tmp_path.glob("*.tmp")) == [] and list(tmp_path.glob(".r.json*")) == []


# Runs the real CLI with os.fsync wrapped: when the report's temp file is synced, the process sends
# itself SIGTERM and sleeps, so the signal arrives at a known point between the temp file's creation
# and its rename over the target.
_KILL_DURING_WRITE = """
import os, signal, sys, time
sync = os.fsync
def fsync(fd):
    if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
        open(sys.argv[1], "w").close()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    sync(fd)
os.fsync = fsync
from verify.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_sigterm_during_the_report_write_leaves_no_temp_file(tmp_path: Path) -> None:
    reports, seen = tmp_path / "reports", tmp_path / "temp-file-seen"
    reports.mkdir()
    report = reports / "r.json"
    report.write_text(EARLIER)
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _KILL_DURING_WRITE, str(seen), "--static", "--json", str(report)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert seen.exists(), "the signal was sent while the temp file existed"
    assert done.returncode == exit_codes.FAILED, done.stdout + done.stderr
    assert time.monotonic() - t0 < 55, "the signal ended the sleep inside the write"
    assert "interrupted by SIGTERM" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in reports.iterdir()) == ["r.json"], "no temp file left"
    assert report.read_text() == EARLIER, "the earlier report is untouched"


_HANGING_GROUPS = """
import sys
from verify.runtime import entry_point
from verify.gpu import runner
sys.exit(entry_point.run("verify", lambda: (runner.run_groups(["selftest", "selftest_peer"], 1, 600), 0)[1]))
"""


def test_sigterm_while_gpu_workers_hang_kills_them_and_starts_no_fresh_one(tmp_path: Path) -> None:
    """The GPU layers' runner (the same one verify uses on a GPU host), with its torch-free selftest groups:
    two workers hang side by side in their first check; SIGTERM must end both, and no fresh worker may be
    started for the rest of their cases (which is what a dying worker normally gets)."""
    env = _env(VERIFY_FAULT_INJECT="selftest.first:hang,selftest_peer.only:hang", TMPDIR=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-c", _HANGING_GROUPS],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    workers: list[int] = []
    try:

        def two_workers() -> bool:
            workers[:] = children_of(proc.pid)
            return len(workers) == 2

        wait_for(two_workers, 60, "two worker processes")
        time.sleep(2)  # both are inside their hanging check by now (a worker starts in well under a second)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)  # a bound, not a speed: the checks' timeout is 600 s
        elapsed = time.monotonic() - t0
    finally:
        left = _leftovers(proc, workers)
    assert proc.returncode == exit_codes.FAILED and elapsed < 300, (proc.returncode, elapsed, stderr)
    assert stderr.splitlines() == ["verify: interrupted by SIGTERM (exit 1)"], stderr
    assert left == []
    assert list(tmp_path.glob("verify-gpu-*.log")) == [], "the workers' stderr files were removed"


def test_sigterm_during_verify_bench_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    proc = subprocess.Popen(
        [sys.executable, "-m", "verify", "bench", "--device", "cpu", "--stages", "1", "--steps", "100000",
         "--no-micro", "--no-plots", "--out", str(out)],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # printed once the run has started
        assert "results go to" in first, first
        time.sleep(1)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=300)  # a bound, not a speed: 100000 steps take far longer
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == exit_codes.FAILED and elapsed < 120, (proc.returncode, elapsed, stderr)
    assert stderr.splitlines() == [
        "verify bench: interrupted by SIGTERM; no results written or left half-written (exit 1)"
    ], stderr
    # no bench.json, no temp file; the --out folder the run made is removed again (verify/runtime/out_dirs.py)
    assert not out.exists() or list(out.iterdir()) == []
