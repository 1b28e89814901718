"""Errors a user can cause or meet, each carrying its exit code, and the one place that reports them.

Every message names the input, the problem and the fix; `report()` turns any of them into one line on
stderr plus the documented exit code (verify/runtime/exit_codes.py), never a traceback.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TextIO

from verify.runtime import exit_codes, workflow_commands
from verify.runtime.messages import bounded
from verify.runtime.workflow_commands import one_line


class ToolchainError(Exception):
    """Base class: `str(err)` is the one-line message shown to the user."""

    exit_code: int = exit_codes.FAILED


class UsageError(ToolchainError):
    """Bad input: arguments, matrix file, manifest. Nothing was built."""

    exit_code = exit_codes.USAGE


class EnvironmentUnavailable(ToolchainError):
    """Something the run needs is missing: Docker daemon, GPU runtime, disk, registry."""

    exit_code = exit_codes.ENVIRONMENT


class BuildFailed(ToolchainError):
    """A build (or a verification gate inside it) failed."""

    exit_code = exit_codes.FAILED


@dataclasses.dataclass(frozen=True)
class CellProblem:
    """One thing wrong with one matrix cell: where, what, and what to do instead."""

    cell: str  # where: "cell cu124" (a matrix.toml table) or "command line"
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.cell}: {self.problem}; {self.fix}"


class MatrixError(UsageError):
    """Every problem found in a matrix, reported together so one edit fixes them all."""

    def __init__(self, problems: list[CellProblem], source: str = "matrix.toml") -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__(self._message())

    def _message(self) -> str:
        prefix = f"{self.source}: " if self.source else ""
        if len(self.problems) == 1:
            return f"{prefix}{one_line(str(self.problems[0]))}"
        lines = [f"{prefix}{len(self.problems)} problems, nothing built"]
        lines += [f"  - {one_line(str(p))}" for p in self.problems]  # a quoted key may hold a newline
        return "\n".join(lines)


def report(err: ToolchainError, stream: TextIO | None = None) -> int:
    """Print the error for a user (no traceback) and return its exit code. A message can quote a user's
    value or a log's lines: inert, so that on GitHub Actions none of them runs as a workflow command."""
    stream = stream or sys.stderr
    print(workflow_commands.inert(f"error: {bounded(str(err))}\n"), file=stream, end="")
    return err.exit_code
