"""`build.py facts check` on stored PyPI answers (tests/fixtures/pypi-2026-12-01: the JSON API trimmed,
each minor's newest x86_64 and aarch64 METADATA) against a frozen copy of the facts of the same day:
parsing, each kind of drift, the range-read path on a real zip, hostile answers and values, and the
exit codes of the real command (file:// and http:// indexes, a refused connection, bad input)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import FROZEN_FACTS as FROZEN
from tests.support import REPO, local_server, run_build
from toolchain.errors import ToolchainError, UsageError
from toolchain.spec import compat, facts_check
from toolchain.spec.facts_check import BadAnswer, IndexUnreachable
from verify.runtime import exit_codes

# the sources beyond PyPI at a closed port: refused at once, so these runs stay on this machine
NO_OTHER_SOURCES = tuple(
    a for o in ("--registry", "--torch-index", "--apex-upstream") for a in (o, "http://127.0.0.1:9")
)
INDEX = REPO / "tests" / "fixtures" / "pypi-2026-12-01"
PACKAGES = INDEX / "packages"
FETCH = facts_check.urllib_fetcher()


def project() -> bytes:
    return (INDEX / "pypi" / "torch" / "json").read_bytes()


def requires(wheel: str) -> list:
    return facts_check.metadata_requires((PACKAGES / f"{wheel}.metadata").read_bytes(), wheel)


def facts_with(tmp_path: Path, *edits: tuple[str, str]) -> compat.Compat:
    """The frozen facts with text edits applied (each `old` must be there, so a test cannot go vacuous)."""
    path = tmp_path / "compat.toml"
    path.write_text(edited(*edits))
    return compat.load(path)


def edited(*edits: tuple[str, str]) -> str:
    text = FROZEN.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def check(facts: compat.Compat, index: Path = INDEX) -> facts_check.Report:
    return facts_check.check(facts, FETCH, index.as_uri())


# --- parsing ------------------------------------------------------------------------------------


def test_torch_releases_from_the_project_json() -> None:
    releases = facts_check.torch_releases(project())
    assert {"2.4.1", "2.12.1", "2.14.0", "2.14.1", "2.15.0"} <= set(releases)
    latest = releases["2.15.0"]
    assert latest.pythons == ("3.11", "3.12", "3.13", "3.14", "3.15")  # cp314t/cp315t are not counted twice
    assert latest.aarch64 and latest.uploaded == "2026-10-28"
    assert releases["2.5.1"].pythons[-1] == "3.13"  # x86_64 only: 2.5.1's aarch64 wheels stop at cp312
    assert releases["2.4.1"].pythons[0] == "3.8"
    # candidates newest Python first; 2.10.0's re-uploaded build 3 before the plain cp313 wheel
    x86 = releases["2.10.0"].wheels_for("x86_64")
    assert x86[0].filename == "torch-2.10.0-3-cp314-cp314-manylinux_2_28_x86_64.whl" and x86[0].build == 3
    assert all(w.machine == "aarch64" for w in releases["2.10.0"].wheels_for("aarch64"))


@pytest.mark.parametrize(
    ("wheel", "machine", "cuda"),
    [
        ("torch-2.4.1-cp311-cp311-manylinux1_x86_64.whl", "x86_64", "12.1"),  # `(==12.1.105) ; ...` form
        ("torch-2.4.1-cp311-cp311-manylinux1_x86_64.whl", "aarch64", None),  # the marker says x86_64 only
        ("torch-2.4.1-cp312-cp312-manylinux2014_aarch64.whl", "aarch64", None),  # the aarch64 wheel: CPU-only
        ("torch-2.10.0-cp312-cp312-manylinux_2_28_aarch64.whl", "aarch64", None),
        ("torch-2.10.0-cp313-cp313-manylinux_2_28_x86_64.whl", "x86_64", "12.8"),
        ("torch-2.14.1-cp314-cp314-manylinux_2_28_x86_64.whl", "x86_64", "13.0"),  # cuda-toolkit[...]==13.0.3
        ("torch-2.15.0-cp315-cp315-manylinux_2_28_aarch64.whl", "aarch64", "13.2"),
    ],
)
def test_the_cuda_of_a_wheel_from_its_metadata(wheel: str, machine: str, cuda: str | None) -> None:
    assert facts_check.wheel_cuda(requires(wheel), machine) == cuda


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"<html>Sign in</html>", "not torch's METADATA"),
        (b"Metadata-Version: 2.4\nName: torch\nRequires-Dist: cuda-toolkit ((==13\n", "does not parse"),
        (b"Metadata-Version: 2.4\nName: torch\n\xff\xfe\n", "not UTF-8"),
        (b"Metadata-Version: 2.4\nName: torch\n" + b"X: y\n" * 300_000, "not a METADATA file"),
    ],
)
def test_an_answer_that_is_not_metadata_is_refused_not_read_as_cpu_only(body: bytes, says: str) -> None:
    with pytest.raises(BadAnswer, match=says):
        facts_check.metadata_requires(body, "x.metadata")


def test_a_cuda_requirement_without_one_pin_is_refused() -> None:
    reqs = facts_check.metadata_requires(
        b"Metadata-Version: 2.4\nName: torch\nRequires-Dist: cuda-toolkit>=13\n", "m"
    )
    with pytest.raises(BadAnswer, match="does not pin one CUDA version"):
        facts_check.wheel_cuda(reqs, "x86_64")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            lambda d: d["info"].__setitem__("requires_dist", "nvidia-cuda-runtime-cu12==12.4.127"),
            "info.requires_dist: expected a list or null, got a string",
        ),
        (lambda d: d.__setitem__("releases", []), "releases: expected an object, got a list"),
        (lambda d: d["releases"]["2.6.0"][0].__setitem__("filename", 7), "filename: expected a string"),
        (lambda d: d["releases"]["2.6.0"][0].__setitem__("yanked", "no"), "yanked: expected a boolean"),
    ],
)
def test_a_malformed_project_answer_is_refused_not_read_as_drift(change, says: str) -> None:
    data = json.loads(project())
    change(data)
    with pytest.raises(BadAnswer, match=says):
        facts_check.torch_releases(json.dumps(data).encode())


def test_toolkit_minors_skip_pre_releases() -> None:
    thirteen = facts_check.toolkit_minors(
        (INDEX / "pypi/nvidia-cuda-nvcc/json").read_bytes(), "nvidia-cuda-nvcc"
    )
    assert thirteen == {"13.0", "13.1", "13.2", "13.3", "13.4", "13.5"}  # 13.4.46rc1 is not a release
    twelve = facts_check.toolkit_minors((INDEX / "pypi/nvidia-cuda-nvcc-cu12/json").read_bytes(), "cu12")
    assert twelve == {"12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9"}  # no 0.0.1.dev5


# --- the comparison -----------------------------------------------------------------------------


def test_the_frozen_facts_against_the_index_of_the_same_day_lack_one_patch() -> None:
    report = check(compat.load(FROZEN))
    # every minor's CUDA is compared now (it was 1 of 12 when only the project JSON's info was read), and
    # the one drift: torch 2.14.0 is on PyPI, the facts' patches lack it
    assert report.not_visible == ()
    assert [(f.kind, f.subject) for f in report.findings] == [("missing", "torch 2.14")]
    assert 'add "2.14.0" to patches in [torch."2.14"]' == report.findings[0].fix


@pytest.mark.parametrize(
    ("edits", "kind", "subject", "says"),
    [
        (
            [
                ('[torch."2.15"]\nversion = "2.15.0"', '[torch."2.99"]\nversion = "2.99.0"'),
                ('patches = ["2.15.0"]', 'patches = ["2.99.0"]'),
            ],
            "missing",
            "torch 2.15",
            ["PyPI has torch 2.15.0 (2026-10-28, Python 3.11-3.15)", 'version = "2.15.0"'],
        ),
        (
            [('version = "2.12.1"', 'version = "2.12.0"')],
            "wrong",
            "torch 2.12",
            ["the facts pin 2.12.0; PyPI's newest patch is 2.12.1", 'set version = "2.12.1"'],
        ),
        (
            [('version = "2.14.1"\npatches = ["2.14.1"]', 'version = "2.14.7"\npatches = ["2.14.7"]')],
            "wrong",
            "torch 2.14",
            ["2.14.7, which PyPI does not publish"],
        ),
        (
            [('patches = ["2.12.0", "2.12.1"]', 'patches = ["2.12.1"]')],
            "missing",
            "torch 2.12",
            ["PyPI publishes torch 2.12.0", 'add "2.12.0" to patches'],
        ),
        (
            [('patches = ["2.12.0", "2.12.1"]', 'patches = ["2.12.0", "2.12.1", "2.12.5"]')],
            "wrong",
            "torch 2.12",
            ["patches list 2.12.5, which PyPI does not publish", 'remove "2.12.5" from patches'],
        ),
        (
            [
                (
                    'python = ["3.9", "3.13"]\nsource = "PyTorch RELEASE.md matrix, RFC',
                    'python = ["3.9", "3.12"]\nsource = "x, RFC',
                )
            ],
            "wrong",
            "torch 2.5",
            ["Python 3.9-3.12", "cp39-cp313", 'set python = ["3.9", "3.13"]'],
        ),
        (
            [('pypi_cuda = "13.2"', 'pypi_cuda = "13.0"')],
            "wrong",
            "torch 2.15",
            [
                "the facts say PyPI's wheels are CUDA 13.0; PyPI's 2.15.0 pins CUDA 13.2",
                'set pypi_cuda = "13.2"',
            ],
        ),
        (
            [
                (
                    'pypi_cuda = "12.8"\naarch64_cuda = ["12.6", "12.8", "13.0"]\npython = ["3.10", "3.14"]',
                    'pypi_cuda = "12.6"\naarch64_cuda = ["12.6", "12.8", "13.0"]\npython = ["3.10", "3.14"]',
                )
            ],
            "wrong",
            "torch 2.10",
            ["PyPI's 2.10.0 pins CUDA 12.8"],
        ),  # a minor whose CUDA the old check never saw (no per-version JSON)
        (
            [('cuda = ["13.2"]\npypi_cuda', 'cuda = ["13.0"]\npypi_cuda')],
            "missing",
            "torch 2.15",
            ["a CUDA 13.2 build, not in the facts' builds (13.0)", 'add "13.2" to cuda'],
        ),
        (
            [('aarch64_cuda = ["13.2"]\npython = ["3.11"', 'aarch64_cuda = []\npython = ["3.11"')],
            "missing",
            "torch 2.15",
            ["linux aarch64 wheels are CUDA 13.2 builds", 'add "13.2" to aarch64_cuda'],
        ),
        (
            [('nvcc = ["13.4", "13.5"]', 'nvcc = ["13.4"]')],
            "missing",
            "nvcc 13.5",
            ["nvcc 13.5 (nvidia-cuda-nvcc on PyPI)", "no [[toolkit]] row"],
        ),
    ],
)
def test_each_kind_of_drift_is_named_with_its_fix(
    tmp_path: Path, edits, kind: str, subject: str, says
) -> None:
    report = check(facts_with(tmp_path, *edits))
    mine = [f for f in report.findings if f.subject == subject]
    assert len(mine) >= 1, report.findings
    text = " ".join(f"{f.problem}; {f.fix}" for f in mine)
    assert mine[0].kind == kind and all(s in text for s in says), text


def test_a_row_pypi_never_published_is_wrong(tmp_path: Path) -> None:
    row = '[torch."2.99"]\nversion = "2.99.0"\ncuda = ["13.2"]\npython = ["3.11", "3.15"]\nsource = "x"\n\n'
    report = check(facts_with(tmp_path, ('[torch."2.15"]', row + '[torch."2.15"]')))
    assert [(f.kind, f.subject) for f in report.findings] == [
        ("missing", "torch 2.14"),
        ("wrong", "torch 2.99"),
    ]
    assert "PyPI has no 2.99.x release" in report.findings[1].problem


def test_a_mirror_without_metadata_leaves_the_cuda_not_visible_never_drift(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    shutil.copytree(INDEX / "pypi", mirror / "pypi")  # no packages/: no .metadata, no wheel to range-read
    report = check(compat.load(FROZEN), mirror)
    assert [f.subject for f in report.findings] == ["torch 2.14"]
    assert "2.15.0 x86_64" in report.not_visible and "2.4.1 aarch64" in report.not_visible


def _wheel(path: Path, requires_dist: str, padding: int = 3 << 20) -> None:
    """A real zip shaped like a wheel: a big stored member first, the dist-info last (as torch's)."""
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("torch/lib/libbig.so", os.urandom(padding), compress_type=zipfile.ZIP_STORED)
        for index in range(2000):  # a directory of some size, as a real wheel's
            wheel.writestr(f"torch/include/h{index}.h", b"#pragma once\n", compress_type=zipfile.ZIP_DEFLATED)
        wheel.writestr(
            "torch-2.15.0.dist-info/METADATA",
            f"Metadata-Version: 2.4\nName: torch\nVersion: 2.15.0\n"
            f"Requires-Dist: {requires_dist}\n\nlong description\n",
            compress_type=zipfile.ZIP_DEFLATED,
        )


def test_without_pep658_the_metadata_comes_from_range_reads_of_the_zip(tmp_path: Path) -> None:
    (tmp_path / "pypi" / "torch").mkdir(parents=True)
    name = "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    _wheel(tmp_path / name, 'cuda-toolkit[cudart]==13.2.2; platform_system == "Linux"')
    spent: list[int] = []

    class Counting(facts_check.UrllibFetcher):
        def get_range(self, url: str, start: int | None, length: int) -> tuple[bytes, int]:
            body, size = super().get_range(url, start, length)
            spent.append(len(body))
            return body, size

    wheel = facts_check.Wheel(name, f"../../{name}", "x86_64", "3.12", 0)
    read = facts_check._first_metadata(Counting(), (tmp_path / "pypi/torch/json").as_uri(), [wheel])
    assert read is not None and facts_check.wheel_cuda(read[1], "x86_64") == "13.2"
    assert sum(spent) < (tmp_path / name).stat().st_size / 4, (
        spent
    )  # the directory and one member, not the wheel


def test_a_wheel_url_of_another_kind_than_the_index_is_refused() -> None:
    wheel = facts_check.Wheel(
        "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl", "file:///etc/passwd", "x86_64", "3.12", 0
    )
    with pytest.raises(BadAnswer, match="not a http"):
        facts_check._first_metadata(FETCH, "https://pypi.org/pypi/torch/json", [wheel])


def test_an_unreachable_index_is_the_environment() -> None:
    class Refused(facts_check.UrllibFetcher):
        def get(self, url: str) -> bytes:
            raise IndexUnreachable(f"{url}: [Errno 111] Connection refused")

    with pytest.raises(ToolchainError, match="cannot be read") as caught:
        facts_check.run(compat.load(FROZEN), Refused())
    assert caught.value.exit_code == exit_codes.ENVIRONMENT


@pytest.mark.parametrize(
    ("index", "says"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("pypi.org", "has no scheme"),
        ("javascript:alert(1)", "scheme javascript:"),
        ("ftp://pypi.org", "scheme ftp:"),
        ("http://[::1", "not a URL"),
        ("http://[fe80::zz]/", "not a URL"),
        ("http://pypi.org:99999", "not a URL"),
        ("https:///simple", "names no host"),
        ("https://py pi.org", "spaces"),
        ("https://pypi.org/é", "non-ASCII"),
        ("file:///nonexistent-index", "is not a folder"),
        ("file://otherhost/x", "another host"),
    ],
)
def test_a_bad_index_value_is_a_usage_error(index: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        facts_check.index_base(index)


# --- the command ----------------------------------------------------------------------------------


def test_command_exit_1_on_the_days_drift_and_0_once_fixed(tmp_path: Path) -> None:
    index = INDEX.as_uri()
    proc = run_build("facts", "check", *NO_OTHER_SOURCES, "--index", index, "--facts", str(FROZEN))
    assert proc.returncode == exit_codes.FAILED, proc.stdout + proc.stderr
    drift = [line for line in proc.stdout.splitlines() if line.startswith("[DRIFT ]")]
    assert len(drift) == 1 and "torch 2.14" in drift[0] and '"2.14.0"' in drift[0]
    assert "[ LEAD ] torch 2.15" in proc.stdout
    fixed = tmp_path / "compat.toml"
    fixed.write_text(edited(('patches = ["2.14.1"]', 'patches = ["2.14.0", "2.14.1"]')))
    proc = run_build("facts", "check", *NO_OTHER_SOURCES, "--index", index, "--facts", str(fixed))
    assert proc.returncode == exit_codes.OK, proc.stdout + proc.stderr
    # PyPI answered with no drift; the other sources (a closed port here) are said to be unreachable
    assert (
        "facts check: no drift in what answered" in proc.stdout and "facts check: current" not in proc.stdout
    )
    assert "unreachable, not compared: NVIDIA image registry, PyTorch index, Apex upstream" in proc.stdout


def _mirror(tmp_path: Path, torch_json: bytes | None = None) -> Path:
    mirror = tmp_path / "mirror"
    shutil.copytree(INDEX, mirror, ignore=shutil.ignore_patterns("*.py", "*.md"))
    if torch_json is not None:
        (mirror / "pypi/torch/json").write_bytes(torch_json)
    return mirror


@pytest.mark.parametrize(
    "answer",
    ["fifo", "dev_zero", "huge", "not_json", "string_requires", "list_releases", "no_torch", "bad_metadata"],
)
def test_a_hostile_answer_is_exit_3_at_once_with_one_line(tmp_path: Path, answer: str) -> None:
    mirror = _mirror(tmp_path)
    torch_json = mirror / "pypi/torch/json"
    data = json.loads(torch_json.read_bytes())
    if answer == "fifo":
        torch_json.unlink()
        os.mkfifo(torch_json)  # reading it would wait for a writer forever
    elif answer == "dev_zero":
        torch_json.unlink()
        torch_json.symlink_to("/dev/zero")
    elif answer == "huge":
        with torch_json.open("r+b") as handle:  # sparse: 65 MiB on disk costs nothing
            handle.truncate(65 << 20)
    elif answer == "not_json":
        torch_json.write_bytes(b"<html>proxy login</html>")
    elif answer == "string_requires":
        data["info"]["requires_dist"] = "nvidia-cuda-runtime-cu12==12.4.127"
        torch_json.write_text(json.dumps(data))
    elif answer == "list_releases":
        data["releases"] = [data["releases"]]
        torch_json.write_text(json.dumps(data))
    elif answer == "no_torch":
        torch_json.unlink()
    elif answer == "bad_metadata":
        (mirror / "packages/torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl.metadata").write_text(
            "Metadata-Version: 2.4\nName: torch\nRequires-Dist: nvidia-cuda-runtime-cu12 ((==13\n"
        )
    proc = run_build(
        "facts", "check", *NO_OTHER_SOURCES, "--index", mirror.as_uri(), "--facts", str(FROZEN), timeout=60
    )
    assert proc.returncode == exit_codes.ENVIRONMENT, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: the package index cannot be read") and "[DRIFT ]" not in proc.stdout


class _RangeBlindHandler(http.server.SimpleHTTPRequestHandler):
    """Python's own file server: it answers 200 with the whole file to a Range request."""

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_index(tmp_path: Path) -> Iterator[str]:
    mirror = _mirror(tmp_path)
    for metadata in (mirror / "packages").glob("torch-2.15.0-*.metadata"):  # 2.15.0 only by ranges: refused
        metadata.unlink()
        (mirror / "packages" / metadata.stem).write_bytes(b"\0" * (1 << 20))
    with local_server(lambda *a: _RangeBlindHandler(*a, directory=str(mirror))) as url:
        yield url


def test_command_over_http_and_a_server_that_ignores_ranges(http_index: str) -> None:
    proc = run_build("facts", "check", *NO_OTHER_SOURCES, "--index", http_index, "--facts", str(FROZEN))
    assert proc.returncode == exit_codes.FAILED, proc.stdout + proc.stderr
    assert "[DRIFT ]" in proc.stdout and "torch 2.14" in proc.stdout
    assert "2.15.0 x86_64, 2.15.0 aarch64: their CUDA not compared" in proc.stdout


def test_command_without_network_is_exit_3_and_bad_input_exit_2(tmp_path: Path) -> None:
    proc = run_build(
        "facts", "check", *NO_OTHER_SOURCES, "--index", "http://127.0.0.1:9", "--facts", str(FROZEN)
    )
    assert proc.returncode == exit_codes.ENVIRONMENT, proc.stdout + proc.stderr
    assert (
        proc.stderr.startswith("error: the package index cannot be read") and "Traceback" not in proc.stderr
    )
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_build("facts", "check", *NO_OTHER_SOURCES, "--facts", str(tmp_path / "nope.toml"))
    assert proc.returncode == exit_codes.USAGE and "--facts" in proc.stderr and "no such file" in proc.stderr
    for index in ("", "pypi.org", "javascript:alert(1)", "http://[::1", str(tmp_path / "nope")):
        proc = run_build("facts", "check", *NO_OTHER_SOURCES, "--index", index, "--facts", str(FROZEN))
        assert proc.returncode == exit_codes.USAGE, (index, proc.stderr)
        assert proc.stderr.startswith("error: --index") and len(proc.stderr.strip().splitlines()) == 1
    proc = run_build("facts")
    assert proc.returncode == exit_codes.USAGE and "build.py facts check" in proc.stderr


@pytest.mark.parametrize(
    ("edits", "says"),
    [
        (
            [
                (
                    'python = ["3.9", "3.13"]\nsource = "PyTorch RELEASE.md matrix, RFC',
                    'python = "3.9-3.13"\nsource = "x, RFC',
                )
            ],
            'torch["2.5"].python: expected a list, got a string',
        ),
        ([('python = ["3.9", "3.13"]', 'python = ["3.13", "3.9"]')], "runs backwards"),
        ([('version = "2.12.1"', 'version = "2.12.1rc1"')], "a release version like 2.6.0"),
        (
            [
                ('version = "2.12.1"', 'version = "2.13.0"'),
                ('patches = ["2.12.0", "2.12.1"]', 'patches = ["2.13.0"]'),
            ],
            "is not a 2.12.x release",
        ),
        ([('[torch."2.15"]', '[torch."2.15x"]')], "a major.minor version like 2.6 as the key"),
        ([('status = "fails"', 'status = "maybe"')], 'apex.builds[2].status: expected "compiles" or "fails"'),
        (
            [
                (
                    'evidence = "reports/h200-2026-11-30: build.py',
                    'evidenc = "reports/h200-2026-11-30: build.py',
                )
            ],
            "apex.builds[0].evidence: missing (required)",
        ),
        (
            [('torch_min = "2.11"\ntorch_max = "2.11"', 'torch_min = "2.12"\ntorch_max = "2.11"')],
            "torch_min 2.12 is above",
        ),
        ([("gcc_max = 11", 'gcc_max = "eleven"')], "toolkit[0].gcc_max: expected an integer"),
    ],
)
def test_malformed_facts_are_refused_naming_the_field(tmp_path: Path, edits, says: str) -> None:
    bad = tmp_path / "compat.toml"
    bad.write_text(edited(*edits))
    with pytest.raises(UsageError, match=r"not a valid compatibility facts file") as caught:
        compat.load(bad)
    assert says in str(caught.value), caught.value
    proc = run_build("facts", "check", *NO_OTHER_SOURCES, "--index", INDEX.as_uri(), "--facts", str(bad))
    assert proc.returncode == exit_codes.USAGE and says in proc.stderr and "Traceback" not in proc.stderr


def test_facts_that_are_a_fifo_or_another_toml_are_exit_2(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    not_facts = tmp_path / "other.toml"
    not_facts.write_text("[cells.a]\ncuda = '12.4'\n")
    for path, says in ((fifo, "FIFO"), (not_facts, "compat.apex: missing (required)")):
        proc = run_build(
            "facts", "check", *NO_OTHER_SOURCES, "--facts", str(path), "--index", INDEX.as_uri(), timeout=60
        )
        assert proc.returncode == exit_codes.USAGE and says in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
