"""One text rule for what came from outside: a path, a cell folder's name, a wheel's name or
another program's message is printed through verify.runtime.messages.printable, so a line break in it
cannot start a second line, and so no line that GitHub Actions reads as a workflow command (`::warning::`).
`build.py report` and `build.py index` run for real, as on a runner (GITHUB_ACTIONS=true)."""

from __future__ import annotations

import ast
import json
import os
import re
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


# what may stand in printed text without printable(): the escaping functions themselves and numbers
_ESCAPED_BY = {
    "printable",
    "shown",
    "bounded",
    "one_line",
    "inert",
    "command",  # workflow_commands.command: a workflow command built from escaped text
    "json_dumps",  # JSON escapes every control character
    "terminal",  # verify/report/render.py: each check's id and summary through workflow_commands.one_line
    "len",
    "int",
    "float",
    "round",
}
# a format spec that only a number takes (`{x:.1f}`, `{n:d}`, `{share:.0%}`, `{size:,}`)
_NUMBER_SPEC = re.compile(r"[-+ ]?#?0?\d*[,_]?(\.\d+)?[bdeEfFgGn%xXo]|[,_]")
# the CLI entries: build.py and its commands, verify (its CLI, install, bench), cluster/ and scripts/
_ENTRIES: tuple[str, ...] = ("build.py", "toolchain", "verify/cli.py", "verify/__main__.py", "verify/install")
_ENTRIES += ("verify/bench", "cluster", "scripts")
# files left out, each with why
_NOT_PRINTED_DIRECTLY = {
    "toolchain/builder/unit_runner.py": "ninja runs it by path without the project (no printable to import); its "
    "stderr reaches the user only through the builder's run_logged, which makes every line inert",
    "scripts/coverage_table.py": "prints coverage's figures for the project's own package folders: no outside text",
}
# the output functions whose own print is the one path for their callers, whose arguments this rule checks
_OUTPUT_FUNCTIONS = {"line": "toolchain/console.py: Console.line, the print path of build.py's commands"}


def _called(node: ast.AST) -> str:
    return getattr(node.func, "id", getattr(node.func, "attr", "")) if isinstance(node, ast.Call) else ""


def _is_output(call: ast.Call) -> bool:
    """print(...), sys.stdout.write(...), sys.stderr.write(...) or console.line(...)."""
    name = ast.unparse(call.func)
    return name in ("print", "sys.stdout.write", "sys.stderr.write", "console.line")


def _is_escaped(node: ast.AST) -> bool:
    """Text of the source, an escaping function's answer (printable, ...) or a module's own constant."""
    return (
        isinstance(node, ast.Constant)
        or _called(node) in _ESCAPED_BY
        or (isinstance(node, ast.Name) and node.id.isupper())
    )


def _unescaped_in(node: ast.AST) -> list[str]:
    """The expressions of a printed value that are outside text: not escaped, not a number."""
    if _is_escaped(node):
        return []
    if isinstance(node, ast.FormattedValue):
        spec = ast.unparse(node.format_spec)[2:-1] if node.format_spec else ""
        if node.conversion in (ord("r"), ord("a")) or _NUMBER_SPEC.fullmatch(spec):
            return []  # repr and ascii escape control characters themselves
        return _unescaped_in(node.value)
    parts = {
        ast.JoinedStr: lambda n: n.values,
        ast.BinOp: lambda n: [n.left, n.right],
        ast.IfExp: lambda n: [n.body, n.orelse],
    }.get(type(node))
    if parts is None:
        return [ast.unparse(node)]
    return [found for part in parts(node) for found in _unescaped_in(part)]


def _unescaped_values(source: str) -> list[tuple[int, str]]:
    """(line, expression) of each value printed (print, sys.stdout/stderr.write, console.line) that is not
    text of the source, an escaping function's answer (printable, ...), a number or a module's constant."""
    found: list[tuple[int, str]] = []

    def calls(tree: ast.AST, function: str) -> None:
        for node in ast.iter_child_nodes(tree):
            if isinstance(node, ast.Call) and _is_output(node) and function not in _OUTPUT_FUNCTIONS:
                found.extend((node.lineno, expr) for arg in node.args for expr in _unescaped_in(arg))
            calls(node, node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else function)

    calls(ast.parse(source), "")
    return sorted(found)


def _entry_files() -> list[Path]:
    files: list[Path] = []
    for entry in _ENTRIES:
        path = REPO / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return [f for f in files if f.relative_to(REPO).as_posix() not in _NOT_PRINTED_DIRECTLY]


def test_every_cli_entry_prints_outside_text_only_through_printable() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: {expr}"
        for path in _entry_files()
        for line, expr in _unescaped_values(path.read_text(encoding="utf-8"))
    ]
    assert not found, "wrap outside text in verify.runtime.messages.printable:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('print(f"x {name}")\n', [(1, "name")]),
        ('sys.stderr.write(f"{prog}: {err}\\n")\n', [(1, "err"), (1, "prog")]),
        ('print(f"{a:>10}", file=sys.stderr)\n', [(1, "a")]),  # a width is no number's mark
        ('print(f"x {printable(name)} {len(a)} {n:.1f} {share:.0%} {size:,} {v!r}")\n', []),
        ("print(name)\n", [(1, "name")]),
        ('console.line("x: " + path.name)\n', [(1, "path.name")]),
        ('print(render(report), "%s" % PROG, "a" if x else b)\n', [(1, "b"), (1, "render(report)")]),
        ('print(printable(f"x {name} {exc}"))\n', []),
        ('log.write(f"{name}")\n', []),
        ('print(f"{PROG}: {Name}")\n', [(1, "Name")]),  # a file, not the terminal or the runner's log
    ],
)
def test_the_print_rule_catches_outside_text_and_passes_escaped_text(source: str, found: list) -> None:
    assert _unescaped_values(source) == found
