"""ninja's own progress, read from the build's output: the `[n/N] <command>` line ninja prints as each
edge ends (its status line when the output is not a terminal, as under pip), and setuptools'
`building '<extension>' extension` line before an extension's ninja starts.

Apex compiles its extensions side by side (APEX_PARALLEL_BUILD), one ninja per extension, so the lines of
several ninjas interleave and each counts its own n of N. A line is told apart by its compile command:
torch's build.ninja writes `-o <build>/temp.<platform>/<extension>/.../<object>.o`, and the extension is
the folder after temp.*, as in unit_runner.unit_key. `StatusTally` sums done and total over extensions;
an extension that has not printed yet counts with its expected unit count when known, else is unknown.
Stdlib only: runs inside the build image (Python 3.10).
"""

from __future__ import annotations

import dataclasses
import re
import threading

from toolchain.builder.unit_runner import unit_key

_STEP = re.compile(r"^\s*\[(\d+)/(\d+)\]\s+(.*)$")
_OUTPUT = re.compile(r"(?:^|\s)-o\s*(\S+\.o)(?=\s|$)")
_BUILDING = re.compile(r"^\s*building '([^']+)' extension\s*$")


@dataclasses.dataclass(frozen=True)
class NinjaStep:
    """One ended ninja edge: n of N in its extension's ninja, and the unit it compiled."""

    done: int
    total: int
    key: str  # extension/object

    @property
    def extension(self) -> str:
        return self.key.split("/", 1)[0]


def parse_step(line: str) -> NinjaStep | None:
    """The step of a `[n/N] command ... -o .../temp.*/<extension>/.../x.o ...` line; None for any other line
    (and for a step whose command names no object under temp.*: it cannot be given an extension)."""
    match = _STEP.match(line)
    if not match:
        return None
    output = _OUTPUT.search(match.group(3))
    key = unit_key(output.group(1)) if output else ""
    if "/" not in key:
        return None
    done, total = int(match.group(1)), int(match.group(2))
    return NinjaStep(done, total, key) if 0 < done <= total else None


def building_extension(line: str) -> str | None:
    """The extension of setuptools' `building 'amp_C' extension` line (its ninja starts next), else None."""
    match = _BUILDING.match(line)
    return match.group(1) if match else None


@dataclasses.dataclass(frozen=True)
class Count:
    done: int
    total: int
    uncounted: tuple[str, ...]  # expected extensions with no ninja line yet and no expected count

    def text(self) -> str:
        more = f" (+{len(self.uncounted)} extension(s) not counted yet)" if self.uncounted else ""
        return f"{self.done}/{self.total} units done{more}"


class StatusTally:
    """Units done of total over every extension's ninja, with when each unit ended; thread-safe (pip's
    output is fed from the build's thread, the progress line reads it from its own)."""

    def __init__(
        self, expected_units: dict[str, int], extensions: set[str] | frozenset[str] = frozenset()
    ) -> None:
        self._expected = dict(expected_units)  # extension: units the cost table predicts
        self._extensions = set(extensions) | set(expected_units)
        self._steps: dict[str, tuple[int, int]] = {}  # extension: (n, N) of its latest line
        self._ended: dict[str, float] = {}  # unit key: when its line came
        self._compile_started: float | None = None
        self._started: list[str] = []  # extensions in the order of their `building` lines
        self._lock = threading.Lock()

    def feed(self, line: str, now: float) -> None:
        step = parse_step(line)
        with self._lock:
            if step:
                n, total = self._steps.get(step.extension, (0, step.total))
                self._steps[step.extension] = (max(n, step.done), step.total)
                self._ended.setdefault(step.key, now)
                self._extensions.add(step.extension)
            elif (extension := building_extension(line)) is not None:
                if self._compile_started is None:
                    self._compile_started = now
                if extension not in self._started:
                    self._started.append(extension)

    def count(self) -> Count:
        with self._lock:
            done = sum(n for n, _ in self._steps.values())
            total = sum(t for _, t in self._steps.values())
            waiting = sorted(e for e in self._extensions if e not in self._steps)
        total += sum(self._expected[e] for e in waiting if e in self._expected)
        return Count(done, total, tuple(e for e in waiting if e not in self._expected))

    def ended(self) -> dict[str, float]:
        with self._lock:
            return dict(self._ended)

    def compile_started(self) -> float | None:
        with self._lock:
            return self._compile_started

    def started(self) -> list[str]:
        """The extensions whose ninja has started, in the order they started."""
        with self._lock:
            return list(self._started)

    def all_done(self) -> bool:
        """Every known extension's ninja has printed its N of N."""
        with self._lock:
            return bool(self._steps) and all(
                e in self._steps and self._steps[e][0] >= self._steps[e][1] for e in self._extensions
            )
