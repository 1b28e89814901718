"""`build.py zipapp`: verify as one file. `python verify.pyz ARGS` must behave exactly like `python -m
verify ARGS` (same exit code, same check ids and statuses, same one-line errors) on real states this CPU
host makes: no Apex, upstream Apex as a Python-only source tree, bad input, --require-gpu without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest

from tests.support import REPO, unpack_apex
from toolchain.image import verify_zipapp

# slow: subprocess runs and waited-out hangs; TIER=slow (CI), not make test
pytestmark = pytest.mark.slow

SCHEMA = json.loads((REPO / "verify" / "schema" / "report.schema.json").read_text())


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("zipapp") / "verify.pyz"
    proc = subprocess.run(
        [sys.executable, "build.py", "zipapp", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"sha256 {verify_zipapp.sha256_of(out)}" in proc.stdout
    return out


@pytest.fixture(scope="module")
def apex_source_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Upstream Apex unpacked, not built: a Python-only install as a source tree on sys.path."""
    return unpack_apex("6424da3b", tmp_path_factory.mktemp("apexsrc"))


def _environ(extra_path: str | None, pythonpath_root: bool) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("APEX_BUILD_MANIFEST", "GITHUB_ACTIONS", "PYTHONPATH")
    }
    parts = [p for p in (extra_path, str(REPO) if pythonpath_root else None) if p]
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def _run_both(pyz: Path, tmp_path: Path, args: list[str], extra_path: str | None = None):
    """(module run, zipapp run, module report, zipapp report); each writes its own --json."""
    runs, reports = [], []
    for name, argv, cwd, root_on_path in (
        ("module", [sys.executable, "-m", "verify"], REPO, True),
        # the zipapp from a folder with no verify in it, and no checkout on PYTHONPATH
        ("zipapp", [sys.executable, str(pyz)], tmp_path, False),
    ):
        report = tmp_path / f"{name}.json"
        full = [*argv, *args, "--json", str(report)]
        runs.append(
            subprocess.run(
                full,
                cwd=cwd,
                env=_environ(extra_path, root_on_path),
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
        )
        reports.append(json.loads(report.read_text()) if report.is_file() else None)
    return runs[0], runs[1], reports[0], reports[1]


def _statuses(report: dict) -> list[tuple[str, str]]:
    return [(c["id"], c["status"]) for c in report["checks"]]


@pytest.mark.parametrize(
    "case, args, expected_code",
    [
        ("no apex, static", ["--static"], 1),
        ("no apex, full run on a CPU host", [], 1),
        ("--require-gpu without a GPU", ["--static", "--require-gpu"], 3),
        ("unknown --require name", ["--static", "--require", "FusedAdamm"], 2),
        ("missing manifest", ["--static", "--manifest", "/nonexistent/build-manifest.json"], 2),
    ],
)
def test_zipapp_behaves_like_python_m_verify(
    pyz: Path, tmp_path: Path, case: str, args: list[str], expected_code: int
) -> None:
    module, app, module_report, app_report = _run_both(pyz, tmp_path, args)
    assert module.returncode == app.returncode == expected_code, (case, module.stderr, app.stderr)
    assert "Traceback" not in app.stderr
    if expected_code == 2:  # bad input: one line on stderr, no report
        assert module_report is None and app_report is None
        assert app.stderr == module.stderr and len(app.stderr.splitlines()) == 1
        return
    jsonschema.Draft202012Validator(SCHEMA).validate(app_report)
    assert _statuses(app_report) == _statuses(module_report), case
    assert app_report["verdict"] == module_report["verdict"] and app_report["exit_code"] == expected_code
    assert app.stdout.splitlines()[-1].split(" in ")[0] == module.stdout.splitlines()[-1].split(" in ")[0]


def test_zipapp_finds_a_python_only_apex_like_python_m_verify(
    pyz: Path, tmp_path: Path, apex_source_tree: Path
) -> None:
    module, app, module_report, app_report = _run_both(
        pyz, tmp_path, ["--static"], extra_path=str(apex_source_tree)
    )
    assert module.returncode == app.returncode == 1, app.stderr
    assert app_report["apex"]["kind"] == module_report["apex"]["kind"] == "nvidia"
    assert _statuses(app_report) == _statuses(module_report)
    statuses = dict(_statuses(app_report))
    assert statuses["identity.apex"] == "PASS" and statuses["extensions.amp_C"] == "FAIL"


def test_zipapp_holds_verify_only_and_every_module_imports_from_it(pyz: Path, tmp_path: Path) -> None:
    names = zipfile.ZipFile(pyz).namelist()
    assert "__main__.py" in names and "verify/data/apex_modules.json" in names
    assert "verify/schema/report.schema.json" in names and "verify/gpu/worker.py" in names
    assert not [n for n in names if not (n == "__main__.py" or n.startswith("verify/"))], (
        "only verify goes in"
    )
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert pyz.read_bytes().startswith(b"#!/usr/bin/env python3\n") and os.access(pyz, os.X_OK)
    # every module of the package imports from the zip (not from a checkout or an installed verify),
    # and the GPU workers it would start get the zip on their PYTHONPATH
    script = (
        "import importlib, pkgutil, sys\n"
        f"sys.path.insert(0, {str(pyz)!r})\n"
        "import verify\n"
        "mods = [m.name for m in pkgutil.walk_packages(verify.__path__, 'verify.') if not m.name.endswith('__main__')]\n"
        "bad = [m for m in mods if not importlib.import_module(m).__file__.startswith(sys.path[0])]\n"
        "from verify.runtime import json_lines_child\n"
        "print(len(mods), bad, json_lines_child.verify_env()['PYTHONPATH'].split(':')[0])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=_environ(None, False),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split(" ", 1)
    assert int(out[0]) > 30
    assert out[1].strip() == f"[] {pyz}"


def test_zipapp_is_reproducible(tmp_path: Path) -> None:
    first = verify_zipapp.build(tmp_path / "a.pyz")
    second = verify_zipapp.build(tmp_path)  # a directory: verify.pyz inside
    assert second.path == tmp_path / "verify.pyz" and first.sha256 == second.sha256
    assert "verify/data/apex_modules.json" in first.files


def test_zipapp_selftest_workers_run_from_the_zip(pyz: Path, tmp_path: Path) -> None:
    """The GPU layers' process boundary (a worker per group, `python -m verify.gpu.worker`) from inside the
    zip, through the torch-free selftest group."""
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(pyz)!r})\n"
        "from verify.gpu import runner\n"
        "r = runner.run_group('selftest', 7, check_timeout_s=60)\n"
        "print(' '.join(c.status.value for c in r.checks), r.workers[0]['exit'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=_environ(None, False),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == "PASS PASS PASS exit code 0", out.stderr


def _interpreter(version: str) -> str | None:
    """Another CPython of this host (on PATH, or one of pyenv's under $PYENV_ROOT, ~/.pyenv by default), or None."""
    import shutil

    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [
        shutil.which(f"python{version}"),
        *map(str, sorted(pyenv.glob(f"versions/{version}.*/bin/python"))),
    ]
    for found in filter(None, candidates):
        ok = subprocess.run(
            [found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if ok.stdout.strip() == version:
            return found
    return None


def test_zipapp_on_python_3_10_reads_its_data_from_the_zip(pyz: Path, tmp_path: Path) -> None:
    """3.10 is the oldest Python verify supports (importlib.resources over zipimport differs there)."""
    python = _interpreter("3.10")
    if python is None:
        pytest.skip("no Python 3.10 on this host")
    done = subprocess.run(
        [python, str(pyz), "--static", "--json", str(tmp_path / "r.json")],
        cwd=tmp_path,
        env=_environ(None, False),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr  # this 3.10 has no torch: a FAIL finding, not a crash
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["environment"]["python"]["version"].startswith("3.10")
    assert dict(_statuses(report))["environment.torch"] == "FAIL"
    assert any(c["id"].startswith("extensions.") for c in report["checks"]), (
        "the module map was read from the zip"
    )


def test_zipapp_on_an_older_python_is_one_line_and_exit_3(pyz: Path, tmp_path: Path) -> None:
    python = _interpreter("3.9") or _interpreter("3.8")
    if python is None:
        pytest.skip("no Python older than 3.10 on this host")
    done = subprocess.run(
        [python, str(pyz), "--static"],
        cwd=tmp_path,
        env=_environ(None, False),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "needs Python >= 3.10" in done.stderr
