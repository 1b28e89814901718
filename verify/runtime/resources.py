"""verify's own data files (module map, driver facts, report schema, the import probe's source), read
the same way whether verify is a directory on disk or runs from a zipapp (`build.py zipapp`): through
importlib.resources, never through `__file__` paths, which do not exist inside a zip."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def read_text(relative: str) -> str:
    """The text of `relative` (e.g. "data/apex_modules.json") inside the verify package."""
    node = resources.files("verify")
    for part in relative.split("/"):  # one joinpath per part: Python 3.10's zip paths take one at a time
        node = node.joinpath(part)
    return node.read_text(encoding="utf-8")


def read_json(relative: str) -> Any:
    """read_text, parsed as JSON: the package's own data files (the named route for shipped data)."""
    return json.loads(read_text(relative))
