"""One text rule for what came from outside: a path, a cell folder's name, a wheel's name or
another program's message is printed through verify.runtime.messages.printable, so a line break in it
cannot start a second line, and so no line that GitHub Actions reads as a workflow command (`::warning::`).
`build.py report` and `build.py index` run for real, as on a runner (GITHUB_ACTIONS=true)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from verify.runtime import exit_codes
from verify.runtime.messages import printable

HOSTILE = "a\n::warning::x\r\x1b[31m"
ESCAPED = "a\\n::warning::x\\r\\x1b[31m"


@pytest.mark.parametrize(
    "text, want",
    [
        ("plain name-1.2+cu130", "plain name-1.2+cu130"),
        (HOSTILE, ESCAPED),
        ("tab\there\x00\x7f\x85\u2028end", "tab\\there\\x00\\x7f\\x85\\u2028end"),
        ("caf\u00e9 \udcff", "caf\u00e9 \\udcff"),  # printable text stays; a non-UTF-8 byte is escaped
    ],
)
def test_printable_escapes_every_control_character_and_nothing_else(text: str, want: str) -> None:
    assert printable(text) == want
    assert len(printable(text).splitlines()) == 1


def _build(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GITHUB_ACTIONS": "true", "DOCKER_HOST": "unix:///nonexistent.sock"}
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _no_command_lines(done: subprocess.CompletedProcess) -> str:
    """stdout + stderr, after checking that no line of either is a workflow command but the CLI's own
    `::error::` annotation of its error line (toolchain/cli.py; its text is the `error: ...` line's)."""
    errors = {line[len("error: ") :] for line in done.stderr.splitlines() if line.startswith("error: ")}
    for stream in (done.stdout, done.stderr):
        for line in stream.splitlines():
            command = line.lstrip(" \t")
            if command.startswith("::"):
                assert command.startswith("::error::") and command[len("::error::") :] in errors, stream
        assert "\x1b" not in stream and "\r" not in stream, stream
    return done.stdout + done.stderr


def test_report_escapes_a_cell_folder_name(tmp_path: Path) -> None:
    cell = tmp_path / "out" / "cells" / HOSTILE
    cell.mkdir(parents=True)
    (cell / "result.json").write_text("{cut")
    done = _build("report", "--out", str(tmp_path / "out"))
    assert done.returncode == exit_codes.USAGE, done.stderr
    assert f"cells/{ESCAPED}/result.json: is not valid JSON" in _no_command_lines(done)


def test_index_escapes_a_wheel_path_and_a_cell_folder_name(tmp_path: Path) -> None:
    folder = tmp_path / HOSTILE
    folder.mkdir()
    (folder / "apex-0.1-cp312-cp312-linux_x86_64.whl").write_bytes(b"not a zip")
    done = _build("index", str(folder), "--index", str(tmp_path / "index"))
    assert done.returncode == exit_codes.FAILED, done.stderr
    assert f"refused {tmp_path}/{ESCAPED}/apex-0.1" in _no_command_lines(done)

    run = tmp_path / "run"
    (run / "cells" / HOSTILE).mkdir(parents=True)
    (run / "cells" / HOSTILE / "result.json").write_text(
        json.dumps({"status": "build_failed", "build": None})
    )
    done = _build("index", str(run), "--index", str(tmp_path / "index"))
    assert done.returncode == exit_codes.USAGE, done.stderr
    assert f"build.py index: {ESCAPED}: status build_failed" in _no_command_lines(done)

    done = _build("index", str(tmp_path / "missing\n::error::y"), "--index", str(tmp_path / "index"))
    assert done.returncode == exit_codes.USAGE, done.stderr
    assert "missing\\n::error::y does not exist" in _no_command_lines(done)


@pytest.mark.parametrize(
    "text, want",
    [
        ("::warning::x", "\\x3a:warning::x"),  # a whole line of outside text is never a workflow command
        ("  ::error::y", "  \\x3a:error::y"),  # the runner reads a command after leading blanks too
        ("a ::warning:: inside", "a ::warning:: inside"),  # not at a line's start: left as it is
    ],
)
def test_printable_never_starts_a_workflow_command(text: str, want: str) -> None:
    assert printable(text) == want


def test_markdown_cells_carry_no_raw_html_and_stay_one_row() -> None:
    from toolchain.runs.report_tables import _md_escape
    from verify.report.render import _md
    from verify.runtime.messages import markdown_cell, markdown_code

    hostile = 'cell<img src=x onerror=alert(1)>|<details open>\nnext & "more"'
    for rendered in (markdown_cell(hostile), _md(hostile), _md_escape(hostile)):
        assert "<" not in rendered and ">" not in rendered and "\n" not in rendered
        assert "&lt;img" in rendered and "\\|" in rendered and "&amp;" in rendered
    assert markdown_code("a`b\nc") == "`a'b\\nc`"


def test_verify_bench_without_torch_is_one_line_even_for_a_bad_flag() -> None:
    # -S: no site-packages, so no torch; verify itself comes from the checkout (the working directory)
    for args, code in ((["--bogus"], exit_codes.USAGE), (["--steps", "x"], exit_codes.USAGE), ([], 3)):
        done = subprocess.run(
            [sys.executable, "-S", "-m", "verify", "bench", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == code and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# what may stand in a printed f-string of the index's and the new commands' print paths without printable():
# the escaping functions themselves and numbers
_ESCAPED_BY = {"printable", "shown", "bounded", "len", "int", "float", "round"}


def _unescaped_values(source: str) -> list[tuple[int, str]]:
    """(line, expression) of each value an f-string in a print(...) call interpolates outside printable()."""
    found = []

    def visit(node: ast.AST, line: int) -> None:
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", "")) in _ESCAPED_BY
        ):
            return
        if isinstance(node, ast.FormattedValue):
            value = node.value
            called = (
                getattr(value.func, "id", getattr(value.func, "attr", ""))
                if isinstance(value, ast.Call)
                else ""
            )
            if called not in _ESCAPED_BY:
                found.append((line, ast.unparse(value)))
            return
        for child in ast.iter_child_nodes(node):
            visit(child, line)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "print":
            for arg in node.args:
                visit(arg, node.lineno)
    return found


def test_the_index_and_wheel_commands_print_outside_text_only_through_printable() -> None:
    files = sorted((REPO / "toolchain" / "index").glob("*.py")) + [REPO / "toolchain/commands/wheel_index.py"]
    found = [
        f"{path.relative_to(REPO)}:{line}: {expr}"
        for path in files
        for line, expr in _unescaped_values(path.read_text(encoding="utf-8"))
    ]
    assert not found, "wrap outside text in verify.runtime.messages.printable:\n" + "\n".join(found)
    assert _unescaped_values('print(f"x {name}")\n') == [(1, "name")]  # the rule can fail
    assert _unescaped_values('print(f"x {printable(name)} {len(a)}")\n') == []
