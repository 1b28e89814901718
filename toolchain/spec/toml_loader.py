"""Read a TOML file: through verify's bounded reader (regular files only, size-capped, UTF-8), parsed by
stdlib tomllib (3.11+), else the tomli backport; every problem becomes a one-line UsageError (exit 2)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from toolchain.errors import UsageError
from verify.runtime import input_files

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the build extra's backport
    import tomli as tomllib


def load_toml(path: str | Path, kind: input_files.InputKind = input_files.MATRIX) -> dict[str, Any]:
    path = Path(path)
    try:
        text = input_files.read_text(path, kind)
    except input_files.InputFileError as exc:
        if exc.reason == "missing":
            raise UsageError(f"{path}: file not found; {kind.fix}") from None
        if exc.reason == "not_regular" and path.is_dir():
            raise UsageError(
                f"{path}: is a directory, not a TOML file; pass the file itself, e.g. {path / 'matrix.toml'}"
            ) from None
        raise UsageError(str(exc)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: malformed TOML ({exc}); fix the syntax at that line") from None
    except (
        ValueError
    ) as exc:  # not a syntax error: e.g. an integer beyond Python's 4300-digit conversion limit
        why = str(exc).split(":")[0][:200]
        raise UsageError(f"{path}: malformed TOML (a value cannot be read: {why}); fix that value") from None
    except RecursionError:  # tomllib recurses once per nested array / inline table
        raise UsageError(
            f"{path}: malformed TOML (arrays or inline tables nested too deeply to read); "
            "a matrix needs at most one level of lists"
        ) from None
