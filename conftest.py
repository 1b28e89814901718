"""The suite's one conftest at the root: tiers as markers by directory (tests/docker -> docker,
tests/faults -> faults, tests/gpu -> gpu, tests/apex_image -> apex_image), so a test's folder is its tier."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

# setuptools' distutils shim must run in a clean interpreter. Some tests reach `torch.utils.cpp_extension`
# (hence setuptools) in-process; in a test worker where another test had already loaded the standard
# library's distutils, that first import failed in the shim's own assert (two CI rehearsals, two different
# tests). Importing setuptools once here, before any test, makes every later import a lookup.
if importlib.util.find_spec("setuptools") is not None:
    import setuptools  # type: ignore[import-untyped]  # noqa: F401

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
