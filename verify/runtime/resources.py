"""verify's own data files (module map, driver facts, report schema, the import probe's source), read
the same way whether verify is a directory on disk or runs from a zipapp (`build.py zipapp`): through
importlib.resources, never through `__file__` paths, which do not exist inside a zip."""

from __future__ import annotations

from importlib import resources


def read_text(relative: str) -> str:
    """The text of `relative` (e.g. "data/apex_modules.json") inside the verify package."""
    node = resources.files("verify")
    for part in relative.split("/"):  # one joinpath per part: Python 3.10's zip paths take one at a time
        node = node.joinpath(part)
    return node.read_text(encoding="utf-8")
