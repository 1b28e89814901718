"""ValueProblem: a domain value that does not parse, with what is wrong and the fix. Each caller says it in
its own terms (a cell's problem list, an exit-2 UsageError naming the option)."""

from __future__ import annotations


class ValueProblem(ValueError):
    """A value that does not parse: `problem` (what is wrong with it) and `fix` (what to write instead)."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem
        self.fix = fix
