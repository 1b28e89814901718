"""Signals at any moment of a real `python -m verify --static` run, and of the whole run as a CPU node runs
it: from the interpreter's first instant, through torch's import and the import probe, to the
report's write. The moments are
fractions of a baseline run timed in the test itself (so a slow host moves them with it), from a fixed
seed; the signals rotate SIGTERM, SIGINT to the process group (Ctrl-C), SIGHUP, and every third one is
followed 0.2 s later by a second Ctrl-C.

Each run must end in one of three ways, nothing else: it finished before the signal (the baseline's
exit code and verdict, its report written); it was stopped (exit 1, exactly verify's one interrupted
line, no report, the earlier file untouched); or the signal came while the interpreter itself was
starting (its `site` import), before verify's first statement (interrupts.early()) could hold it:
then it ends as CPython ends any program at that point (by the signal, the shell's 128+N; SIGINT:
CPython's own "Fatal Python error: init_import_site ... KeyboardInterrupt", exit 1), with no frame of
this project and nothing written. Otherwise never a traceback, a 130 after an "(exit 1)" line, 134;
never a temp file or a child process left. SIGNAL_SWEEP_OUT=PATH writes the sweep's table as JSON (the evidence under
reports/cpu-2026-12-01-signal-sweep/)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.faultlib import REPO
from verify.runtime import exit_codes

EARLIER = '{"an earlier report": "must survive"}\n'
STOPPED = (
    "verify: interrupted by {}; child processes stopped; no report written or left half-written (exit 1)"
)
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
MOMENTS = 18


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("APEX_BUILD_MANIFEST", "GITHUB_ACTIONS")}
    return {**env, "PYTHONPATH": str(REPO)}


def _descendants(pid: int) -> set[int]:
    found, frontier = set(), [pid]
    while frontier:
        parent = frontier.pop()
        try:  # a process may end between being found and being read: its children are then gone too
            tasks = list(Path(f"/proc/{parent}/task").glob("*/children"))
        except OSError:
            continue
        for task in tasks:
            try:
                kids = [int(x) for x in task.read_text().split()]
            except OSError:
                continue
            found.update(kids)
            frontier += kids
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _run(
    tmp: Path, signal_name: str | None, at_s: float, second: bool, mode: tuple[str, ...] = ("--static",)
) -> dict:
    report = tmp / "r.json"
    report.write_text(EARLIER)
    earlier_inode = report.stat().st_ino
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "verify", *mode, "--json", str(report)],
        cwd=tmp,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    seen: set[int] = set()
    written_s = None  # when the report was replaced (the atomic write's rename): the run's work is done
    while (not signal_name or time.monotonic() - started < at_s) and proc.poll() is None:
        seen |= _descendants(proc.pid)
        if written_s is None and _replaced(report, earlier_inode):
            written_s = time.monotonic() - started
        time.sleep(0.01)
    masks = {}
    if signal_name and proc.poll() is None:
        seen |= _descendants(proc.pid)
        masks = _signal_masks(proc.pid)  # the kernel's view as the signal left: a failure's evidence
        if signal_name == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, getattr(signal, signal_name))
        if second:
            time.sleep(0.2)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    time.sleep(0.3)
    left = sorted(p for p in seen if _alive(p))
    for pid in left:  # only what this run started, by pid, so a failure leaves nothing behind either
        os.kill(pid, signal.SIGKILL)
    text = report.read_text()
    return {
        "signal": signal_name,
        "at_s": round(at_s, 3),
        "second_ctrl_c": second,
        "exit": proc.returncode,
        "stderr": stderr.strip().splitlines(),
        "report": "earlier" if text == EARLIER else json.loads(text),
        "left": left,
        "temp_files": sorted(p.name for p in tmp.iterdir() if p.name != "r.json"),
        "wall_s": round(time.monotonic() - started, 3),
        "written_s": written_s,
        "stdout_tail": stdout[-300:],
        "masks_at_signal": masks,
    }


def _signal_masks(pid: int) -> dict[str, str]:
    """SigBlk/SigIgn/SigCgt of the process (hex masks; bit N-1 is signal N), read from /proc."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def _replaced(report: Path, inode: int) -> bool:
    try:
        return report.stat().st_ino != inode
    except OSError:  # between the old file's unlink and the new one's rename
        return False


def _in_interpreter_start(row: dict, name: str) -> bool:
    """The signal came while CPython itself was starting (its site import), before verify's first
    statement: it ended as CPython ends any program then (by the signal; SIGINT: CPython's own
    KeyboardInterrupt in `site`, exit 1), with no frame of this project in what it printed."""
    if row["exit"] == -getattr(signal, name) and row["stderr"] == []:
        return True
    text = "\n".join(row["stderr"])
    # every frame CPython's own (`<frozen importlib._bootstrap>`, `<frozen site>`): its site import, or a
    # module lock's callback during it ("Exception ignored in: <function _get_module_lock...>", seen at 10 ms)
    frames = [line for line in text.splitlines() if line.strip().startswith('File "')]
    cpython_only = "KeyboardInterrupt" in text and bool(frames) and all('File "<frozen ' in f for f in frames)
    return (
        name == "SIGINT"
        and row["exit"] == 1
        and (text.startswith("Fatal Python error: init_import_site") or cpython_only)
        and "/verify/" not in text
        and "/toolchain/" not in text
    )


def _outcome(row: dict, name: str) -> str:
    stopped = row["report"] == "earlier"
    if stopped and _in_interpreter_start(row, name):
        return "before verify's first statement"
    return "stopped" if stopped else "finished first"


def _without_cpython_ignored(stderr: list[str]) -> list[str]:
    """stderr less what CPython printed when a SIGINT during its own start met a module lock's callback:
    "Exception ignored in: <function _get_module_lock...>", frozen frames only, then KeyboardInterrupt.
    CPython goes on (the run then ends as any other); nothing of this project was running yet."""
    kept: list[str] = []
    block: list[str] = []
    for line in stderr:
        if block or line.startswith("Exception ignored in: <function _get_module_lock"):
            block.append(line)
            if line.startswith("KeyboardInterrupt"):
                frames = [f for f in block if f.strip().startswith('File "')]
                if not all('File "<frozen ' in f for f in frames):
                    kept += block
                block = []
            continue
        kept.append(line)
    return kept + block


def _check(row: dict, name: str, fraction: float, baseline: dict, verdict: str) -> None:
    """The three ways a run may end, nothing else (the module's docstring)."""
    row = {**row, "stderr": _without_cpython_ignored(row["stderr"])}
    before_start = row["outcome"] == "before verify's first statement"
    assert before_start or not any("Traceback" in line for line in row["stderr"]), json.dumps(row)
    assert row["left"] == [] and row["temp_files"] == [], json.dumps(row)
    if before_start:  # the interpreter's own start (~30 ms): the signal's own end, nothing printed or written
        assert fraction < 0.05, json.dumps(row)
    elif row["outcome"] == "stopped":
        assert row["exit"] == exit_codes.FAILED, json.dumps(row)  # never 130, 134, 143: one path, exit 1
        assert row["stderr"] == [STOPPED.format(name)], json.dumps(row)
    else:  # the run was over before the signal: its true result, never a report of false FAILs
        assert row["exit"] == baseline["exit"] and row["report"]["verdict"] == verdict, json.dumps(row)


def test_cpythons_own_ignored_interrupt_is_set_aside_and_a_project_frame_is_not() -> None:
    ignored = [
        "Exception ignored in: <function _get_module_lock.<locals>.cb at 0x7f>",
        "Traceback (most recent call last):",
        '  File "<frozen importlib._bootstrap>", line 198, in cb',
        "KeyboardInterrupt: ",
    ]
    assert _without_cpython_ignored([*ignored, "verify: interrupted"]) == ["verify: interrupted"]
    ours = [*ignored[:3], '  File "/x/verify/cli.py", line 1, in main', ignored[3]]
    assert _without_cpython_ignored(ours) == ours


@pytest.mark.parametrize("mode, moments", [(("--static",), MOMENTS), ((), 12)], ids=["static", "full-cpu"])
def test_a_signal_at_any_moment_of_a_real_run_is_handled(
    tmp_path: Path, mode: tuple[str, ...], moments: int
) -> None:
    """`--static` (the image gate) and the whole run as a CPU node runs it (no --static: the GPU layers
    find no device and SKIP, as a CPU node's real run is). The moments are fractions of the baseline's
    work: its start to its report's write (what comes after is the interpreter's shutdown, where a signal
    rightly changes nothing). A loaded machine makes runs slower or faster than the baseline, so after the
    fixed moments more are drawn, up to as many again, until a third of them fell inside a run."""
    runs = [_run(tmp_path, None, 0.0, False, mode) for _ in range(2)]
    assert all(r["exit"] == runs[0]["exit"] and isinstance(r["report"], dict) for r in runs), runs
    assert all(r["written_s"] for r in runs), runs  # each baseline's write was seen
    baseline = min(runs, key=lambda r: r["written_s"])  # the moments fall inside even the faster runs
    verdict, duration = baseline["report"]["verdict"], baseline["written_s"]
    chooser = random.Random(24)
    fractions = [0.0, 0.002, 0.01] + sorted(chooser.uniform(0.02, 1.0) for _ in range(moments - 3))
    rows: list[dict] = []
    while len(rows) < moments or (
        sum(r["outcome"] == "stopped" for r in rows) < moments // 3 and len(rows) < 2 * moments
    ):
        index = len(rows)
        fraction = fractions[index] if index < moments else chooser.uniform(0.02, 1.0)
        name = SIGNALS[index % len(SIGNALS)]
        row = _run(tmp_path, name, fraction * duration, second=index % 3 == 2, mode=mode)
        row["fraction"] = round(fraction, 3)
        row["outcome"] = _outcome(row, name)
        rows.append(row)
        _check(row, name, fraction, baseline, verdict)
    if os.environ.get("SIGNAL_SWEEP_OUT") and mode == (
        "--static",
    ):  # the evidence file is the static sweep's
        Path(os.environ["SIGNAL_SWEEP_OUT"]).write_text(
            json.dumps(
                {
                    "baseline": {k: baseline[k] for k in ("exit", "wall_s", "written_s")}
                    | {"verdict": verdict},
                    "runs": [
                        {
                            k: r[k]
                            for k in (
                                "signal",
                                "fraction",
                                "at_s",
                                "second_ctrl_c",
                                "exit",
                                "outcome",
                                "wall_s",
                            )
                        }
                        for r in rows
                    ],
                },
                indent=1,
            )
            + "\n"
        )
    assert sum(r["outcome"] == "stopped" for r in rows) >= moments // 3, "many moments fall inside the run"
