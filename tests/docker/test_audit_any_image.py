"""`build.py verify IMAGE` audits an image that does not contain verify (the local base plus
torch, like NGC PyTorch or a user's own image): it copies the zipapp in, runs it with the image's own
Python and torch, and gets the same verdict as verify run on this host. The report names the image."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.support import REPO
from toolchain.image import container_verify
from verify.runtime import exit_codes

SCHEMA = json.loads((REPO / "verify" / "schema" / "report.schema.json").read_text())


def _host_report(tmp_path: Path) -> tuple[int, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("APEX_BUILD_MANIFEST", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "-m", "verify", "--static", "--json", str(tmp_path / "host.json")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return done.returncode, json.loads((tmp_path / "host.json").read_text())


def test_image_without_verify_gets_the_zipapp_and_the_hosts_verdict(
    torch_only_image_tag: str, tmp_path: Path, docker_client
) -> None:
    # the image really has no verify (its build asserts it too) and no toolchain label
    assert "io.apex-toolchain.cell" not in (docker_client.images.get(torch_only_image_tag).labels or {})
    import docker

    with pytest.raises(docker.errors.ContainerError):  # verify is not importable in the torch-only image
        docker_client.containers.run(torch_only_image_tag, ["python", "-c", "import verify"], remove=True)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "build.py", "verify", torch_only_image_tag, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    host_code, host = _host_report(tmp_path)
    assert done.returncode == host_code == exit_codes.FAILED, done.stdout + done.stderr  # no Apex either side
    report_path = next(out.rglob("report.json"))
    report = json.loads(report_path.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    # same verdict and the same checks with the same statuses as verify on this host
    assert report["verdict"] == host["verdict"] and report["exit_code"] == host["exit_code"]
    assert [(c["id"], c["status"]) for c in report["checks"]] == [
        (c["id"], c["status"]) for c in host["checks"]
    ]
    # it ran inside the image, with the image's Python and torch, not the host's
    assert report["host"]["in_container"] is True
    assert report["environment"]["python"]["executable"].startswith("/opt/venv/")
    assert report["environment"]["torch"]["path"].startswith("/opt/venv/")
    # the report says which image was audited, and with which verify
    audit = report["audit"]
    image = docker_client.images.get(torch_only_image_tag)
    assert audit["image"] == torch_only_image_tag and audit["image_id"] == image.id
    assert (
        audit["verify_from"] == "zipapp" and audit["engine"] == "docker" and len(audit["zipapp_sha256"]) == 64
    )
    assert audit["digest"] is None  # a local image, never pushed: the image id names it
    assert f"Audited image `{torch_only_image_tag}`" in (report_path.parent / "report.md").read_text()
    assert f"audited {torch_only_image_tag} (image id {image.id}" in done.stdout


def test_an_image_without_python_is_exit_3_not_a_crash(base_image: str, tmp_path: Path) -> None:
    """The local base has no Python at all: the zipapp cannot run; the run says why."""
    code, report_path = container_verify.verify_image(base_image, out_dir=tmp_path, gpu="none")
    assert code == exit_codes.ENVIRONMENT
    assert "no python3 or python on PATH" in Path(report_path).read_text()


def test_own_images_run_their_own_verify_unless_told(verify_image_tag: str, tmp_path: Path) -> None:
    code, report_path = container_verify.verify_image(verify_image_tag, out_dir=tmp_path / "auto", gpu="none")
    assert json.loads(Path(report_path).read_text())["audit"]["verify_from"] == "image"
    code2, report_path2 = container_verify.verify_image(
        verify_image_tag, out_dir=tmp_path / "zip", gpu="none", verify_from="zipapp"
    )
    first, second = (json.loads(Path(p).read_text()) for p in (report_path, report_path2))
    assert second["audit"]["verify_from"] == "zipapp" and code == code2 == exit_codes.FAILED
    assert [(c["id"], c["status"]) for c in first["checks"]] == [
        (c["id"], c["status"]) for c in second["checks"]
    ]
