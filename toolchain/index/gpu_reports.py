"""A GPU verify report attached to the published wheel it verified (`build.py index --gpu-report REPORT`).

The publish workflow's optional GPU job installs the very wheel the index publishes and runs verify's full
run; its report.json names that build twice over: the installed Apex's version (`apex.distribution.version`,
`0.1+g6424da3.cu130.torch2.11`: commit, CUDA, torch minor) and the build manifest verify found in the wheel
(`manifest.data.build.started_at`). A published wheel with both the same is that build (retagging changes
neither). The report lands beside the wheel as `verify-gpu.json`; the top page shows its verdict."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from toolchain.errors import UsageError
from verify.runtime import input_files

FILE = "verify-gpu.json"


@dataclasses.dataclass(frozen=True)
class GpuReport:
    path: Path
    version: str  # the installed Apex's version
    built_at: str  # its build manifest's build.started_at
    verdict: str
    data: bytes  # the report as read (published as it is)


def _field(data: Any, *keys: str) -> object:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def read(path: Path) -> GpuReport:
    """The report, or UsageError (exit 2) naming what makes it unusable here."""
    try:
        raw = input_files.read_bytes(path, input_files.VERIFY_REPORT)
        data = input_files.decode_json(raw, str(path), input_files.VERIFY_REPORT)
    except input_files.InputFileError as exc:
        raise UsageError(f"--gpu-report {exc}") from None
    version = _field(data, "apex", "distribution", "version")
    built_at = _field(data, "manifest", "data", "build", "started_at")
    verdict, mode = _field(data, "verdict"), _field(data, "mode")
    if not (isinstance(version, str) and isinstance(built_at, str) and isinstance(verdict, str)):
        raise UsageError(
            f"--gpu-report {path}: names no installed Apex wheel and build (apex.distribution.version, "
            "manifest.data.build.started_at); pass the report.json of `python -m verify` run where the "
            "wheel is installed"
        )
    if mode == "static":
        raise UsageError(
            f"--gpu-report {path}: a --static run (no GPU check); pass the report of verify's full run on a GPU"
        )
    return GpuReport(path, version, built_at, verdict, raw)
