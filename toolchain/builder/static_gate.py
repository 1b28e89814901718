"""The static gate after a build: install the wheel and let `verify --static` (imports, archs,
expectations) decide, requiring the default features the build promises. The Dockerfile's runtime stage
asks gate_required for the same `--require`. Standard library only (runs inside the build image).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from toolchain.builder import build_outputs
from toolchain.builder.pip_wheel import run_logged
from toolchain.errors import BuildFailed
from verify.domain import layout
from verify.layers import module_map
from verify.runtime import atomic, input_files

_REPO_ROOT = Path(__file__).resolve().parents[2]  # holds toolchain/ and verify/


def gate_required(expected_modules: list[str]) -> str:
    """`verify --require` for the static gate: the default required features this build promises (every
    module of the feature is expected), comma-joined; '' when none. verify's default would demand
    FusedAdam/FusedLayerNorm/FusedRMSNorm even of a Python-only or APEX_CPP_EXT-only build."""
    expected = set(expected_modules)
    return ",".join(
        feature
        for feature in module_map.default_required_features()
        if (needs := module_map.modules_for_feature(feature)) and set(needs) <= expected
    )


def install_wheel(wheel: Path, env: Mapping[str, str], log: Path) -> None:
    """`pip install --no-deps --force-reinstall WHEEL` into this Python (the build's torch is already there)."""
    code, *_ = run_logged(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall", str(wheel)], env, log
    )
    if code != 0:
        raise BuildFailed(f"pip install {wheel.name} failed (exit {code}); see {log}")


def install_and_verify(
    wheel: Path,
    manifest: Path,
    expected_modules: list[str],
    out: Path,
    env: dict[str, str],
    say: Callable[[str], None],
    work: Path,
) -> int:
    """Install the wheel, then let `verify --static` (imports, archs, expectations) be the gate: the
    manifest's expected_modules plus the default features those modules provide. verify writes its reports
    into `work` (the builder's private temp folder: verify's writer follows links, as it should for a path a
    user names); they are then put into OUT under the owned-tree rule (verify.runtime.atomic.write_in_tree)."""
    log = out / build_outputs.LOG_NAME
    install_wheel(wheel, env, log)
    verify_env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")])))
    cmd = [
        sys.executable,
        "-m",
        "verify",
        "--static",
        "--manifest",
        str(manifest),
        f"--require={gate_required(expected_modules)}",
        "--json",
        str(work / layout.STATIC_REPORT_NAME),
        "--markdown",
        str(work / layout.STATIC_MARKDOWN_NAME),
    ]
    # cwd=work: run from the Apex source tree and `import apex` would find the uninstalled sources
    code, *_ = run_logged(cmd, verify_env, log, cwd=work)
    for name in (layout.STATIC_REPORT_NAME, layout.STATIC_MARKDOWN_NAME):
        if (work / name).is_file():
            atomic.write_in_tree(out, name, input_files.read_bytes(work / name, input_files.VERIFY_REPORT))
    if code != 0:
        say(f"static gate: verify --static exited {code}; see {out / layout.STATIC_MARKDOWN_NAME}")
    return code
