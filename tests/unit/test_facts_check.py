"""`build.py facts check` on stored PyPI responses (tests/fixtures/pypi-2026-12-01, trimmed real answers)
against a frozen copy of the facts of the same day: parsing, each kind of drift, and the exit codes
of the real command (file:// index, a refused connection, bad input)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import FROZEN_FACTS as FROZEN
from tests.support import REPO, run_build
from toolchain.spec import compat, facts_check
from toolchain.spec.facts_check import IndexUnreachable, NotPublished
from verify import exit_codes

INDEX = REPO / "tests" / "fixtures" / "pypi-2026-12-01"
METADATA = INDEX / "wheel-metadata"


def stored(url: str) -> bytes:
    """A fetcher over the stored responses: https://pypi.org/pypi/torch/json -> INDEX/pypi/torch/json."""
    path = INDEX / re.sub(r"^https://pypi\.org/", "", url)
    if not path.is_file():  # what PyPI (its mirror here) answered for per-version JSON: 404
        raise NotPublished(url)
    return path.read_bytes()


def requires(name: str) -> list[str]:
    text = (METADATA / name).read_text()
    return [line.removeprefix("Requires-Dist: ") for line in text.splitlines() if line.startswith("Requires-Dist: ")]


def facts_with(tmp_path: Path, *edits: tuple[str, str]) -> compat.Compat:
    """The frozen facts with text edits applied (each `old` must be there, so a test cannot go vacuous)."""
    text = FROZEN.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "compat.toml"
    path.write_text(text)
    return compat.load(path)


# --- parsing ------------------------------------------------------------------------------------


def test_torch_releases_from_the_project_json() -> None:
    releases = facts_check.torch_releases(stored("https://pypi.org/pypi/torch/json"))
    assert {"2.4.1", "2.12.1", "2.14.1", "2.15.0"} <= set(releases)
    latest = releases["2.15.0"]
    assert latest.pythons == ("3.11", "3.12", "3.13", "3.14", "3.15")  # cp314t/cp315t are not counted twice
    assert latest.aarch64 and latest.uploaded == "2026-10-28"
    assert releases["2.5.1"].pythons[-1] == "3.13"  # x86_64 only: 2.5.1's aarch64 wheels stop at cp312
    assert releases["2.4.1"].pythons[0] == "3.8"


@pytest.mark.parametrize(("metadata", "cuda", "x86_64_only"), [
    ("torch-2.4.1-cp312-cp312-manylinux1_x86_64.METADATA", "12.1", True),  # `(==12.1.105) ; ...` form
    ("torch-2.10.0-cp312-cp312-manylinux_2_28_aarch64.METADATA", "12.8", True),  # aarch64 wheel: CPU-only
    ("torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.METADATA", "13.0", False),  # cuda-toolkit[...]==13.0.3
    ("torch-2.15.0-cp312-cp312-manylinux_2_28_aarch64.METADATA", "13.2", False),
])
def test_pypi_cuda_from_a_wheels_requires_dist(metadata: str, cuda: str, x86_64_only: bool) -> None:
    assert facts_check.pypi_cuda(requires(metadata)) == facts_check.PypiCuda(cuda, x86_64_only)


def test_pypi_cuda_of_a_cpu_wheel_is_none_and_the_latest_comes_from_the_project_json() -> None:
    cpu_only = [r for r in requires("torch-2.15.0-cp312-cp312-manylinux_2_28_aarch64.METADATA")
                if not r.startswith(("cuda-toolkit", "nvidia-"))]
    assert facts_check.pypi_cuda(cpu_only) is None
    version, deps = facts_check.latest_requires(stored("https://pypi.org/pypi/torch/json"))
    assert version == "2.15.0" and facts_check.pypi_cuda(deps) == facts_check.PypiCuda("13.2", False)


def test_toolkit_minors_skip_pre_releases() -> None:
    thirteen = facts_check.toolkit_minors(stored("https://pypi.org/pypi/nvidia-cuda-nvcc/json"), "nvidia-cuda-nvcc")
    assert thirteen == {"13.0", "13.1", "13.2", "13.3", "13.4", "13.5"}  # 13.4.46rc1 is not a release
    twelve = facts_check.toolkit_minors(stored("https://pypi.org/pypi/nvidia-cuda-nvcc-cu12/json"), "cu12")
    assert twelve == {"12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9"}  # no 0.0.1.dev5


# --- the comparison -----------------------------------------------------------------------------


def test_the_frozen_facts_are_current_against_the_index_of_the_same_day() -> None:
    report = facts_check.check(compat.load(FROZEN), stored)
    assert report.findings == ()
    # only the newest release's Requires-Dist is in the project JSON; this mirror 404s the rest
    assert report.not_visible == ("2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0",
                                  "2.12.1", "2.13.0", "2.14.1")


@pytest.mark.parametrize(("edits", "kind", "subject", "says"), [
    ([('[torch."2.15"]\nversion = "2.15.0"', '[torch."2.99"]\nversion = "2.99.0"')], "missing", "torch 2.15",
     ['PyPI has torch 2.15.0 (2026-10-28, Python 3.11-3.15)', 'version = "2.15.0"']),
    ([('version = "2.12.1"', 'version = "2.12.0"')], "wrong", "torch 2.12",
     ["the facts pin 2.12.0; PyPI's newest patch is 2.12.1", 'set version = "2.12.1"']),
    ([('version = "2.14.1"', 'version = "2.14.7"')], "wrong", "torch 2.14", ["2.14.7, which PyPI does not publish"]),
    ([('python = ["3.9", "3.13"]\nsource = "PyTorch RELEASE.md matrix, RFC', 'python = ["3.9", "3.12"]\nsource = "x, RFC')],
     "wrong", "torch 2.5", ["Python 3.9-3.12", "cp39-cp313", 'set python = ["3.9", "3.13"]']),
    ([('pypi_cuda = "13.2"', 'pypi_cuda = "13.0"')], "wrong", "torch 2.15",
     ["the facts say PyPI's wheels are CUDA 13.0; PyPI's 2.15.0 pins CUDA 13.2", 'set pypi_cuda = "13.2"']),
    ([('cuda = ["13.2"]\npypi_cuda', 'cuda = ["13.0"]\npypi_cuda')], "missing", "torch 2.15",
     ["a CUDA 13.2 build, not in the facts' builds (13.0)", 'add "13.2" to cuda']),
    ([('aarch64_cuda = ["13.2"]\npython = ["3.11"', 'aarch64_cuda = []\npython = ["3.11"')], "missing", "torch 2.15",
     ["linux aarch64 wheels are CUDA 13.2 builds", 'add "13.2" to aarch64_cuda']),
    ([('nvcc = ["13.4", "13.5"]', 'nvcc = ["13.4"]')], "missing", "nvcc 13.5",
     ["nvcc 13.5 (nvidia-cuda-nvcc on PyPI)", "no [[toolkit]] row"]),
])
def test_each_kind_of_drift_is_named_with_its_fix(tmp_path: Path, edits, kind: str, subject: str, says) -> None:
    report = facts_check.check(facts_with(tmp_path, *edits), stored)
    mine = [f for f in report.findings if f.subject == subject]
    assert len(mine) >= 1, report.findings
    text = " ".join(f"{f.problem}; {f.fix}" for f in mine)
    assert mine[0].kind == kind and all(s in text for s in says), text


def test_a_row_pypi_never_published_is_wrong(tmp_path: Path) -> None:
    row = '[torch."2.99"]\nversion = "2.99.0"\ncuda = ["13.2"]\npython = ["3.11", "3.15"]\nsource = "x"\n\n'
    report = facts_check.check(facts_with(tmp_path, ('[torch."2.15"]', row + '[torch."2.15"]')), stored)
    assert [(f.kind, f.subject) for f in report.findings] == [("wrong", "torch 2.99")]
    assert "PyPI has no 2.99.x release" in report.findings[0].problem


def test_an_unreachable_or_foreign_index_is_the_environment() -> None:
    def refused(url: str) -> bytes:
        raise IndexUnreachable(f"{url}: [Errno 111] Connection refused")

    with pytest.raises(Exception, match="cannot be read") as caught:
        facts_check.run(compat.load(FROZEN), refused)
    assert caught.value.exit_code == exit_codes.ENVIRONMENT
    with pytest.raises(IndexUnreachable, match="not JSON"):
        facts_check.torch_releases(b"<html>Sign in to the proxy</html>")


# --- the command ----------------------------------------------------------------------------------



def test_command_exit_0_when_current_and_1_on_drift(tmp_path: Path) -> None:
    index = INDEX.as_uri()  # the real urllib fetcher over file://: a missing file reads as a 404
    proc = run_build("facts", "check", "--index", index, "--facts", str(FROZEN))
    assert proc.returncode == exit_codes.OK, proc.stdout + proc.stderr
    assert "facts check: current" in proc.stdout and "[ LEAD ] torch 2.15" in proc.stdout
    stale = tmp_path / "compat.toml"
    stale.write_text(FROZEN.read_text().replace('version = "2.12.1"', 'version = "2.12.0"')
                     .replace('nvcc = ["13.4", "13.5"]', 'nvcc = ["13.4"]'))
    proc = run_build("facts", "check", "--index", index, "--facts", str(stale))
    assert proc.returncode == exit_codes.FAILED, proc.stdout + proc.stderr
    drift = [line for line in proc.stdout.splitlines() if line.startswith("[DRIFT ]")]
    assert len(drift) == 2 and "torch 2.12" in drift[0] and "nvcc 13.5" in drift[1]
    assert "2 problems (1 missing, 1 wrong)" in proc.stdout


def test_command_without_network_is_exit_3_and_bad_input_exit_2(tmp_path: Path) -> None:
    proc = run_build("facts", "check", "--index", "http://127.0.0.1:9", "--facts", str(FROZEN))
    assert proc.returncode == exit_codes.ENVIRONMENT, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: the package index cannot be read") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_build("facts", "check", "--facts", str(tmp_path / "nope.toml"))
    assert proc.returncode == exit_codes.USAGE and "--facts" in proc.stderr and "no such file" in proc.stderr
    not_facts = tmp_path / "other.toml"
    not_facts.write_text("[cells.a]\ncuda = '12.4'\n")
    proc = run_build("facts", "check", "--facts", str(not_facts), "--index", INDEX.as_uri())
    assert proc.returncode == exit_codes.USAGE and "not a compatibility facts file" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_build("facts")
    assert proc.returncode == exit_codes.USAGE and "build.py facts check" in proc.stderr
