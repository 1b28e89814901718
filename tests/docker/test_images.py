"""The real Dockerfile on a real engine: build, verify in a container, inspect, failures, security."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import jsonschema
import pytest

from tests.support import REPO
from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.image import buildkit_build, container_verify, docker_host, inspect_image
from verify.runtime import exit_codes

SCHEMA = REPO / "verify" / "schema" / "report.schema.json"


def test_verify_runtime_image_has_labels_user_and_cmd(verify_image_tag: str) -> None:
    info = inspect_image.inspect(verify_image_tag)
    assert info["labels"]["cell"] == verify_image_tag
    assert info["labels"]["torch"] == "2.13.0+cpu" and info["labels"]["python"] == "3.11"
    assert info["labels"]["target"] == "verify-runtime"
    assert info["oci"]["base.name"] == "apex-toolchain/base:bookworm"
    assert info["oci"]["base.digest"].startswith("sha256:")
    assert info["oci"]["version"] == verify_image_tag and info["oci"]["created"]
    assert info["user"] == "10001" and info["cmd"] == ["python", "-m", "verify"]
    assert info["manifest"] is None, "no Apex in this target, so no build manifest"


def test_runtime_user_is_not_root(docker_client, verify_image_tag: str) -> None:
    out = docker_client.containers.run(verify_image_tag, ["id", "-u"], remove=True)
    assert int(out.decode().strip()) != 0


def test_verify_in_container_without_gpu_runtime_runs_static(
    verify_image_tag: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code, report_path = container_verify.verify_image(verify_image_tag, out_dir=tmp_path)
    assert "no NVIDIA GPU runtime" in capsys.readouterr().err
    run = json.loads((tmp_path / "container-run.json").read_text())
    assert run["gpu_runtime"] is False and run["mode"] == "static" and "verify --static" in run["note"]
    report = json.loads(Path(report_path).read_text())
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))  # the published schema, always there
    assert report["mode"] == "static"
    assert report["verdict"] == "FAIL" and code == exit_codes.FAILED == report["exit_code"]  # no Apex inside
    assert (tmp_path / "report.md").is_file() and (tmp_path / "verify.log").is_file()


def test_gpu_required_without_runtime_is_exit_3(verify_image_tag: str, tmp_path: Path) -> None:
    with pytest.raises(EnvironmentUnavailable, match="no NVIDIA GPU runtime"):
        container_verify.verify_image(verify_image_tag, out_dir=tmp_path, gpu="require")


def test_build_py_verify_and_inspect(verify_image_tag: str, tmp_path: Path) -> None:
    verify = subprocess.run(
        [sys.executable, "build.py", "verify", verify_image_tag, "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verify.returncode == exit_codes.FAILED, verify.stdout + verify.stderr
    reports = list(tmp_path.rglob("report.json"))
    assert reports and json.loads(reports[0].read_text())["mode"] == "static"
    inspect = subprocess.run(
        [sys.executable, "build.py", "inspect", verify_image_tag],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert inspect.returncode == exit_codes.OK, inspect.stderr
    assert json.loads(inspect.stdout)["labels"]["cell"] == verify_image_tag


def test_unknown_image_is_a_usage_error(docker_client, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not in the local Docker store"):
        inspect_image.inspect("apex-toolchain/no-such-image:nothing")
    with pytest.raises(UsageError):
        container_verify.verify_image("apex-toolchain/no-such-image:nothing", out_dir=tmp_path)


def _layer_files(image_tar: Path):
    """(layer name, path, bytes) of every regular file in every layer of a `docker save` archive."""
    with tarfile.open(image_tar) as outer:
        for member in outer.getmembers():
            if not member.name.endswith("layer.tar"):
                continue
            with tarfile.open(fileobj=outer.extractfile(member)) as layer:
                for item in layer:
                    if item.isfile():
                        extracted = layer.extractfile(item)
                        assert extracted, item.name  # a regular file's member has contents
                        yield member.name, item.name, extracted.read()


@pytest.mark.slow
def test_no_secret_or_ca_material_in_any_layer(
    docker_client, verify_image_tag: str, torch_stage_tag: str, test_ca: dict, tmp_path: Path
) -> None:
    marker = test_ca["marker"].encode()
    for tag in (torch_stage_tag, verify_image_tag):
        archive = tmp_path / "image.tar"
        with open(archive, "wb") as handle:
            for chunk in docker_client.images.get(tag).save(named=False):
                handle.write(chunk)
        leaks = [
            (layer, path)
            for layer, path, data in _layer_files(archive)
            if marker in data or "ca-bundle." in path or path.endswith("secrets/extra_ca")
        ]
        assert leaks == [], f"{tag}: extra-CA material in layers: {leaks[:5]}"
        archive.unlink()


def test_extra_ca_helper_makes_pypi_verify(docker_client, verify_image_tag: str, test_ca: dict) -> None:
    """The helper every networked RUN goes through: with the secret mounted where BuildKit mounts it,
    pip verifies PyPI's certificate (here it only verifies with the host's CA); without it, it does not."""
    script = "sh /docker/with-extra-ca.sh pip download -q --no-deps --index-url https://pypi.org/simple -d /tmp/x packaging"
    volumes = {str(REPO / "docker"): {"bind": "/docker", "mode": "ro"}}
    with_ca = dict(volumes, **{str(test_ca["bundle"]): {"bind": "/run/secrets/extra_ca", "mode": "ro"}})
    import docker

    try:
        out = docker_client.containers.run(
            verify_image_tag, ["sh", "-c", script], volumes=with_ca, remove=True
        )
    except docker.errors.ContainerError as error:  # a machine without PyPI access cannot show this
        if "Max retries" in str(error) and "SSL" not in str(error):
            pytest.skip(f"PyPI is not reachable from containers here: {error}")
        raise
    assert b"trusting the extra CA" in out

    with pytest.raises(docker.errors.ContainerError):
        docker_client.containers.run(
            verify_image_tag, ["sh", "-c", script + " --retries 0 --timeout 20"], volumes=volumes, remove=True
        )


def test_failing_cell_names_its_stage_and_the_good_image_survives(
    docker_client, verify_image_tag: str, wheelhouse: Path, cell_factory, logs: Path
) -> None:
    bad = cell_factory("apex-ci-broken-torch0.0.1-py3.11-debian12", torch="0.0.1")
    result = buildkit_build.build_image(
        bad, target="verify-runtime", log_path=logs / "broken.log", wheelhouse=wheelhouse, progress="plain"
    )
    assert not result.ok
    assert result.stage_failed == "torch" and (result.step_failed or "").startswith("[torch ")
    assert any("torch==0.0.1" in line for line in result.log_tail), result.log_tail
    assert docker_client.images.get(verify_image_tag), "the good cell's image is still there"


def test_matrix_runner_goes_on_after_a_failed_cell(
    docker_client, verify_image_tag: str, wheelhouse: Path, cell_factory, tmp_path: Path
) -> None:
    """Through the project's matrix runner: a broken cell first, then the good one (cached) is built
    and verified, and the matrix report names the failing stage."""
    from toolchain.console import Console
    from toolchain.runs import run_loop as matrix_run
    from toolchain.runs.run_overview import REPORT_NAME
    from toolchain.runs.run_request import RunRequest

    cells = [cell_factory("apex-ci-broken2-torch0.0.2-py3.11-debian12", torch="0.0.2"), cell_factory()]
    request = RunRequest(
        out=tmp_path / "out",
        logs=tmp_path / "logs",
        target="verify-runtime",
        apex_src=None,
        wheelhouse=wheelhouse,
        extra_ca=None,
        progress="plain",
        verify="auto",
    )
    code = matrix_run.run_matrix(cells, request, Console(), matrix_path=REPO / "matrix.toml")
    assert code == exit_codes.FAILED
    report = json.loads((tmp_path / "out" / REPORT_NAME).read_text())
    by_id = {entry["id"]: entry for entry in report["cells"]}
    broken = by_id[cells[0].id]
    assert broken["status"] == "build_failed" and broken["build"]["stage_failed"] == "torch"
    good = json.loads(matrix_run.result_path(tmp_path / "out", cells[1].id).read_text())
    assert by_id[cells[1].id]["status"] == good["status"]
    # verify-runtime has no Apex inside: verify runs (statically, no GPU runtime here) and fails
    assert good["build"]["ok"] is True and good["status"] == good["verify"]["status"] == "verify_failed"
    assert good["verify"]["exit_code"] == exit_codes.FAILED and Path(good["verify"]["report_path"]).is_file()


def test_no_daemon_is_exit_3_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, cell_factory, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    with pytest.raises(EnvironmentUnavailable, match="no Docker daemon answers"):
        docker_host.ping(timeout=3)
    with pytest.raises(EnvironmentUnavailable, match="no Docker daemon answers|start it"):
        buildkit_build.build_image(
            cell_factory(), target="verify-runtime", log_path=tmp_path / "b.log", progress="plain"
        )
