"""The suite's one conftest at the root: tiers as markers by directory (tests/docker -> docker,
tests/faults -> faults, tests/gpu -> gpu, tests/apex_image -> apex_image), so a test's folder is its tier."""

from __future__ import annotations

from pathlib import Path

import pytest

_TIERS = {
    "docker": pytest.mark.docker,
    "faults": pytest.mark.faults,
    "gpu": pytest.mark.gpu,
    "apex_image": pytest.mark.apex_image,
}
_TESTS = Path(__file__).resolve().parent / "tests"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if _TESTS in path.parents:
            mark = _TIERS.get(path.relative_to(_TESTS).parts[0])
            if mark is not None:
                item.add_marker(mark)
