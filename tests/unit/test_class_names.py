"""Each class name is used once across the project's code, so a name says which record it is (a reader,
a grep or a traceback never has to ask which `Plan` or `RunRequest`)."""

from __future__ import annotations

import ast
from collections import defaultdict

from tests.support import REPO

ROOTS = ("verify", "toolchain", "scripts", "tests")


def class_homes() -> dict[str, list[str]]:
    """class name -> the files that define it (nested classes too)."""
    homes: dict[str, list[str]] = defaultdict(list)
    files = [REPO / "build.py", *(p for root in ROOTS for p in sorted((REPO / root).rglob("*.py")))]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                homes[node.name].append(path.relative_to(REPO).as_posix())
    return homes


def test_each_class_name_is_defined_once() -> None:
    twice = {name: files for name, files in class_homes().items() if len(files) > 1}
    assert twice == {}, "rename one of each pair to what it is"


def test_the_scan_reads_verify_toolchain_and_the_tests() -> None:
    homes = class_homes()
    assert homes["VerifyRequest"] == ["verify/pipeline.py"] and homes["RunRequest"] == [
        "toolchain/runs/run_request.py"
    ]
    assert homes["DockerfileStage"] == ["tests/support.py"]
