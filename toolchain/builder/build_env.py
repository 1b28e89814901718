"""The build's environment, composed in one place from what each step adds.

No step writes a shared dict: each returns an EnvStep (the variables it sets, the ones it removes), and
BuildEnv applies them in order onto the caller's environment. The steps, in order (apex_builder.py):
the venv's bin on PATH; the index CUDA (build_tools.py: CUDA_HOME, its bin on PATH); the flags and
archs setup.py reads (only those asked for: a stray APEX_* in the shell must not leak in); the
parallelism (MAX_JOBS, APEX_PARALLEL_BUILD, NVCC_APPEND_FLAGS); ccache; the unit runner (PYTORCH_NVCC).

Standard library only: it runs inside the build image.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping


@dataclasses.dataclass(frozen=True)
class EnvStep:
    """What one step adds to the environment: `unsets` are removed first, then `sets` applied."""

    step: str  # the step's name, as the builder's steps are named
    sets: tuple[tuple[str, str], ...] = ()
    unsets: frozenset[str] = frozenset()

    @classmethod
    def of(cls, step: str, sets: Mapping[str, str] | None = None, unsets: Iterable[str] = ()) -> EnvStep:
        return cls(step, tuple((sets or {}).items()), frozenset(unsets))

    def applied(self, env: Mapping[str, str]) -> dict[str, str]:
        out = {k: v for k, v in env.items() if k not in self.unsets}
        out.update(self.sets)
        return out


def path_first(env: Mapping[str, str], directory: str) -> str:
    """PATH with `directory` in front (what a step that brings its own tools sets)."""
    return os.pathsep.join([directory, env.get("PATH", "")])


@dataclasses.dataclass(frozen=True)
class BuildEnv:
    """The caller's environment and the steps so far; `vars()` is the one place they are composed."""

    base: tuple[tuple[str, str], ...]
    steps: tuple[EnvStep, ...] = ()

    @classmethod
    def of(cls, base: Mapping[str, str]) -> BuildEnv:
        return cls(tuple(base.items()))

    def plus(self, *steps: EnvStep) -> BuildEnv:
        return dataclasses.replace(self, steps=self.steps + steps)

    def vars(self) -> dict[str, str]:
        """The environment the next command runs in (a fresh dict: changing it changes no step)."""
        env = dict(self.base)
        for step in self.steps:
            env = step.applied(env)
        return env
