"""Workflow commands (verify/runtime/workflow_commands.py) and the consoles that use them: what the GitHub Actions
runner would act on in their output, read the way the runner reads it."""

from __future__ import annotations

import io
import re

import pytest

from toolchain.console import Console
from toolchain.errors import BuildFailed, report
from verify.runtime import workflow_commands as wc

HOSTILE = "50% done\n::add-mask::x\r\n  ::warning::y\rz"


def runner_commands(output: str) -> list[str]:
    """The commands the Actions runner runs for this output: a line (split on CR, LF, CRLF) that starts,
    after leading whitespace, with `::`; `::stop-commands::T` turns that off until a line `::T::`."""
    ran: list[str] = []
    stopped: str | None = None
    for line in re.split(r"\r\n|\r|\n", output):
        text = line.strip()
        if stopped is not None:
            if text == f"::{stopped}::":
                stopped = None
            continue
        if text.startswith("::"):
            command = re.match(r"::([^: ]*)", text)
            assert command  # the pattern matches any text that starts with ::
            name = command.group(1)
            if name == "stop-commands":
                stopped = text.split("::")[2]
            else:
                ran.append(name)
    return ran


def test_escaping_follows_the_actions_toolkit() -> None:
    assert wc.escape_data("a%b\rc\nd:e,f") == "a%25b%0Dc%0Ad:e,f"
    assert wc.escape_property("a%b\rc\nd:e,f") == "a%25b%0Dc%0Ad%3Ae%2Cf"
    assert wc.command("error", HOSTILE, title="build x: a,b") == (
        "::error title=build x%3A a%2Cb::50%25 done%0A::add-mask::x%0D%0A  ::warning::y%0Dz"
    )
    assert wc.command("endgroup") == "::endgroup::"
    assert runner_commands(wc.command("error", HOSTILE, title=HOSTILE)) == ["error"]


def test_one_line_joins_every_kind_of_line_break() -> None:
    assert wc.one_line(HOSTILE) == "50% done | ::add-mask::x |   ::warning::y | z"
    assert wc.one_line("a\x0bb\x0cc\u2028d\x85e") == "a | b | c | d | e"
    assert wc.one_line("plain text") == "plain text"


def test_inert_fences_only_lines_that_would_be_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    log = "compiling x.cu\n::add-mask::secret\n   ::warning file=a::b\nlinking\n"
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    assert wc.inert(log) == log  # off GitHub Actions: untouched
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert runner_commands(log) == ["add-mask", "warning"]
    fenced = wc.inert(log)
    assert runner_commands(fenced) == []
    assert [
        ln
        for ln in fenced.splitlines()
        if "stop-commands" not in ln and not re.fullmatch(r"::[0-9a-f]{32}::", ln)
    ] == log.splitlines()
    tokens = re.findall(r"::stop-commands::([0-9a-f]{32})", fenced)
    assert len(tokens) == 2 and len(set(tokens)) == 2, "a fresh token for every fence"
    assert wc.inert("no command here\n") == "no command here\n"


def test_the_toolchain_console_on_github_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    stream = io.StringIO()
    console = Console(stream)
    with console.group(f"build {HOSTILE}"):
        console.status("OK", "ok", HOSTILE)
        console.error(HOSTILE, title=f"build a:b,{HOSTILE}")
        console.line("plain")
    out = stream.getvalue()
    assert runner_commands(out) == ["group", "error", "endgroup"]
    assert out.splitlines()[1] == "[  OK  ] 50% done | ::add-mask::x |   ::warning::y | z"
    assert "::error title=build a%3Ab%2C50%25 done%0A%3A%3Aadd-mask%3A%3Ax" in out


def test_a_multi_line_error_cannot_run_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    stream = io.StringIO()
    code = report(
        BuildFailed("pip wheel failed (exit 1)\n--- last lines ---\n::add-mask::x\nerror: x.cu"), stream
    )
    assert code == 1 and runner_commands(stream.getvalue()) == []
    assert stream.getvalue().startswith("error: pip wheel failed (exit 1)\n--- last lines ---\n")
    assert stream.getvalue().endswith("error: x.cu\n")


def test_another_programs_escape_sequences_reach_the_console_as_text() -> None:
    """setup.py's raw escape sequences (colour, cursor moves, a lone CR) used to reach the console."""
    line = "\x1b[2J\x1b[31mnvcc\x1b[0m warning\tdone\rfake line\x07\r\n"
    shown = wc.terminal_safe(line)
    assert "\x1b" not in shown and "\x07" not in shown and "\rf" not in shown
    assert shown == "\\x1b[2J\\x1b[31mnvcc\\x1b[0m warning\tdone\\rfake line\\x07\r\n"
    assert wc.terminal_safe("plain compiler output\n") == "plain compiler output\n"
