"""The one check of a path given on a command line (build.py's and the builder's)."""

from __future__ import annotations

import argparse
from pathlib import Path


def path_value(text: str) -> Path:
    """Every path option's one check (argparse `type=`, build.py's and the builder's): '' would be the
    current folder, NUL is no path at all, a `~user` with no such user raises deep inside pathlib when the
    path is used (a RuntimeError traceback)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty path (it would mean the current folder); name a file or folder"
        )
    if "\x00" in text:
        raise argparse.ArgumentTypeError("a path with a NUL character; name a file or folder")
    try:
        Path(text).expanduser()  # checked here; the request keeps the path as written (its manifest says so)
    except RuntimeError:  # "Could not determine home directory."
        raise argparse.ArgumentTypeError(
            f"{text}: {text.split('/')[0]} names no user's home on this machine; write the path without ~"
        ) from None
    return Path(text)


def expanded_path_value(text: str) -> Path:
    """build.py's path options: the same check, and a `~` that reached it quoted expanded as the shell would
    have (`zipapp --out '~/x'` had made a folder named `~`). The builder keeps its paths as written."""
    return path_value(text).expanduser()
