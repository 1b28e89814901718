"""`build.py release` (`make publish OUT=site`): the publish workflow's steps as one local command. The unit
tier checks its refusals; the slow tier runs it end to end with this machine's CPU torch: the wheel of an
Apex-shaped tree (a real C++ module) built and gated by the project's builder (`tests/wheel_builds.py`: the
CLI's `build.py wheel` refuses a CPU torch, as Apex's setup.py needs torch's CUDA_HOME), then `release
--wheels`: checked, tagged, indexed, a fresh venv with only torch, `apex-verify install` from the served
index: PASS. The whole command on real Apex with a CUDA torch is in docs/wheels.md (measured here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import venv
from pathlib import Path

import pytest

from tests import wheel_builds as wb
from tests.support import REPO, run_build
from verify.runtime import exit_codes


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--apex-src", "{tmp}"], "no setup.py there; pass an Apex checkout"),
        (["--wheels", "{tmp}"], "no .whl there"),
        ([], "pass --apex-src DIR (build the wheel) or --wheels DIR"),
        (
            ["--apex-src", "{tmp}", "--wheels", "{tmp}"],
            "pass --apex-src DIR (build the wheel) or --wheels DIR",
        ),
    ],
)
def test_release_without_a_source_or_wheels_is_usage(tmp_path: Path, args: list[str], says: str) -> None:
    given = [a.format(tmp=tmp_path) for a in args]
    done = run_build("release", *given, "--out", str(tmp_path / "site"))
    assert done.returncode == exit_codes.USAGE, done.stderr
    assert says in done.stderr and not (tmp_path / "site").exists()


def test_release_with_a_python_that_has_no_torch_is_the_environment(tmp_path: Path) -> None:
    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    src = wb.apex_shaped_tree(tmp_path / "apex")
    done = run_build("release", "--apex-src", str(src), "--python", str(tmp_path / "bare" / "bin" / "python"))
    assert done.returncode == exit_codes.ENVIRONMENT, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "cannot import torch" in line and "pass the Python of the torch environment" in line


def test_make_publish_runs_build_py_release_into_out() -> None:
    done = subprocess.run(
        ["make", "-n", "publish", "OUT=my site", "APEX_SRC=/src/apex", "APEX_FLAGS=APEX_CPP_EXT"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "build.py release --apex-src '/src/apex' --out 'my site' --flags 'APEX_CPP_EXT'" in done.stdout


@pytest.mark.slow
def test_release_end_to_end_on_this_machines_torch(tmp_path: Path) -> None:
    """wheel -> check -> tag -> index -> a fresh venv with only torch -> apex-verify install: PASS. The fresh
    venv gets torch from pip's own settings (this machine's wheel on disk, or TORCH_INDEX as scripts/test.sh)."""
    import torch

    python = wb.torch_venv(tmp_path / "build-env")  # the gate installs Apex here, not into the suite's venv
    built = wb.build_stamped(tmp_path, python)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    site = tmp_path / "site"
    index_url = os.environ.get("TORCH_INDEX")
    done = run_build(
        "release",
        "--wheels",
        str(tmp_path / "out"),
        "--out",
        str(site),
        "--python",
        str(python),
        *(["--torch-index-url", index_url] if index_url else []),
        *wb.dependency_options(tmp_path),  # packaging for the index, from a folder: no network
        timeout=1200,
    )
    out = done.stdout + done.stderr
    assert done.returncode == exit_codes.OK, out[-4000:]
    stack = f"torch{'.'.join(torch.__version__.split('.')[:2])}-cpu"
    # the fresh venv gets torch alone: Apex's packaging comes from the index, as for a user
    assert f"dependency {stack}/packaging-" in out and "[release] packaging" not in out, out[-3000:]
    # pip's words or uv's (the fresh venv holds torch itself, so uv on PATH installs)
    assert re.search(r"Successfully installed apex-\S+ packaging-|\+ packaging==", out), out[-3000:]
    assert f"-> {stack} (apex-0.1+g6424da3.cpu." in out, out[-3000:]
    assert "apex-verify install: PASS" in out and "release: PASS" in out, out[-3000:]
    (row,) = json.loads((site / "stacks.json").read_text())["stacks"]
    assert row["stack"] == stack and row["verify"] == ["PASS"] and row["torch"] == [torch.__version__]
    (wheel,) = row["wheels"]
    assert "-manylinux_2_" in wheel  # tagged by the index's own ELF reading, never linux_x86_64
    address = json.loads((site / "stacks.json").read_text())["address"]
    assert (
        address.startswith("http://127.0.0.1:")
        and f"apex-verify install --index {address}" in (site / "index.html").read_text()
    )
    walls = next(line for line in out.splitlines() if line.startswith("release: PASS"))
    print(f"\n{walls}")
