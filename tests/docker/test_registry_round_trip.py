"""A real registry round trip by digest, with Docker and with podman.

A built cell (the verify-runtime image, given a unique label so it has its own image id) is published
to a real distribution registry on localhost through `build.py publish`; the digest lands next to the
cell's result; `build.py pull` pulls it back by that digest and verifies it. A changed digest, a
malformed one, a missing record and content changed inside the registry's storage are all refused.
The cell is named `cu12.4`, so its bake target (`cu12_4`) differs from its name, as in the issue."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.support import REPO
from verify.runtime import exit_codes

CELL = "cu12.4"


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "build.py", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def published(docker_client, verify_image_tag: str, registry: dict, tmp_path_factory: pytest.TempPathFactory):
    """The cell published once for this module: (matrix path, out dir, registry repository, record)."""
    unique = uuid.uuid4().hex[:8]
    tag = f"apex-ci-publish-{unique}"
    where = tmp_path_factory.mktemp("publish")
    matrix = where / "matrix.toml"
    matrix.write_text(
        f'[defaults]\npython = "3.11"\narchs = ["9.0"]\n\n[cells."{CELL}"]\ncuda = "12.4"\n'
        f'torch = "2.6"\ntag = "{tag}"\n'
    )
    dockerfile = (
        f"FROM {verify_image_tag}\nLABEL io.apex-toolchain.cell={tag} io.apex-toolchain.test-run={unique}\n"
    )
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    repository = f"{registry['host']}/apex-{unique}"
    out = where / "out"
    done = run_cli(
        "publish", "--matrix", str(matrix), "--cell", CELL, "--registry", repository, "--out", str(out)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((out / "cells" / tag / "published.json").read_text())
    _forget_locally(docker_client, repository, tag)  # every pull below really fetches the manifest
    yield {
        "matrix": matrix,
        "out": out,
        "repository": repository,
        "record": record,
        "tag": tag,
        "registry": registry,
    }
    _forget_locally(docker_client, repository, tag)
    podman = shutil.which("podman")
    if podman:
        subprocess.run([podman, "rmi", "--force", record["ref"]], capture_output=True, timeout=120)


def _forget_locally(docker_client, repository: str, tag: str) -> None:
    """Remove every local name of the published image (it then exists only in the registry)."""
    import docker

    for image in docker_client.images.list():
        for name in (image.tags or []) + (image.attrs.get("RepoDigests") or []):
            if name.startswith(repository) or name.split(":")[0] == tag:
                try:
                    docker_client.images.remove(name, force=True)
                except docker.errors.NotFound:  # already gone (another name of the same image)
                    pass


def _manifest_file(storage: Path, digest: str) -> Path:
    hexpart = digest.removeprefix("sha256:")
    return storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexpart[:2] / hexpart / "data"


def test_publish_records_the_digest_the_registry_serves(published: dict) -> None:
    record = published["record"]
    assert record["cell"] == published["tag"] and record["repository"] == published["repository"]
    assert record["ref"] == f"{published['repository']}@{record['digest']}"
    assert record["image_id"].startswith("sha256:") and record["pushed_by"] == "build.py publish"
    # the registry itself serves a manifest whose sha256 is the recorded digest
    name = published["repository"].split("/", 1)[1]
    request = urllib.request.Request(
        f"http://{published['registry']['host']}/v2/{name}/manifests/{record['digest']}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert "sha256:" + hashlib.sha256(answer.read()).hexdigest() == record["digest"]
    # the gh-matrix entry names the bake target by the same rule the bake file uses
    entry = json.loads(run_cli("gh-matrix", "--matrix", str(published["matrix"])).stdout)["include"][0]
    bake = json.loads(run_cli("bake", "--matrix", str(published["matrix"])).stdout)
    assert entry["cell"] == CELL and entry["target"] == "cu12_4" and list(bake["target"]) == [entry["target"]]


def test_pull_back_by_digest_and_verify(published: dict, docker_client) -> None:
    out = published["out"]
    done = run_cli(
        "pull",
        "--no-signature-check",
        "--matrix",
        str(published["matrix"]),
        "--cell",
        CELL,
        "--by-digest",
        "--gpu",
        "auto",
        "--out",
        str(out),
    )
    # verify ran in the pulled image and failed as it must: this cell's target has no Apex in it
    assert done.returncode == exit_codes.FAILED, done.stdout + done.stderr
    digest = published["record"]["digest"]
    assert f"pull and verify {published['repository']}@{digest}" in done.stdout
    report = json.loads((out / "cells" / published["tag"] / "verify" / "report.json").read_text())
    assert (
        report["audit"]["digest"] == digest and report["audit"]["image_id"] == published["record"]["image_id"]
    )
    assert report["mode"] == "static" and report["verdict"] == "FAIL"
    result = json.loads((out / "cells" / published["tag"] / "result.json").read_text())
    assert (
        result["build"]["digest"] == digest
        and result["build"]["tag"] == f"{published['repository']}@{digest}"
    )
    _forget_locally(docker_client, published["repository"], published["tag"])


def test_a_changed_digest_is_refused(published: dict) -> None:
    digest = published["record"]["digest"]
    changed = digest[:-1] + ("0" if digest[-1] != "0" else "1")
    done = run_cli(
        "pull",
        "--no-signature-check",
        "--matrix",
        str(published["matrix"]),
        "--cell",
        CELL,
        "--digest",
        changed,
        "--registry",
        published["repository"],
        "--out",
        str(published["out"] / "changed"),
    )
    assert done.returncode == exit_codes.FAILED, done.stdout + done.stderr
    assert (
        f"refusing {published['repository']}@{changed}: the registry holds no image with this digest"
        in done.stderr
    )
    assert not list((published["out"] / "changed").rglob("report.json")), "nothing was verified"


def test_malformed_or_missing_digests_are_usage_errors(published: dict, tmp_path: Path) -> None:
    bad = run_cli(
        "pull",
        "--no-signature-check",
        "--matrix",
        str(published["matrix"]),
        "--cell",
        CELL,
        "--digest",
        "sha256:1234",
        "--registry",
        published["repository"],
        "--out",
        str(tmp_path),
    )
    assert bad.returncode == exit_codes.USAGE and "not a sha256 image digest" in bad.stderr
    missing = run_cli(
        "pull",
        "--no-signature-check",
        "--matrix",
        str(published["matrix"]),
        "--cell",
        CELL,
        "--by-digest",
        "--registry",
        published["repository"],
        "--out",
        str(tmp_path),
    )  # no published.json here
    assert missing.returncode == exit_codes.USAGE and "--by-digest: no digest for" in missing.stderr
    other = run_cli(
        "pull",
        "--no-signature-check",
        "--matrix",
        str(published["matrix"]),
        "--cell",
        CELL,
        "--registry",
        "127.0.0.1:9/elsewhere",
        "--out",
        str(published["out"]),
    )
    assert other.returncode == exit_codes.USAGE and "records a push to" in other.stderr


def test_content_changed_in_the_registry_is_refused(published: dict, docker_client) -> None:
    _forget_locally(docker_client, published["repository"], published["tag"])
    manifest = _manifest_file(published["registry"]["storage"], published["record"]["digest"])
    original = manifest.read_bytes()
    data = json.loads(original)
    data["annotations"] = {"changed": "after publish"}
    manifest.write_text(json.dumps(data))
    try:
        done = run_cli(
            "pull",
            "--no-signature-check",
            "--matrix",
            str(published["matrix"]),
            "--cell",
            CELL,
            "--by-digest",
            "--digest",
            published["record"]["digest"],
            "--registry",
            published["repository"],
            "--out",
            str(published["out"] / "tampered"),
        )
    finally:
        manifest.write_bytes(original)
    assert done.returncode == exit_codes.FAILED, done.stdout + done.stderr
    assert "the registry's content does not match the digest (manifest verification failed" in done.stderr
    assert not list((published["out"] / "tampered").rglob("report.json"))


def test_podman_pulls_by_digest_and_verifies(published: dict, tmp_path: Path) -> None:
    """podman, no daemon: the same pull-by-digest and verify; its missing CDI spec means static verify."""
    if not shutil.which("podman"):
        pytest.fail("podman is not installed; run scripts/ensure-docker.sh (apt-get install podman)")
    env = {"APEX_PODMAN_TLS_VERIFY": "false", "APEX_CONTAINER_ENGINE": "podman"}
    # another node: only the publish record travels (as the images workflow hands it to the GPU job)
    record = tmp_path / "out" / "cells" / published["tag"] / "published.json"
    record.parent.mkdir(parents=True)
    shutil.copy(published["out"] / "cells" / published["tag"] / "published.json", record)
    done = run_cli(
        "pull",
        "--no-signature-check",
        "--matrix",
        str(published["matrix"]),
        "--cell",
        CELL,
        "--by-digest",
        "--gpu",
        "auto",
        "--out",
        str(tmp_path / "out"),
        env=env,
    )
    assert done.returncode == exit_codes.FAILED, done.stdout + done.stderr  # no Apex in the image
    assert "podman has no NVIDIA GPU runtime" in done.stderr and "verify --static instead" in done.stderr
    verify_dir = tmp_path / "out" / "cells" / published["tag"] / "verify"
    report = json.loads((verify_dir / "report.json").read_text())
    run = json.loads((verify_dir / "container-run.json").read_text())
    assert report["audit"]["engine"] == "podman" and run["gpu_runtime"] is False
    assert report["audit"]["digest"] == published["record"]["digest"]
    assert report["audit"]["image_id"] == published["record"]["image_id"]  # same image, another engine
    assert report["host"]["in_container"] is True and report["mode"] == "static"
    # and the zipapp through podman (`podman cp` of a tar, like Docker's put_archive): same checks
    ref = published["record"]["ref"]
    zipped = run_cli(
        "verify",
        ref,
        "--engine",
        "podman",
        "--verify-from",
        "zipapp",
        "--gpu",
        "none",
        "--out",
        str(tmp_path / "zip"),
        env=env,
    )
    assert zipped.returncode == exit_codes.FAILED, zipped.stdout + zipped.stderr
    second = json.loads(next((tmp_path / "zip").rglob("report.json")).read_text())
    assert second["audit"]["verify_from"] == "zipapp" and second["audit"]["engine"] == "podman"
    assert [(c["id"], c["status"]) for c in second["checks"]] == [
        (c["id"], c["status"]) for c in report["checks"]
    ]
    leftovers = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, timeout=60
    ).stdout
    assert "apex-verify-" not in leftovers, "every podman container is removed"
