"""The run request: what `build.py image` / `build.py matrix` (and `plan`, which prints the command) were
asked to do besides the cells themselves, resolved once from the command line into one frozen record
that the run loop and the engine read."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

_PATHS = ("out", "logs", "apex_src", "wheelhouse", "extra_ca", "ccache_dir")


@dataclasses.dataclass(frozen=True)
class RunRequest:
    out: Path  # reports: out/cells/<id>/result.json, out/matrix-report.json
    logs: Path  # logs/<id>/build.log
    target: str = "runtime"  # the Dockerfile stage to ship
    apex_src: Path | None = None  # a local Apex checkout instead of git (offline builds)
    wheelhouse: Path | None = None  # wheels to install torch from (offline)
    extra_ca: Path | None = None  # a CA bundle for a TLS-intercepting proxy
    progress: str = "auto"  # BuildKit progress on the terminal: auto | plain | tty
    verify: str = "none"  # verify each built image: none | auto | require (image and matrix default to auto)
    base: str = "auto"  # which bases: auto (NVIDIA's, else the local base) | nvidia | local (toolchain/image/base_route.py)
    ccache_dir: Path | None = None  # the compiler cache carried in and out of the build (CI caches)
    ccache_mount: str | None = (
        None  # the Dockerfile's ccache mount: shared | carried (default with ccache_dir)
    )
    apex_index: str | None = None  # the cell's verified wheel from this index instead of a compile

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunRequest:
        """From build.py's options; `plan` has no --verify (it builds nothing)."""
        given = vars(args)
        return cls(**{f.name: given[f.name] for f in dataclasses.fields(cls) if f.name in given})

    def to_json(self) -> dict[str, object]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRequest:
        fields: dict[str, Any] = {k: Path(v) if k in _PATHS and v is not None else v for k, v in data.items()}
        return cls(**fields)
