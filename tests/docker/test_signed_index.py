"""A stack's platforms under one tag, and a signature checked before the pull.

Two real platform images go to a real distribution registry on localhost through `build.py publish`: the
verify-runtime image for linux/amd64 (it can run here), and a linux/arm64 image that BuildKit makes without
running anything (FROM scratch + COPY, no emulation). `build.py publish-index` puts both under the stack's one
tag as an OCI index. The index digest is signed the way `cosign sign --key` does (tests/docker/cosign_format.py:
no cosign binary installs here, and Debian's skopeo has sigstore signing disabled), and `build.py pull`
must refuse what is unsigned, signed by another key, or signed for another digest, before pulling anything.
"""

from __future__ import annotations

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

from tests.docker import cosign_format
from tests.support import REPO
from verify.runtime import exit_codes

AMD64, ARM64 = "stack", "stack-arm64"
INDEX = "application/vnd.oci.image.index.v1+json"


def run_cli(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "build.py", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def _manifest(host: str, name: str, reference: str) -> tuple[str, dict]:
    request = urllib.request.Request(
        f"http://{host}/v2/{name}/manifests/{reference}", headers={"Accept": INDEX}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.headers["Docker-Content-Digest"], json.loads(answer.read())


@pytest.fixture(scope="module")
def stack(docker_client, verify_image_tag: str, registry: dict, tmp_path_factory: pytest.TempPathFactory):
    """Both platform images published (not yet indexed): matrix, out, repository, the two records."""
    unique = uuid.uuid4().hex[:8]
    where = tmp_path_factory.mktemp("stack")
    matrix = where / "matrix.toml"
    matrix.write_text(
        f'[defaults]\npython = "3.12"\narchs = ["9.0"]\n\n[cells.{AMD64}]\ncuda = "13.2"\ntorch = "2.15"\n\n'
        f'[cells.{ARM64}]\ncuda = "13.2"\ntorch = "2.15"\nplatform = "linux/arm64"\n'
    )
    amd64 = f"apex-ci-sig-amd64-{unique}"
    docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {verify_image_tag}\nLABEL io.apex-toolchain.test-run={unique}\n".encode()),
        tag=amd64,
        rm=True,
    )
    arm64 = f"apex-ci-sig-arm64-{unique}"
    context = where / "arm64"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM scratch\nCOPY marker /marker\n")
    (context / "marker").write_text(unique)
    from toolchain.image import docker_host

    built = subprocess.run(
        [
            *docker_host.docker_client().build_prefix(),
            "--platform",
            "linux/arm64",
            "--tag",
            arm64,
            str(context),
        ],
        env=dict(os.environ, DOCKER_BUILDKIT="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert docker_client.images.get(arm64).attrs["Architecture"] == "arm64"
    from toolchain.spec import matrix as matrix_mod

    ids = {cell.name: cell.id for cell in matrix_mod.load_matrix(matrix).cells}
    repository = f"{registry['host']}/apex-sig-{unique}"
    out = where / "out"
    records = {}
    for cell, image in ((AMD64, amd64), (ARM64, arm64)):
        done = run_cli(
            "publish",
            "--matrix",
            str(matrix),
            "--cell",
            cell,
            "--image",
            image,
            "--registry",
            repository,
            "--out",
            str(out),
        )
        assert done.returncode == 0, done.stdout + done.stderr
        records[cell] = json.loads((out / "cells" / ids[cell] / "published.json").read_text())
    yield {
        "matrix": matrix,
        "out": out,
        "repository": repository,
        "host": registry["host"],
        "ids": ids,
        "name": repository.split("/", 1)[1],
        "records": records,
        "where": where,
    }
    for name in (amd64, arm64):
        for image in docker_client.images.list(name=name):
            docker_client.images.remove(image.id, force=True)
    for image in docker_client.images.list():
        for tag in (image.attrs.get("RepoDigests") or []) + (image.tags or []):
            if tag.startswith(repository):
                docker_client.images.remove(tag, force=True)


@pytest.fixture(scope="module")
def indexed(stack: dict) -> dict:
    done = run_cli(
        "publish-index",
        "--matrix",
        str(stack["matrix"]),
        "--registry",
        stack["repository"],
        "--out",
        str(stack["out"]),
        "--refs-out",
        str(stack["where"] / "refs.txt"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ref = (stack["where"] / "refs.txt").read_text().strip()
    return {**stack, "ref": ref, "digest": ref.partition("@")[2], "console": done.stdout}


def _records(out: Path) -> dict[str, dict]:
    return {path.parent.name: json.loads(path.read_text()) for path in out.glob("cells/*/published.json")}


def test_both_platforms_go_under_one_tag(indexed: dict) -> None:
    records = _records(indexed["out"])
    tags = {record["tag"] for record in records.values()}
    assert len(tags) == 1 and not next(iter(tags)).endswith("-arm64"), tags
    tag = tags.pop()
    served, index = _manifest(indexed["host"], indexed["name"], tag)
    assert served == indexed["digest"] and index["mediaType"] == INDEX
    platforms = {
        f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in index["manifests"]
    }
    pushed = {record["platform"]: record["digest"] for record in indexed["records"].values()}
    assert set(pushed) == {"linux/amd64", "linux/arm64"} and platforms == pushed
    for record in records.values():  # each cell's record now names the index, and keeps its own digest
        assert record["digest"] == indexed["digest"] and record["index"]["platforms"] == platforms
        assert record["platform_digest"] == platforms[record["platform"]]
    assert "INDEXED" in indexed["console"] and "linux/arm64" in indexed["console"]


def test_indexing_again_changes_nothing(indexed: dict) -> None:
    done = run_cli(
        "publish-index",
        "--matrix",
        str(indexed["matrix"]),
        "--registry",
        indexed["repository"],
        "--out",
        str(indexed["out"]),
    )
    assert done.returncode == 0 and indexed["ref"] in done.stdout, done.stdout + done.stderr


def test_a_digest_of_the_wrong_platform_or_a_missing_member_is_refused(indexed: dict, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(indexed["out"], out)
    records = _records(out)
    amd64_id = next(cid for cid, r in records.items() if r["platform"] == "linux/amd64")
    arm64_id = next(cid for cid, r in records.items() if r["platform"] == "linux/arm64")
    wrong = dict(records[amd64_id], platform_digest=records[arm64_id]["platform_digest"])
    (out / "cells" / amd64_id / "published.json").write_text(json.dumps(wrong))
    done = run_cli(
        "publish-index",
        "--matrix",
        str(indexed["matrix"]),
        "--registry",
        indexed["repository"],
        "--out",
        str(out),
    )
    assert done.returncode == exit_codes.FAILED, done.stdout + done.stderr
    assert (
        f"{amd64_id}: {records[arm64_id]['platform_digest']} is an image for linux/arm64, not the cell's linux/amd64"
        in done.stdout
    )
    (out / "cells" / arm64_id / "published.json").unlink()
    done = run_cli(
        "publish-index",
        "--matrix",
        str(indexed["matrix"]),
        "--registry",
        indexed["repository"],
        "--out",
        str(out),
    )
    assert done.returncode == exit_codes.FAILED and f"no publish record for {arm64_id}" in done.stdout
    assert _manifest(indexed["host"], indexed["name"], records[amd64_id]["tag"])[0] == indexed["digest"], (
        "tag not moved"
    )


@pytest.fixture(scope="module")
def signed(indexed: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    where = tmp_path_factory.mktemp("keys")
    key, public = cosign_format.key_pair(where)
    cosign_format.sign(indexed["host"], indexed["name"], indexed["digest"], key)
    other = where / "other"
    other.mkdir()
    return {**indexed, "key": key, "public": public, "other_public": cosign_format.key_pair(other)[1]}


def _pull(signed: dict, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_cli(
        "pull",
        "--matrix",
        str(signed["matrix"]),
        "--cell",
        AMD64,
        "--registry",
        signed["repository"],
        "--gpu",
        "auto",
        "--out",
        str(out),
        *extra,
    )


def test_a_signed_index_is_pulled_and_verified(signed: dict, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(signed["out"], out)
    done = _pull(signed, out, "--by-digest", "--signature-key", str(signed["public"]))
    # verify ran in the pulled amd64 image and failed as it must: this image holds no Apex
    assert done.returncode == exit_codes.FAILED, done.stdout + done.stderr
    assert f"[SIGNED] {signed['ref']}: key signature verified" in done.stdout
    assert "verify exit 1" in done.stderr + done.stdout, done.stdout + done.stderr
    result = json.loads((out / "cells" / signed["ids"][AMD64] / "result.json").read_text())
    assert (
        result["build"]["signature"]["checked"] is True
        and result["build"]["signature"]["signed_digest"] == signed["digest"]
    )
    assert result["verify"]["verdict"] == "FAIL" and result["build"]["digest"] == signed["digest"]


def test_unsigned_wrongly_signed_or_misclaimed_digests_are_refused_before_the_pull(
    signed: dict, tmp_path: Path
) -> None:
    platform_digest = signed["records"][AMD64]["digest"]  # a real image of the stack, never signed itself
    unsigned = _pull(
        signed, tmp_path / "a", "--digest", platform_digest, "--signature-key", str(signed["public"])
    )
    assert unsigned.returncode == exit_codes.FAILED and "it is not signed" in unsigned.stderr, unsigned.stderr
    other_key = _pull(
        signed, tmp_path / "b", "--digest", signed["digest"], "--signature-key", str(signed["other_public"])
    )
    assert (
        other_key.returncode == exit_codes.FAILED and "does not verify against this key" in other_key.stderr
    )
    # a valid signature whose payload names another image does not count for this one
    cosign_format.sign(
        signed["host"], signed["name"], platform_digest, signed["key"], claimed=signed["digest"]
    )
    misclaimed = _pull(
        signed, tmp_path / "c", "--digest", platform_digest, "--signature-key", str(signed["public"])
    )
    assert (
        misclaimed.returncode == exit_codes.FAILED
        and "a valid signature of another image" in misclaimed.stderr
    )
    assert not list(tmp_path.rglob("report.json")), "nothing was pulled or verified"


def test_no_policy_is_a_usage_error_and_no_check_is_recorded(signed: dict, tmp_path: Path) -> None:
    none = _pull(signed, tmp_path / "none", "--digest", signed["digest"])
    assert none.returncode == exit_codes.USAGE and "no signature policy for" in none.stderr
    assert "--no-signature-check (a private registry" in none.stderr
    off = _pull(signed, tmp_path / "off", "--digest", signed["digest"], "--no-signature-check")
    assert off.returncode == exit_codes.FAILED and "[UNSIGNED]" in off.stdout, off.stdout + off.stderr
    result = json.loads(next((tmp_path / "off").glob("cells/*/result.json")).read_text())
    assert result["build"]["signature"] == {
        "checked": False,
        "policy": "off",
        "reason": "--no-signature-check",
    }
    if shutil.which("cosign") is None:  # keyless needs cosign: its absence is the environment, exit 3
        keyless = _pull(
            signed, tmp_path / "keyless", "--digest", signed["digest"], "--signature-identity", "^https://x/"
        )
        assert keyless.returncode == exit_codes.ENVIRONMENT and "cosign CLI is not on PATH" in keyless.stderr
