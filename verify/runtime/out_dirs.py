"""Output directories a failed command created and left empty are removed; nothing that existed is touched.

A command notes its output paths before it starts (`OutputDirs([out, logs])`); if it then fails,
`remove_empty()` deletes, deepest first, those of the paths and their parents that did not exist at
that moment, with the folders made inside them, when they are empty now. A directory that existed
is never looked into. Only directories are removed, and `rmdir` refuses one with anything in it, so a
file written meanwhile (by this run or another) keeps its directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path


class OutputDirs:
    def __init__(self, paths: Iterable[str | os.PathLike | None]) -> None:
        self._missing: set[Path] = set()  # the paths and their parents that did not exist
        self._new_roots: list[Path] = []  # missing paths: everything under them is this run's
        for path in paths:
            if path is None or os.fspath(path) == "":
                continue
            current = Path(os.path.abspath(os.fspath(path)))
            if not os.path.lexists(current):
                self._new_roots.append(current)
            while not os.path.lexists(current) and current != current.parent:
                self._missing.add(current)
                current = current.parent

    def run(self, body: Callable[[], int]) -> int:
        """body()'s exit code; when it is not 0, or body raises, remove_empty() first."""
        try:
            code = body()
        except BaseException:
            self.remove_empty()
            raise
        if code != 0:
            self.remove_empty()
        return code

    def remove_empty(self) -> list[Path]:
        """Remove the noted directories (and folders made inside them) that are empty now."""
        made = set(self._missing)
        for root in self._new_roots:
            if root.is_dir() and not root.is_symlink():
                for current, dirs, _files in os.walk(root):  # does not follow symlinks
                    made.update(Path(current) / d for d in dirs)
        removed = []
        for directory in sorted(made, key=lambda p: len(p.parts), reverse=True):
            try:
                if directory.is_dir() and not directory.is_symlink():
                    directory.rmdir()
                    removed.append(directory)
            except OSError:  # not empty, or not ours to remove: leave it
                continue
        return removed
