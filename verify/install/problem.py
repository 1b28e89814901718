"""What stops `apex-verify install`: one line (the input, the problem, the fix) and its exit code."""

from __future__ import annotations

from verify.runtime import exit_codes


class InstallProblem(Exception):
    """str() is the one line; `exit_code` is exit_codes.USAGE (the user's input) or ENVIRONMENT."""

    def __init__(self, line: str, exit_code: int = exit_codes.ENVIRONMENT) -> None:
        super().__init__(line)
        self.exit_code = exit_code
