"""Signals as exceptions and child processes that die with their parent (verify/runtime/interrupts.py,
verify/runtime/child_processes.py, verify/runtime/entry_point.py), with real signals sent to this test process and
real child processes. The CLIs under signals are in tests/faults/test_faults_signals.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verify.runtime import child_processes, entry_point, exit_codes, interrupts


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigterm_raises_interrupted_where_the_main_thread_is() -> None:
    before = signal.getsignal(signal.SIGTERM)  # the suite's own (tests/conftest.py), or SIG_DFL
    with interrupts.raising(), pytest.raises(interrupts.Interrupted) as caught:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises from inside the sleep
    assert caught.value.signal_name == "SIGTERM" and isinstance(caught.value, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGTERM) is before, "the previous handler is back"


def test_a_signal_inside_a_deferred_section_is_raised_when_it_ends() -> None:
    reached = []
    with interrupts.raising(), pytest.raises(interrupts.Interrupted):
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.2)
            reached.append("end of section")
        reached.append("after the section")
    assert reached == ["end of section"]


def test_only_the_first_signal_raises_and_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interrupts.raising():
            os.kill(os.getpid(), signal.SIGHUP)  # inherited as ignored (nohup): still ignored
            time.sleep(0.1)
            with pytest.raises(interrupts.Interrupted):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            os.kill(os.getpid(), signal.SIGTERM)  # a second signal lets the cleanup in progress finish
            time.sleep(0.1)
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_children_are_in_their_own_group_and_die_with_the_run(tmp_path: Path) -> None:
    grandchild = tmp_path / "grandchild.pid"
    script = f"import subprocess, time; open({str(grandchild)!r}, 'w').write(str(subprocess.Popen(['sleep', '300']).pid)); time.sleep(300)"
    procs: list[subprocess.Popen] = []

    def body() -> int:
        procs.append(child_processes.start([sys.executable, "-c", script]))
        while not grandchild.exists() or not grandchild.read_text():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        return exit_codes.OK

    t0 = time.monotonic()
    code = entry_point.run("test", body)
    assert code == exit_codes.FAILED and time.monotonic() - t0 < 25
    child, sleeper = procs[0].pid, int(grandchild.read_text())
    assert os.getpgid(os.getpid()) != child, "the child leads a group of its own"
    assert procs[0].wait(timeout=5) == -signal.SIGKILL
    time.sleep(0.3)
    left = [pid for pid in (sleeper,) if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], "the grandchild died with the child's group"
    later = entry_point.run(
        "test", lambda: child_processes.reap(child_processes.start([sys.executable, "-c", "pass"]))
    )
    assert later == 0, "the next run may start children again"


def test_no_child_starts_between_a_signal_and_the_end_of_the_run() -> None:
    refused: list[str] = []

    def body() -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:  # cleanup code that would start a fresh worker, as a restarting check group does
            try:
                child_processes.start([sys.executable, "-c", "import time; time.sleep(300)"])
            except child_processes.Stopping as exc:
                refused.append(str(exc))
        return exit_codes.OK

    assert entry_point.run("test", body) == exit_codes.FAILED
    assert len(refused) == 1 and refused[0].endswith(": this process is stopping"), refused


def test_a_keyboard_interrupt_is_one_line_and_exit_1(capsys: pytest.CaptureFixture) -> None:
    def body() -> int:
        raise KeyboardInterrupt

    assert entry_point.run("test", body, on_interrupt="nothing kept") == exit_codes.FAILED
    assert capsys.readouterr().err == "test: interrupted by SIGINT; nothing kept (exit 1)\n"
