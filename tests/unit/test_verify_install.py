"""`apex-verify install --index URL`: a real index (`build.py index`) of a small real wheel built for this
machine's torch stack (tests/wheel_builds.py), served on 127.0.0.1, installed by real pip into a fresh venv
that sees this machine's torch, with the apex-verify wheel (`build.py verify-wheel`) installed there too;
refusals checked to leave that venv as it was."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
from pathlib import Path

import pytest
import torch

from tests import wheel_builds as wb
from tests.support import run_build
from tests.wheel_builds import Served
from toolchain.builder import wheel_identity
from verify.install import choice, local_stack
from verify.install.index_stacks import IndexStack
from verify.install.local_stack import LocalStack
from verify.runtime import exit_codes

MINOR = ".".join(torch.__version__.split(".")[:2])
STACK = f"torch{MINOR}-{wheel_identity.cuda_tag(torch.version.cuda)}"
VERSION = f"0.1+g6424da3.{wheel_identity.cuda_tag(torch.version.cuda)}.torch{MINOR}"


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The Apex-shaped wheel (the builder's own path) and the apex-verify wheel."""
    root = tmp_path_factory.mktemp("verify-install")
    done = wb.build_stamped(root / "good", wb.torch_venv(root / "build-venv"))
    assert done.returncode == 0, done.stderr[-3000:]
    made = run_build("verify-wheel", "--out", str(root / "verify-wheel"))
    assert made.returncode == 0, made.stderr
    (verify_wheel,) = (root / "verify-wheel").glob("*.whl")
    return {"apex_out": root / "good" / "out", "verify_wheel": verify_wheel, "root": root}


@pytest.fixture(scope="module")
def served(parts):
    index = parts["root"] / "index"
    assert wb.run_index(parts["apex_out"], "--index", index, work=parts["root"]).returncode == 0
    server = Served(index)
    yield server
    server.close()


def _venv(parts, where: Path) -> Path:
    """A fresh venv that sees this machine's torch (tests/wheel_builds.torch_venv), not packaging (the index
    serves it), with apex-verify in it."""
    python = wb.torch_venv(where, hide=("packaging",))
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--no-deps", "-q", str(parts["verify_wheel"])],
        env=wb.isolated_pip_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return python


def _apex_verify(python: Path, *args: str, cwd: Path, with_uv: bool = False) -> subprocess.CompletedProcess:
    # PATH without uv (the suite's venv has one) unless asked: pip is the installer, as where uv is absent
    uv = f"{Path(wb.uv_binary()).parent}:" if with_uv else ""
    env = wb.isolated_pip_env({"PATH": f"{python.parent}:{uv}/usr/bin:/bin"})
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [str(python.parent / "apex-verify"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _site(python: Path) -> dict[str, int]:
    """Every file of the venv's own site-packages, with its size: what an install would change."""
    (site,) = python.parent.parent.glob("lib/python3*/site-packages")
    return {str(p.relative_to(site)): p.stat().st_size for p in site.rglob("*") if p.is_file()}


def _torch_in(python: Path) -> str:
    ask = "import torch; print(torch.__version__, torch.__file__)"
    return subprocess.run([str(python), "-c", ask], capture_output=True, text=True, check=True).stdout


def test_install_picks_this_stack_pins_torch_installs_and_prints_one_verdict(parts, served, tmp_path) -> None:
    python = _venv(parts, tmp_path / "venv")
    torch_before = _torch_in(python)
    done = _apex_verify(python, "install", "--index", served.url, "--require=", cwd=tmp_path)
    assert done.returncode == exit_codes.OK, done.stdout + done.stderr
    assert (
        f"-> {STACK} (apex-{VERSION}-" in done.stdout
        and f"--constraint <(torch=={torch.__version__})" in done.stdout
    )
    assert f"Successfully installed apex-{VERSION}" in done.stdout
    (verdict,) = [line for line in done.stdout.splitlines() if line.startswith("apex-verify install: PASS")]
    assert f"apex {VERSION} from {STACK} installed by pip, torch {torch.__version__} unchanged" in verdict
    assert "verify static: exit 0" in verdict
    assert _torch_in(python) == torch_before  # the same torch, from the same place
    assert any(name.startswith(f"apex-{VERSION}.dist-info/") for name in _site(python))
    assert "Traceback" not in done.stderr


def test_dry_run_resolves_and_installs_nothing(parts, served, tmp_path) -> None:
    python = _venv(parts, tmp_path / "venv")
    before = _site(python)
    done = _apex_verify(python, "install", "--index", served.url, "--dry-run", cwd=tmp_path)
    assert done.returncode == exit_codes.OK, done.stdout + done.stderr
    assert f"Would install apex-{VERSION}" in done.stdout and "dry run: pip resolved apex" in done.stdout
    assert _site(python) == before


def _fake_index(tmp_path: Path, stacks: object) -> str:
    index = tmp_path / "fake-index"
    index.mkdir()
    (index / "stacks.json").write_text(stacks if isinstance(stacks, str) else json.dumps(stacks))
    return index.as_uri()


def _row(stack: str, wheel_tags: str = "cp311-cp311-linux_x86_64") -> dict:
    return {
        "stack": stack,
        "simple": f"{stack}/simple/",
        "wheels": [f"apex-0.1+x-{wheel_tags}.whl"],
        "verify": ["PASS"],
    }


OTHER_CUDA = f"torch{MINOR}-cu130" if torch.version.cuda is None else f"torch{MINOR}-cpu"


@pytest.mark.parametrize(
    ("stacks", "nearest"),
    [
        ([_row("torch2.11-cu130"), _row("torch2.7-cu126")], "torch2.11-cu130"),
        ([_row(OTHER_CUDA), _row("torch2.11-cu130")], OTHER_CUDA),  # same torch minor, another CUDA build
    ],
)
def test_a_stack_the_index_lacks_is_refused_before_any_install(parts, tmp_path, stacks, nearest) -> None:
    python = _venv(parts, tmp_path / "venv")
    before = _site(python)
    done = _apex_verify(python, "install", "--index", _fake_index(tmp_path, {"stacks": stacks}), cwd=tmp_path)
    assert done.returncode == exit_codes.ENVIRONMENT, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert f"torch {torch.__version__} (" in line and f"has no stack {STACK}" in line
    assert f"(nearest: {nearest})" in line and all(row["stack"] in line for row in stacks)
    assert (
        "`python build.py wheel --apex-src APEX_CHECKOUT --out dist/" in line
        and "nothing was installed" in line
    )
    assert done.stdout == "" and _site(python) == before  # the installer never started


def test_a_wheel_for_another_python_is_refused_naming_the_wheels(parts, tmp_path) -> None:
    python = _venv(parts, tmp_path / "venv")
    index = _fake_index(tmp_path, {"stacks": [_row(STACK, "cp38-cp38-linux_x86_64")]})
    done = _apex_verify(python, "install", "--index", index, cwd=tmp_path)
    assert done.returncode == exit_codes.ENVIRONMENT
    (line,) = done.stderr.splitlines()
    assert "has no wheel for Python cp3" in line and "cp38-cp38-linux_x86_64" in line


@pytest.mark.parametrize(
    ("stacks", "says"),
    [
        ("{not json", "is not valid JSON"),
        ({"stacks": "torch2.11-cu130"}, "no `stacks` list"),
        (
            {"stacks": [{"stack": "2.11", "simple": "x/", "wheels": []}]},
            "stacks[0].stack is not a stack name",
        ),
        ({"stacks": [{"stack": "torch2.11-cu130", "simple": "x/", "wheels": [1]}]}, "stacks[0].wheels"),
    ],
)
def test_a_malformed_stack_list_is_exit_3_in_one_line(parts, tmp_path, stacks, says) -> None:
    python = _venv(parts, tmp_path / "venv")
    done = _apex_verify(python, "install", "--index", _fake_index(tmp_path, stacks), cwd=tmp_path)
    assert done.returncode == exit_codes.ENVIRONMENT, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert says in line and "stacks.json" in line and "build.py index" in line


def test_an_unreachable_index_is_3_and_a_bad_url_is_2(parts, tmp_path) -> None:
    import socket

    python = _venv(parts, tmp_path / "venv")
    with socket.socket() as probe:  # a port nobody listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cases = [
        (f"http://127.0.0.1:{port}/", exit_codes.ENVIRONMENT, "cannot be fetched"),
        ((tmp_path / "nowhere").as_uri(), exit_codes.ENVIRONMENT, "does not exist"),
        ("ftp://host/apex/", exit_codes.USAGE, "not an http://, https:// or file:// URL"),
        ("apex-index", exit_codes.USAGE, "not an http://, https:// or file:// URL"),
        ("http://[::1/apex/", exit_codes.USAGE, "not an http://, https:// or file:// URL"),
        ("http://127.0.0.1:99999/", exit_codes.ENVIRONMENT, "cannot be fetched"),
        ("file:///tmp/a%00b/", exit_codes.USAGE, "is not an http/https/file URL"),
    ]
    for url, code, says in cases:
        done = _apex_verify(python, "install", "--index", url, cwd=tmp_path)
        assert done.returncode == code, (url, done.stderr)
        (line,) = done.stderr.splitlines()
        assert says in line and "Traceback" not in line, line
    missing = _apex_verify(python, "install", cwd=tmp_path)
    assert missing.returncode == exit_codes.USAGE and "--index" in missing.stderr


def _local(**changes: object) -> LocalStack:
    base = LocalStack("2.11.0+cu130", "13.0", True, "3.12.3", "cp312", "linux_x86_64", "2.39", None)
    return LocalStack(**{**base.__dict__, **changes})


def test_torch_is_pinned_to_the_installed_distributions_version_not_torch_version() -> None:
    """PyPI's CUDA torch says 2.14.1 in its metadata and 2.14.1+cu130 in torch.__version__: a pin on the
    latter matches no installed distribution, and pip reports a conflict (seen with torch 2.14.1 here)."""
    from verify.install import installer

    pypi = _local(torch_version="2.14.1+cu130", torch_distribution="2.14.1")
    assert pypi.torch_pin == "2.14.1" and pypi.name == "torch2.14-cu130"
    assert installer.plan("http://x/s/", pypi.torch_pin, dry_run=True).torch_pin == "torch==2.14.1"
    assert _local().torch_pin == "2.11.0+cu130"  # no metadata found: torch.__version__
    assert local_stack.read().torch_pin == importlib.metadata.version("torch")


@pytest.mark.parametrize(
    ("wheel", "fits"),
    [
        ("apex-0.1+x-cp312-cp312-linux_x86_64.whl", True),
        ("apex-0.1+x-cp312-cp312-manylinux_2_28_x86_64.whl", True),
        ("apex-0.1+x-cp312-cp312-manylinux_2_40_x86_64.whl", False),  # newer glibc than this one
        ("apex-0.1+x-cp312-cp312-manylinux2014_x86_64.whl", True),
        ("apex-0.1+x-cp312-cp312-linux_aarch64.whl", False),
        ("apex-0.1+x-cp311-cp311-linux_x86_64.whl", False),
        ("apex-0.1+x-py3-none-any.whl", True),
        ("not-a-wheel.zip", False),
    ],
)
def test_wheel_tags_against_this_python_and_platform(wheel: str, fits: bool) -> None:
    assert choice.wheel_fits(wheel, _local()) is fits


def test_nearest_prefers_the_same_torch_minor_then_the_nearest_newer_minor() -> None:
    stacks = [IndexStack(n, "", (), ()) for n in ("torch2.10-cu130", "torch2.12-cu130", "torch2.11-cu126")]
    first, second = choice.nearest(_local(), stacks), choice.nearest(_local(), stacks[:2])
    assert first and first.name == "torch2.11-cu126"
    assert second and second.name == "torch2.12-cu130"  # a tie goes to the newer
    assert "--archs 9.0" in choice.build_command(_local(gpu_arch="9.0"))
    assert "--archs" not in choice.build_command(_local(torch_cuda=None))


def test_uv_on_path_is_the_installer_and_its_dry_run_leaves_this_python_alone(served, tmp_path) -> None:
    """uv resolves against the suite's own Python (torch in its own site-packages, which uv reads)."""
    import sys

    from tests.support import REPO

    uv_dir = str(Path(wb.uv_binary()).parent)
    env = wb.isolated_pip_env({"PATH": f"{uv_dir}:/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    done = subprocess.run(
        [sys.executable, "-m", "verify", "install", "--index", served.url, "--dry-run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == exit_codes.OK, done.stdout + done.stderr
    assert "; uv: " in done.stdout and f"+ apex=={VERSION}" in done.stderr
    assert "dry run: uv resolved apex" in done.stdout


def test_uv_that_cannot_see_torch_leaves_the_install_to_pip(parts, served, tmp_path) -> None:
    """A venv that reaches torch through a .pth file (as on the H200, where uv said "torch was not found in the
    package registry"): uv would look for torch on the stack's index, so pip installs, and says why."""
    python = _venv(parts, tmp_path / "venv")
    before = _site(python)
    done = _apex_verify(python, "install", "--index", served.url, "--dry-run", cwd=tmp_path, with_uv=True)
    assert done.returncode == exit_codes.OK, done.stdout + done.stderr
    assert "; pip: " in done.stdout and "not uv: torch is in " in done.stdout, done.stdout
    assert _site(python) == before


def test_full_runs_verifys_whole_run_and_require_passes_through(monkeypatch, tmp_path) -> None:
    """The wiring alone (installer and stack faked): --full is verify without --static."""
    from verify.install import command, index_stacks, installer, local_stack

    stack = IndexStack(STACK, "http://x/s/", (f"apex-{VERSION}-py3-none-any.whl",), ("PASS",))
    monkeypatch.setattr(
        local_stack, "read", lambda: _local(torch_version=torch.__version__, torch_cuda=torch.version.cuda)
    )
    monkeypatch.setattr(index_stacks, "read", lambda index: [stack])
    monkeypatch.setattr(installer, "run", lambda plan: 0)
    monkeypatch.setattr(command, "gate_require", lambda: None)  # the installed wheel carries no gate report
    calls: list[list[str]] = []

    def verify_run(args: list[str]) -> int:
        calls.append(args)
        return exit_codes.FAILED if "--static" in args else exit_codes.OK

    assert (
        command.run(["--index", "http://x/", "--full", "--require=FusedAdam"], "apex-verify", verify_run) == 0
    )
    assert command.run(["--index", "http://x/"], "apex-verify", verify_run) == exit_codes.FAILED
    # a wheel whose gate required nothing (a build without CUDA modules) is checked for what it promised
    monkeypatch.setattr(command, "gate_require", lambda: [""])
    assert command.run(["--index", "http://x/"], "apex-verify", verify_run) == exit_codes.FAILED
    assert command.run(["--index", "http://x/", "--require=FusedAdam"], "apex-verify", verify_run) == 1
    assert calls == [
        ["--require=FusedAdam"],
        ["--static"],
        ["--static", "--require="],
        ["--static", "--require=FusedAdam"],
    ]


def test_the_pip_way_from_the_index_alone(parts, served, tmp_path) -> None:
    """What the README gives a user with torch: apex-verify from the stack's page of the index, then the one
    command, in a venv that has torch and nothing Apex requires besides it (packaging comes from the index);
    and the zipapp linked from the top page, the same bytes as `build.py zipapp` makes."""
    python = wb.torch_venv(tmp_path / "venv", hide=("packaging",))
    got = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "apex-verify",
            "--index-url",
            served.url.rstrip("/") + f"/{STACK}/simple",
        ],
        env=wb.isolated_pip_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert got.returncode == 0, got.stdout + got.stderr
    done = _apex_verify(python, "install", "--index", served.url, "--require=", cwd=tmp_path)
    assert done.returncode == exit_codes.OK, done.stdout + done.stderr
    assert any(line.startswith("apex-verify install: PASS") for line in done.stdout.splitlines())
    assert f"Successfully installed apex-{VERSION} packaging-" in done.stdout, done.stdout
    stacks = json.loads((parts["root"] / "index" / "stacks.json").read_text())
    zipapp = parts["root"] / "index" / stacks["tools"]["zipapp"]["file"]
    assert (
        zipapp.name == "verify.pyz"
        and 'href="tools/verify.pyz"' in (parts["root"] / "index" / "index.html").read_text()
    )
    made = run_build("zipapp", "--out", str(tmp_path / "verify.pyz"))
    assert made.returncode == 0 and (tmp_path / "verify.pyz").read_bytes() == zipapp.read_bytes()
