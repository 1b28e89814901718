"""Read a TOML file: stdlib tomllib (3.11+), else the tomli backport; a syntax error becomes a UsageError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.errors import UsageError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise UsageError(f"{path}: file not found; pass an existing file with --matrix PATH") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a TOML file; pass the file itself, e.g. {path / 'matrix.toml'}") from None
    except OSError as exc:  # unreadable (permissions, I/O): the path and why, not a traceback
        raise UsageError(f"{path}: cannot read it ({exc.strerror or exc}); check the path and its permissions") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: malformed TOML ({exc}); fix the syntax at that line") from None
