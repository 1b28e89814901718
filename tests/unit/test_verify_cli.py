"""`python -m verify` end to end, in subprocesses, on real states this CPU machine can make:
no Apex, the unrelated PyPI `apex` (really installed into an isolated target), a CPU-only torch,
and bad input (unknown --require names, unreadable / malformed / foreign manifests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.support import REPO as ROOT
from tests.support import run_verify

SCHEMA = json.loads((ROOT / "verify" / "schema" / "report.schema.json").read_text())
PYPI_APEX = "apex==0.9.10dev"  # the 2013 Pyramid toolkit that `pip install apex` gets


def load_report(path: Path) -> dict:
    report = json.loads(path.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    return report


def checks_by_id(report: dict) -> dict[str, dict]:
    return {c["id"]: c for c in report["checks"]}


def test_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_no_apex_static(tmp_path: Path) -> None:
    out = run_verify("--static", "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md"))
    assert out.returncode == 1, out.stderr
    report = load_report(tmp_path / "r.json")
    checks = checks_by_id(report)
    assert report["apex"]["kind"] == "not_installed"
    assert checks["identity.apex"]["status"] == "FAIL"
    for feature in ("FusedAdam", "FusedLayerNorm", "FusedRMSNorm"):
        assert checks[f"expectations.feature.{feature}"]["status"] == "FAIL"
    assert {e["module"]: e["status"] for e in report["extensions"]}["amp_C"] == "missing"
    assert report["verdict"] == "FAIL" and report["exit_code"] == 1 and report["mode"] == "static"
    assert "Traceback" not in out.stderr
    assert "\033[" not in out.stdout  # plain output when not on a terminal
    assert out.stdout.splitlines()[-1].startswith("verify static: FAIL")
    assert "| `amp_C` |" in (tmp_path / "r.md").read_text()
    # the printed timing is the evidence for the --static target (< 5 s), not an assertion here
    print("\n--static wall time as printed:", out.stdout.splitlines()[-1])


def test_cpu_torch_environment_and_require_gpu(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA device; the no-GPU state cannot be shown here")
    out = run_verify("--static", "--require-gpu", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 3, out.stdout + out.stderr
    report = load_report(tmp_path / "r.json")
    assert report["environment"]["torch"]["cuda_available"] is False
    assert report["environment"]["torch"]["gpu"] is None
    assert report["environment"]["torch"]["cuda"] == torch.version.cuda
    assert checks_by_id(report)["environment.require_gpu"]["status"] == "FAIL"
    assert report["exit_code"] == 3


def test_full_mode_without_gpu_skips_gpu_layers(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA device")
    out = run_verify("--json", str(tmp_path / "r.json"), "--seed", "7", "--quiet")
    report = load_report(tmp_path / "r.json")
    checks = checks_by_id(report)
    assert report["mode"] == "full" and report["options"]["seed"] == 7
    assert checks["parity.all"]["status"] == "SKIP" and checks["timing.all"]["status"] == "SKIP"
    assert out.returncode == 1  # exit follows the other checks (no Apex here), not the missing GPU
    assert all(line.split()[0] in ("FAIL", "WARN", "verify") for line in out.stdout.splitlines())


@pytest.fixture(scope="module")
def pypi_apex(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("pypi-apex")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), PYPI_APEX],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"could not install the real PyPI {PYPI_APEX}: {done.stderr[-500:]}")
    return target


def test_unrelated_pypi_apex(tmp_path: Path, pypi_apex: Path) -> None:
    out = run_verify("--static", "--json", str(tmp_path / "r.json"), extra_path=str(pypi_apex))
    assert out.returncode == 1, out.stderr
    report = load_report(tmp_path / "r.json")
    checks = checks_by_id(report)
    assert report["apex"]["kind"] == "pypi_unrelated"
    assert report["apex"]["path"] == str(pypi_apex / "apex")
    assert checks["identity.apex"]["status"] == "FAIL"
    assert "unrelated PyPI package" in checks["identity.apex"]["summary"]
    assert "pyramid_mailer" in checks["identity.import"]["summary"]  # its own import fails without deps
    assert checks["expectations.feature.FusedAdam"]["status"] == "FAIL"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--require", "FusedAdm"], "did you mean 'FusedAdam'"),
        (["--require", "FusedAdam,fused_layer_norm_cuda,Nope"], "--require Nope: unknown"),
        (["--check-timeout", "0"], "--check-timeout"),
        (["--quiet", "--verbose"], "--verbose: not allowed with argument --quiet"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str], needle: str) -> None:
    out = run_verify("--static", *args)
    assert out.returncode == 2
    assert needle in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def _manifest(**overrides) -> dict:
    import torch

    data = {
        "manifest_version": "1",
        "apex": {"commit": "6424da3b" + "0" * 32, "ref": "master"},
        "flags": {"APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1"},
        "expected_modules": ["apex_C", "amp_C", "fused_layer_norm_cuda"],
        "built_modules": [],
        "skipped_extensions": [],
        "arch_list": "9.0",
        "versions": {"torch": torch.__version__},
    }
    data.update(overrides)
    return data


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "does not exist"),
        ("{not json", "is not valid JSON"),
        (json.dumps(["a list"]), "not a JSON object"),
        (json.dumps({"manifest_version": "7", "expected_modules": []}), "manifest_version is '7'"),
        (json.dumps({"manifest_version": "1", "expected_modules": "amp_C"}), "expected_modules"),
        (b"\xff\xfe\x00binary", "unreadable"),
    ],
)
def test_bad_manifest_exit_2(tmp_path: Path, content, needle: str) -> None:
    path = tmp_path / "build-manifest.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    out = run_verify("--static", "--manifest", str(path))
    assert out.returncode == 2, out.stdout
    assert needle in out.stderr and str(path) in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_manifest_from_another_image_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_manifest(versions={"torch": "2.4.1+cu121"})))
    out = run_verify("--static", env={"APEX_BUILD_MANIFEST": str(path)})
    assert out.returncode == 2
    assert "from another image" in out.stderr and "2.4.1+cu121" in out.stderr
    assert "Traceback" not in out.stderr


def test_manifest_expected_modules_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(
        json.dumps(
            _manifest(
                skipped_extensions=[{"module": "fast_layer_norm", "warning": "no cuDNN"}],
                expected_modules=["apex_C", "amp_C", "some_future_module"],
            )
        )
    )
    out = run_verify("--static", "--manifest", str(path), "--json", str(tmp_path / "r.json"))
    assert out.returncode == 1
    report = load_report(tmp_path / "r.json")
    checks = checks_by_id(report)
    expected = checks["expectations.manifest.expected_modules"]
    assert expected["status"] == "FAIL" and "3 of 3" in expected["summary"]
    assert checks["expectations.manifest.unknown_modules"]["status"] == "WARN"
    assert "some_future_module" in {e["module"] for e in report["extensions"]}
    assert report["manifest"]["data"]["arch_list"] == "9.0"


def test_unwritable_report_path_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = run_verify("--static", "--json", str(blocker / "r.json"))
    assert out.returncode == 2 and "cannot write report" in out.stderr


def test_bench_is_delegated() -> None:
    out = run_verify("bench", "--help")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.startswith("usage: verify bench")  # verify bench's own parser answered


def _row(stdout: str, module: str) -> list[str]:
    """A module's row of the compatibility table, split into its columns (two or more spaces apart)."""
    import re

    line = next(ln for ln in stdout.splitlines() if ln.split(" ", 1)[0] == module)
    return re.split(r"\s{2,}", line.strip())


@pytest.mark.slow
def test_default_output_is_the_module_table_then_what_is_not_pass(tmp_path: Path) -> None:
    """This host: torch without CUDA, no Apex; then two modules that import (real files on PYTHONPATH)."""
    out = run_verify("--static", "--markdown", str(tmp_path / "r.md"))
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == [
        "module",
        "flag",
        "imports",
        "SASS/PTX",
        "for",
        "this",
        "GPU",
        "runs",
        "here",
        "needed",
        "by",
    ]
    assert _row(out.stdout, "amp_C") == [
        "amp_C",
        "APEX_CUDA_EXT",
        "no: not built",
        "-",
        "no",
        "FusedAdam, FusedSGD, FusedLAMB, ...",
    ]
    assert _row(out.stdout, "fused_layer_norm_cuda")[2] == "no: not built"
    table_end = lines.index("── not PASS ──")
    assert table_end == 1 + len(
        json.loads((ROOT / "verify" / "data" / "apex_modules.json").read_text())["modules"]
    )
    after = lines[table_end + 1 :]
    assert not [ln for ln in after if ln.startswith(("PASS ", "INFO "))]  # PASS and INFO only with --verbose
    assert any(ln.startswith("WARN  environment.gpu") and "CPU-only build" in ln for ln in after)
    assert any(ln.startswith("FAIL  identity.apex") and "not installed" in ln for ln in after), after
    assert any(ln.startswith("FAIL  expectations.feature.FusedAdam") for ln in after)
    assert "--verbose prints every check" in lines[-2] and lines[-1].startswith("verify static: FAIL")
    md = (tmp_path / "r.md").read_text()
    assert md.index("## Modules") < md.index("## Environment")
    assert "| `amp_C` | APEX_CUDA_EXT | no: not built | - | no | FusedAdam, FusedSGD, FusedLAMB, ... |" in md

    # modules that do import: a CPU module runs here, a CUDA one cannot without a GPU
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "apex_C.py").write_text("")
    (tmp_path / "mods" / "amp_C.py").write_text("")
    found = run_verify("--static", extra_path=str(tmp_path / "mods"))
    assert _row(found.stdout, "apex_C")[2:5] == ["yes", "-", "yes"]
    assert _row(found.stdout, "amp_C")[2:5] == ["yes", "-", "no GPU"]


@pytest.mark.slow
def test_verbose_prints_every_check_and_quiet_only_fail_and_warn() -> None:
    verbose = run_verify("--static", "--verbose")
    assert verbose.returncode == 1
    assert verbose.stdout.splitlines()[0] == "── environment ──"
    assert any(ln.startswith("PASS  environment.torch") for ln in verbose.stdout.splitlines())
    assert "SASS/PTX for this GPU" not in verbose.stdout
    quiet = run_verify("--static", "--quiet")
    assert quiet.returncode == 1
    assert "SASS/PTX for this GPU" not in quiet.stdout and "──" not in quiet.stdout
    assert {ln[:4] for ln in quiet.stdout.splitlines()[:-1]} <= {"FAIL", "WARN"}


def test_junit_file_of_a_real_run_counts_what_the_report_holds(tmp_path: Path) -> None:
    """A failing full run on this CPU host (no GPU: the GPU layers SKIP): --junit beside --json."""
    import xml.etree.ElementTree as ET

    xml, rep = tmp_path / "ci" / "verify.xml", tmp_path / "r.json"
    out = run_verify("--no-distributed", "--json", str(rep), "--junit", str(xml))
    assert out.returncode in (1, 3), out.stderr
    report = load_report(rep)
    root = ET.parse(xml).getroot()
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == len(report["checks"])
    assert len(root.findall(".//failure")) == report["summary"]["FAIL"] > 0
    assert len(root.findall(".//skipped")) == report["summary"]["SKIP"]
    names = {(c.get("classname"), c.get("name")) for c in cases}
    assert ("verify.compile", "all") in names or ("verify.compile", "fused_layer_norm") in names
    assert all(str(rep) in (c[0].text or "") for c in cases)  # every case points at the report
    assert "--large with --static" in run_verify("--static", "--large").stderr
