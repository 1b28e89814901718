"""Progress output that reads well in a terminal and stays plain in CI logs.

On GitHub Actions (GITHUB_ACTIONS=true) a cell's build is folded with ::group:: and a failure becomes
an ::error:: annotation; on a terminal, status words are coloured; elsewhere, plain lines.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import TextIO

_COLOURS = {"ok": "32", "fail": "31", "warn": "33", "info": "36"}


class Console:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.github = os.environ.get("GITHUB_ACTIONS") == "true"
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
        self.line(f"[{self._paint(word.center(6), kind)}] {text}")

    def error(self, text: str, *, title: str | None = None) -> None:
        if self.github:  # an annotation on the run's summary page
            prefix = f"::error title={_escape(title)}::" if title else "::error::"
            self.line(prefix + _escape(text))
        else:
            self.status("FAIL", "fail", text)

    @contextlib.contextmanager
    def group(self, title: str) -> Iterator[None]:
        start = time.monotonic()
        if self.github:
            self.line(f"::group::{title}")
        else:
            self.line(self._paint("==> ", "info") + title)
        try:
            yield
        finally:
            if self.github:
                self.line("::endgroup::")
            elif self.colour:
                self.line(self._paint(f"    ({time.monotonic() - start:.0f} s)", "info"))


def _escape(text: str) -> str:
    """Workflow-command escaping: https://github.com/actions/toolkit/blob/main/packages/core/src/command.ts"""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
