"""Faults during matrix runs, through the real matrix runner in its own process (matrix_driver.py):
a corrupt wheel, Ctrl-C mid-build, two runs at once on the same out/ and logs/."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
from pathlib import Path

from tests.faults.faultlib import CI_TAG, REPO, driver_command, log_has, wait_for
from verify.runtime import exit_codes

GOOD = CI_TAG  # the docker tier's verify-runtime cell: its layers are cached by then


def _run(command: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _report(out: Path) -> dict:
    return json.loads((out / "matrix-report.json").read_text())


def _cells(out: Path) -> dict[str, dict]:
    return {c["id"]: c for c in _report(out)["cells"]}


def test_truncated_torch_wheel_fails_the_torch_stage_only(
    verify_image_tag: str, wheelhouse: Path, tmp_path: Path
) -> None:
    out, logs_dir = tmp_path / "out", tmp_path / "logs"
    good = _run(driver_command(out, logs_dir, [GOOD], wheelhouse=wheelhouse))
    assert good.returncode == exit_codes.OK, good.stdout + good.stderr
    corrupt = tmp_path / "corrupt-wheelhouse"
    corrupt.mkdir()
    for wheel in wheelhouse.glob("*.whl"):
        if wheel.name.startswith("torch-"):
            with open(wheel, "rb") as src:
                (corrupt / wheel.name).write_bytes(src.read(1 << 20))  # the first MiB: a truncated download
        else:
            os.link(wheel, corrupt / wheel.name)
    bad_id = "apex-ci-truncated-torch2.13.0-cpu-py3.11-debian12"
    bad = _run(driver_command(out, logs_dir, [bad_id], wheelhouse=corrupt))
    assert bad.returncode == exit_codes.FAILED, bad.stdout + bad.stderr
    assert "build failed in stage torch" in bad.stdout
    cells = _cells(out)
    assert cells[bad_id]["status"] == "build_failed" and cells[bad_id]["build"]["stage_failed"] == "torch"
    tail = "\n".join(cells[bad_id]["build"]["log_tail"])
    assert "torch-2.13.0" in tail and cells[bad_id]["build"]["step_failed"].startswith("[torch ")
    assert cells[GOOD]["status"] == "built" and cells[GOOD]["build"]["ok"], "the other cell is unaffected"
    assert len(_report(out)["runs"]) == 2


def _signal_mid_build(
    tmp_path: Path, wheelhouse: Path, cells: list[str], send
) -> tuple[int, str, str, list[str]]:
    """Run the cells in a session of their own, `send(pid)` once the first build has started: the run's exit
    code and output, and the processes still in its session then (a docker client that was not stopped)."""
    out, logs_dir = tmp_path / "out", tmp_path / "logs"
    # a wheelhouse of this test's own (the same wheels, one file more): its torch step is not in the build
    # cache, so the first build is still installing torch when the signal comes, however fast the machine
    own = tmp_path / "wheelhouse"
    own.mkdir()
    for wheel in wheelhouse.iterdir():
        os.link(wheel, own / wheel.name)
    (own / "not-cached.txt").write_text(str(tmp_path))
    proc = subprocess.Popen(
        driver_command(out, logs_dir, cells, wheelhouse=own),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: log_has(logs_dir, "[internal] load build context"), 120, "the first build to start")
        send(proc.pid)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
        with contextlib.suppress(ProcessLookupError):  # its session: the driver and its docker client only
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, stdout, stderr, left


def test_ctrl_c_mid_build_leaves_a_partial_report(
    verify_image_tag: str, wheelhouse: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first, second = (
        "apex-ci-sigint-a-torch2.13.0-cpu-py3.11-debian12",
        "apex-ci-sigint-b-torch2.13.0-cpu-py3.11-debian12",
    )
    # what Ctrl-C sends: the whole foreground group, docker client too
    code, stdout, stderr, left = _signal_mid_build(
        tmp_path, wheelhouse, [first, second], lambda pid: os.killpg(pid, signal.SIGINT)
    )
    assert code == exit_codes.FAILED, stdout + stderr
    assert "interrupted during" in stdout + stderr and "Traceback" not in stderr
    report = _report(out)
    cells = {c["id"]: c for c in report["cells"]}
    assert report["status"] == "interrupted"
    assert cells[first]["status"] == "interrupted" and cells[second]["status"] == "not_run"
    result = json.loads((out / "cells" / first / "result.json").read_text())
    assert result["status"] == "interrupted" and result["build"]["log_tail"]
    assert list(out.rglob("*.tmp")) == []
    assert left == [], "no docker client left running"


def test_sigterm_mid_build_leaves_a_partial_report_and_no_docker_client(
    verify_image_tag: str, wheelhouse: Path, tmp_path: Path
) -> None:
    """`kill PID` (or a CI runner's cancel) reaches build.py alone, not its docker client: the signal
    arrives as an exception, so the engine stops the client and the runner records the cell."""
    out = tmp_path / "out"
    first, second = (
        "apex-ci-sigterm-a-torch2.13.0-cpu-py3.11-debian12",
        "apex-ci-sigterm-b-torch2.13.0-cpu-py3.11-debian12",
    )
    code, stdout, stderr, left = _signal_mid_build(
        tmp_path, wheelhouse, [first, second], lambda pid: os.kill(pid, signal.SIGTERM)
    )  # the driver only
    assert code == exit_codes.FAILED, stdout + stderr
    assert "interrupted during" in stdout + stderr and "Traceback" not in stderr
    cells = {c["id"]: c for c in _report(out)["cells"]}
    assert cells[first]["status"] == "interrupted" and cells[second]["status"] == "not_run"
    assert list(out.rglob("*.tmp")) == []
    assert left == [], "the docker client was stopped"


def test_two_runs_at_once_keep_each_others_cells(
    verify_image_tag: str, wheelhouse: Path, tmp_path: Path
) -> None:
    out, logs_dir = tmp_path / "out", tmp_path / "logs"
    a, b = "apex-ci-conc-a-torch2.13.0-cpu-py3.11-debian12", "apex-ci-conc-b-torch2.13.0-cpu-py3.11-debian12"
    held = "apex-ci-conc-held-torch2.13.0-cpu-py3.11-debian12"
    (logs_dir / held).mkdir(parents=True)
    with open(logs_dir / held / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run is building this cell right now
        procs = [
            subprocess.Popen(
                driver_command(out, logs_dir, cells, wheelhouse=wheelhouse),
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for cells in ([a], [b, held])
        ]
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert procs[0].returncode == exit_codes.OK, outputs[0]
    assert procs[1].returncode == exit_codes.FAILED, outputs[1]
    report = _report(out)
    cells = {c["id"]: c for c in report["cells"]}
    assert cells[a]["status"] == "built" and cells[b]["status"] == "built"
    assert cells[held]["status"] == "skipped" and "another run is building" in cells[held]["build"]["error"]
    assert len(report["runs"]) == 2 and cells[a]["run_id"] != cells[b]["run_id"]
    for cell in (a, b):
        assert (out / "cells" / cell / "result.json").is_file()
        assert f"--tag {cell}" in (logs_dir / cell / "build.log").read_text(), "each cell its own log"
    assert list(out.rglob("*.tmp")) == []
