"""`build.py verify-wheel`: verify as the pure-Python wheel apex-verify, installed by real pip into fresh
venvs, its console script run as a user runs it; and the guard against PyPI's unrelated `verify`, which
installs a package of the same import name."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests import wheel_builds as wb
from tests.support import REPO, run_build
from verify.runtime import exit_codes


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verify-wheel")
    done = run_build("verify-wheel", "--out", str(out))
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("apex_verify-*-py3-none-any.whl")
    again = tmp_path_factory.mktemp("verify-wheel-again")
    assert run_build("verify-wheel", "--out", str(again)).returncode == 0
    assert (again / built.name).read_bytes() == built.read_bytes()  # reproducible: same checkout, same bytes
    return built


def _install(wheel: Path, python: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-index",
            "--no-deps",
            str(wheel),
        ],
        env=wb.isolated_pip_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _run(
    script: Path, *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    environ = wb.isolated_pip_env({"PATH": f"{script.parent}:/usr/bin:/bin"})
    environ.pop("PYTHONPATH", None)  # the installed wheel's verify, not this checkout's
    environ.update(env or {})
    return subprocess.run(
        [str(script), *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def bare_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """No torch: --help and the guard need none."""
    root = tmp_path_factory.mktemp("bare")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root / "venv")
    _install(wheel, root / "venv" / "bin" / "python")
    return root / "venv"


def test_the_wheel_holds_verify_the_entry_module_and_a_dist_info_pip_accepts(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert {
        "apex_verify_entry.py",
        "verify/__init__.py",
        "verify/cli.py",
        "verify/data/apex_modules.json",
    } <= names
    assert "Name: apex-verify\n" in metadata and "Requires-Dist" not in metadata  # torch is the environment's
    assert "apex-verify = apex_verify_entry:main" in entry_points
    assert not any(n.startswith(("toolchain/", "tests/")) or "__pycache__" in n for n in names)


def test_the_installed_console_script_answers_help_without_torch(bare_venv: Path, tmp_path: Path) -> None:
    done = _run(bare_venv / "bin" / "apex-verify", "--help", cwd=tmp_path)
    assert done.returncode == exit_codes.OK, done.stderr
    assert done.stdout.startswith("usage: apex-verify") and "--static" in done.stdout
    typo = _run(bare_venv / "bin" / "apex-verify", "--statik", cwd=tmp_path)
    assert typo.returncode == exit_codes.USAGE and typo.stderr.startswith("apex-verify: ")
    assert "Traceback" not in typo.stderr


def test_static_runs_from_the_installed_wheel_where_torch_is(wheel: Path, tmp_path: Path) -> None:
    python = wb.torch_venv(tmp_path / "venv")  # this machine's torch, seen through a .pth
    _install(wheel, python)
    done = _run(python.parent / "apex-verify", "--static", "--quiet", cwd=tmp_path)
    # no Apex in that venv: the static check runs and says so (exit 1, verification failed)
    assert done.returncode == exit_codes.FAILED, done.stdout + done.stderr
    assert "verify static: FAIL" in done.stdout and "identity.apex" in done.stdout
    assert "Traceback" not in done.stderr
    ask = "import verify; print(verify.__file__)"
    where = subprocess.run([str(python), "-c", ask], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert str(tmp_path / "venv") in where.stdout and str(REPO) not in where.stdout


@pytest.mark.parametrize("shape", ["package", "module"])
def test_another_verify_first_on_sys_path_is_named_with_the_fix_exit_2(
    bare_venv: Path, tmp_path: Path, shape: str
) -> None:
    other = tmp_path / "other"  # what PyPI's `verify` (an assertion library) installs: a top-level verify
    if shape == "package":
        (other / "verify").mkdir(parents=True)
        (other / "verify" / "__init__.py").write_text("def ensure(x):\n    assert x\n")
        shown = other / "verify" / "__init__.py"
    else:
        other.mkdir()
        (other / "verify.py").write_text("def ensure(x):\n    assert x\n")
        shown = other / "verify.py"
    done = _run(bare_venv / "bin" / "apex-verify", "--static", cwd=tmp_path, env={"PYTHONPATH": str(other)})
    assert done.returncode == exit_codes.USAGE, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert str(shown) in line and "pip uninstall verify" in line and "venv" in line
    assert done.stdout == ""


def test_a_verify_that_fails_to_import_is_exit_3_with_the_reinstall_line(
    bare_venv: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other" / "verify"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("raise RuntimeError('half installed')\n")
    done = _run(bare_venv / "bin" / "apex-verify", cwd=tmp_path, env={"PYTHONPATH": str(other.parent)})
    assert done.returncode == exit_codes.ENVIRONMENT
    (line,) = done.stderr.splitlines()
    assert "half installed" in line and "pip install --force-reinstall" in line
