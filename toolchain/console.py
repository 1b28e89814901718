"""Progress output that reads well in a terminal and stays plain in CI logs.

On GitHub Actions (GITHUB_ACTIONS=true) a cell's build is folded with ::group:: and a failure becomes
an ::error:: annotation; on a terminal, status words are coloured; elsewhere, plain lines. Commands are
built and text kept inert by verify.runtime.workflow_commands (shared with verify's report): a status line is
one line, whatever a cell name or an error holds. The stream is sys.stdout, which build.py's entry point
(verify.runtime.entry_point) makes tolerant: a closed pipe, a closed stdout or a full disk never raise here.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import TextIO

from verify.runtime import workflow_commands

_COLOURS = {"ok": "32", "fail": "31", "warn": "33", "info": "36"}


class Console:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.github = workflow_commands.active()
        self.colour = (
            not self.github
            and "NO_COLOR" not in os.environ
            and hasattr(self.stream, "isatty")
            and self.stream.isatty()
        )

    def _paint(self, word: str, kind: str) -> str:
        return f"\033[{_COLOURS[kind]}m{word}\033[0m" if self.colour else word

    def line(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def status(self, word: str, kind: str, text: str) -> None:
        """`[ OK ] cell ...`: a fixed-width status word, then the message."""
        self.line(f"[{self._paint(word.center(6), kind)}] {workflow_commands.one_line(text)}")

    def error(self, text: str, *, title: str | None = None) -> None:
        if self.github:  # an annotation on the run's summary page
            self.line(workflow_commands.command("error", text, title=title))
        else:
            self.status("FAIL", "fail", text)

    @contextlib.contextmanager
    def group(self, title: str) -> Iterator[None]:
        start = time.monotonic()
        if self.github:
            self.line(workflow_commands.command("group", workflow_commands.one_line(title)))
        else:
            self.line(self._paint("==> ", "info") + workflow_commands.one_line(title))
        try:
            yield
        finally:
            if self.github:
                self.line(workflow_commands.command("endgroup"))
            elif self.colour:
                self.line(self._paint(f"    ({time.monotonic() - start:.0f} s)", "info"))
