"""What many tests share: the repository root and the two CLIs run as real subprocesses.

Each runner drops the variables that change how a CLI talks (GitHub Actions annotations, a default
registry, a build manifest) so a test sees plain output unless it passes them in `env` itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FROZEN_FACTS = REPO / "tests" / "fixtures" / "facts-2026-12-01" / "compat.toml"
# Upstream Apex source archives (never copied into the repo): beside the checkout, or where this names.
APEX_FIXTURES = Path(os.environ.get("APEX_TEST_FIXTURES", REPO.parent / "shared" / "fixtures"))
_AMBIENT = ("GITHUB_ACTIONS", "APEX_IMAGE_REGISTRY", "APEX_BUILD_MANIFEST")


def clean_env(env: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in _AMBIENT}
    environ.update(env or {})
    return environ


def run_build(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python build.py ARGS` from `cwd`."""
    return subprocess.run([sys.executable, str(REPO / "build.py"), *args], capture_output=True, text=True,
                          cwd=cwd, env=clean_env(env), timeout=timeout, check=False)


def run_verify(*args: str, extra_path: str | None = None, env: dict[str, str] | None = None,
               cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m verify ARGS` with this checkout first on PYTHONPATH (`extra_path` before it)."""
    environ = clean_env()
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, str(REPO)) if p)
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "verify", *args], capture_output=True, text=True,
                          env=environ, cwd=cwd or REPO, timeout=timeout, check=False)
