"""Console output that goes wrong, and text that could become a command, through the real CLIs.

The rule (verify/runtime/console_streams.py): console output is a view of the run, so losing it never changes
the exit code and never prints a traceback. A closed pipe and a closed stdout are silent; any other
write error (stdout on /dev/full) is one line on stderr; an encoding that cannot hold a character gets
a backslash escape. On GitHub Actions no text of a check, an error or a cell name starts a line that
the runner would act on (verify/runtime/workflow_commands.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.faultlib import REPO
from verify.runtime import exit_codes

VERIFY = [sys.executable, "-m", "verify", "--static"]
BUILD_PY = [sys.executable, str(REPO / "build.py")]
NON_ASCII_MATRIX = '[defaults]\npython = "3.11"\narchs = ["9.0"]\n\n[cells."café"]\ncuda = "12.4"\n'


def _env(extra_path: Path | None = None, **kw: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("APEX_BUILD_MANIFEST", "GITHUB_ACTIONS")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (extra_path, REPO) if p)
    return {**env, **kw}


def _shell(command: list[str], redirect: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """COMMAND REDIRECT as a user types it in bash; stderr is captured."""
    line = " ".join(f"'{word}'" for word in command) + f" {redirect}"
    return subprocess.run(
        ["bash", "-c", f"exec {line}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=180,
    )


def _closed_pipe(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """The reader of stdout is gone before the first line (what `| head -1` becomes once head exits)."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout and proc.stderr
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    return proc.wait(timeout=180), stderr


# `| head -1` is not among them: these CLIs' output fits in a pipe's buffer, so the write usually ends
# before head exits and nothing is shown; "closed pipe" is what it becomes when head has already gone.
STDOUT_FAULTS = ["closed pipe", "closed stdout (>&-)", "/dev/full"]


def _run_with(fault: str, command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    if fault == "closed pipe":
        return _closed_pipe(command, cwd, env)
    done = _shell(command, ">&-" if fault.startswith("closed") else ">/dev/full", cwd, env)
    return done.returncode, done.stderr


@pytest.mark.parametrize("fault", STDOUT_FAULTS)
def test_verify_stdout_faults_keep_the_exit_code_and_print_no_traceback(tmp_path: Path, fault: str) -> None:
    report = tmp_path / "r.json"
    code, stderr = _run_with(fault, [*VERIFY, "--json", str(report)], tmp_path, _env())
    assert code == json.loads(report.read_text())["exit_code"] == exit_codes.FAILED  # no Apex here: FAIL
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    if fault == "/dev/full":
        assert stderr.splitlines() == [
            "verify: cannot write to stdout (No space left on device); its output is "
            "dropped, the exit code still reports the run"
        ]
    else:
        assert stderr == ""


@pytest.mark.parametrize("fault", STDOUT_FAULTS)
def test_build_py_stdout_faults_keep_the_exit_code_and_print_no_traceback(tmp_path: Path, fault: str) -> None:
    code, stderr = _run_with(fault, [*BUILD_PY, "plan", "--cuda", "12.4"], tmp_path, _env())
    assert code == exit_codes.OK
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    if fault == "/dev/full":
        assert "build.py: cannot write to stdout (No space left on device)" in stderr


@pytest.mark.parametrize(
    "locale", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}]
)
def test_an_ascii_only_console_gets_escapes_not_unicode_errors(
    tmp_path: Path, locale: dict[str, str]
) -> None:
    report = tmp_path / "r.json"
    done = subprocess.run(
        [*VERIFY, "--json", str(report)],
        cwd=tmp_path,
        env=_env(None, **locale),
        capture_output=True,
        timeout=180,
    )
    assert done.returncode == json.loads(report.read_text())["exit_code"], done.stderr
    assert b"Traceback" not in done.stderr and done.stdout.isascii()
    assert "verify static: FAIL \\u2014" in done.stdout.decode()  # the verdict line's dash, escaped
    matrix = tmp_path / "m.toml"
    matrix.write_text(NON_ASCII_MATRIX, encoding="utf-8")
    done = subprocess.run(
        [*BUILD_PY, "plan", "--matrix", str(matrix)],
        cwd=tmp_path,
        env=_env(None, **locale),
        capture_output=True,
        timeout=180,
    )
    # a non-ASCII cell name is refused; the refusal names it in escapes, never a UnicodeEncodeError
    assert done.returncode == exit_codes.USAGE, done.stderr
    assert (
        b"Traceback" not in done.stderr
        and done.stderr.isascii()
        and "cell 'caf\\xe9'" in done.stderr.decode()
    )


def _command_lines(text: str) -> list[str]:
    """Lines the Actions runner acts on: those that start, after leading whitespace, with `::`."""
    return [
        line.lstrip()
        for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if line.lstrip().startswith("::")
    ]


HOSTILE = "boom 100%\n::add-mask::x\r\n::warning::y"


def test_on_github_actions_a_check_summary_cannot_emit_workflow_commands(tmp_path: Path) -> None:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "amp_C.py").write_text(f"raise ImportError({HOSTILE!r})\n")
    done = subprocess.run(
        VERIFY,
        cwd=tmp_path,
        env=_env(mods, GITHUB_ACTIONS="true"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == exit_codes.FAILED, done.stderr
    commands = _command_lines(done.stdout + done.stderr)
    assert commands and all(c.startswith("::error title=verify ") for c in commands), commands
    amp = [c for c in commands if c.startswith("::error title=verify extensions.amp_C::")]
    assert amp == [
        "::error title=verify extensions.amp_C::import failed: ImportError: boom 100%25%0A::add-mask::x"
        "%0D%0A::warning::y (needed by FusedAdam, FusedSGD, FusedLAMB, FusedNovoGrad)"
    ]
    assert (
        "FAIL  extensions.amp_C" in done.stdout
        and "ImportError: boom 100% | ::add-mask::x | ::warning::y (needed by" in done.stdout
    )


def test_on_github_actions_user_input_in_errors_cannot_emit_workflow_commands(tmp_path: Path) -> None:
    env = _env(GITHUB_ACTIONS="true")
    done = subprocess.run(
        [*VERIFY, "--require", "FusedAdam\n::add-mask::x"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == exit_codes.USAGE and len(done.stderr.splitlines()) == 1, done.stderr
    assert _command_lines(done.stdout + done.stderr) == []
    matrix = tmp_path / "hostile.toml"
    matrix.write_text(
        '[cells."a\\n::add-mask::x"]\ncuda = "12.4"\ntorch = "2.8"\n\n[cells.b]\ncuda = "12.4"\n'
        'pyhton = "3.11"\n'
    )
    done = subprocess.run(
        [*BUILD_PY, "validate", "--matrix", str(matrix)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == exit_codes.USAGE, done.stderr
    assert _command_lines(done.stdout + done.stderr) == [f"::error::{matrix}: 6 problems, nothing built"]
    # the hostile name is shown quoted, its line break as \n (the name itself is refused)
    assert "  - cell 'a\\n::add-mask::x': torch 2.8 has no wheel for CUDA 12.4" in done.stderr
