"""GitHub Actions workflow commands (`::error title=T::message`), written so that no text becomes one.

The runner treats every output line that starts, after leading spaces, with `::` as a command
(`::add-mask::`, `::warning::`, `::stop-commands::`, ...), on stdout and stderr alike. So:
- text inside a command is escaped as the Actions toolkit does (packages/core/src/command.ts): the
  message `%` CR LF, a property also `:` and `,`; `command()` is the one place that builds a line;
- a line that must stay one line (a check summary, a status line) goes through `one_line`;
- text from elsewhere that may hold lines of its own (a build log, a compiler's output) goes through
  `inert`: on GitHub Actions, a line of it that would read as a command is fenced by
  `::stop-commands::TOKEN` ... `::TOKEN::`, GitHub's own switch for untrusted output.
Used by verify's terminal report and by toolchain's console; standard library only.
"""

from __future__ import annotations

import os
import re
import secrets

# every line break Python's str.splitlines knows (the runner splits on CR and LF; terminals on more)
_LINE_BREAKS = re.compile(r"[\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]+")
_COMMAND_START = re.compile(r"^[ \t]*::")


def active() -> bool:
    """Running as a GitHub Actions step."""
    return os.environ.get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str = "", **properties: str | None) -> str:
    """One workflow-command line, e.g. command("error", "x failed", title="build x")."""
    props = ",".join(
        f"{key}={escape_property(value)}" for key, value in properties.items() if value is not None
    )
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def one_line(text: str) -> str:
    """Text on one line: each run of line breaks becomes ' | '."""
    return _LINE_BREAKS.sub(" | ", str(text))


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)")


def terminal_safe(text: str) -> str:
    """Another program's output shown on this console: escape sequences and control characters (an ESC
    that recolours or moves the cursor, a lone CR that overwrites the line) become visible `\x1b` text;
    tabs and line ends stay. Without it, setup.py's raw escape sequences reached the console."""
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text)


def inert(text: str) -> str:
    """`text` unchanged, except on GitHub Actions where each line that would start a command is fenced
    with stop-commands (a fresh token each time, as GitHub asks)."""
    if not active() or "::" not in text:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        if _COMMAND_START.match(line):
            token = secrets.token_hex(16)
            end = "" if line.endswith(("\n", "\r")) else "\n"
            line = f"::stop-commands::{token}\n{line}{end}::{token}::\n"
        out.append(line)
    return "".join(out)
