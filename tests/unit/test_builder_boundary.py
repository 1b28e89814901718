"""The in-image boundary as a checked rule: toolchain/builder/ runs inside the build image (Python 3.10,
no tomllib, no Docker SDK), so it must import with both unavailable and pull in no other stage."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from tests.support import REPO

BUILDER = REPO / "toolchain" / "builder"

# A real interpreter in which `import tomllib` / `import docker` fail as they do in the image.
_BLOCKED_IMPORT = textwrap.dedent(
    """
    import importlib.abc, pkgutil, sys

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"tomllib", "tomli", "docker"}:
                raise ImportError(f"blocked: {name} is not in the build image", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    for stale in [m for m in sys.modules if m.split(".")[0] in {"tomllib", "docker"}]:
        del sys.modules[stale]
    import toolchain.builder
    names = [info.name for info in pkgutil.iter_modules(toolchain.builder.__path__, "toolchain.builder.")]
    for name in names:
        __import__(name)
    loaded = sorted(m for m in sys.modules if m.startswith("toolchain."))
    print("\\n".join(loaded))
    """
)


def test_builder_imports_without_tomllib_or_docker() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert "toolchain.builder.apex_builder" in loaded
    # only the builder itself and the shared error classes: no spec/ (tomllib), no image/ (docker SDK)
    outside = {m for m in loaded if not m.startswith("toolchain.builder") and m != "toolchain.errors"}
    assert outside == set(), f"toolchain/builder/ pulled in {sorted(outside)}"


def test_blocker_really_blocks() -> None:
    """The harness itself can fail: a module that needs tomllib does not import under it."""
    script = _BLOCKED_IMPORT.replace(
        "import toolchain.builder\n", "import toolchain.spec.compat\nimport toolchain.builder\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert "blocked: tomllib" in proc.stderr


def test_builder_parses_as_python_3_10() -> None:
    for path in sorted(BUILDER.glob("*.py")) + [REPO / "toolchain" / "errors.py"]:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 10))
