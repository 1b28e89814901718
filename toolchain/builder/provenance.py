"""Provenance for the manifest: the Apex tree's identity (commit, ref, source, version), the wheel's
sha256, and the torch stage's `sha256sum` lines. Standard library only (runs inside the build image).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from toolchain.errors import UsageError
from verify.runtime import input_files


def sha256_of(path: Path) -> str:
    """A wheel's (or zipapp's) sha256, read in pieces through the bounded reader."""
    return input_files.sha256_file(path, input_files.WHEEL)[0]


def apex_identity(src: Path, ref: str | None, source: str | None, commit: str | None) -> dict:
    if commit is None and (src / ".git").exists() and shutil.which("git"):
        try:
            commit = subprocess.run(
                ["git", "-C", str(src), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
            ).stdout.strip()
        except subprocess.CalledProcessError:
            commit = None
    version = re.search(r"""version\s*=\s*["']([^"']+)""", _setup_text(src))
    return {
        "commit": commit,
        "ref": ref,
        "source": source or f"dir:{src.resolve()}",
        "version": version.group(1) if version else None,
    }


def _setup_text(src: Path) -> str:
    try:
        return input_files.read_text_lenient(src / "setup.py", input_files.SOURCE_FILE)
    except input_files.InputFileError as error:
        raise UsageError(f"--apex-src {error}") from None


def wheel_hashes(paths: list[str]) -> dict[str, str]:
    """{wheel file name: sha256} from `sha256sum *.whl` output: the torch stage hashes the exact
    wheels it installed (provenance)."""
    hashes: dict[str, str] = {}
    for path in paths:
        try:
            lines = input_files.read_text(path, input_files.WHEEL_HASHES).splitlines()
        except input_files.InputFileError as error:
            raise UsageError(f"--wheel-hashes {error}") from None
        for line in lines:
            digest, _, name = line.strip().partition("  ")
            if not re.fullmatch(r"[0-9a-f]{64}", digest) or not name:
                raise UsageError(f"--wheel-hashes {path}: {line!r} is not a `sha256sum` line (HASH  FILE)")
            hashes[Path(name.lstrip("*")).name] = digest
    return hashes
