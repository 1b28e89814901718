"""The registry calls through the real skopeo against the real local registry (Debian's docker-registry), with
no container engine: tiny single-platform images written here as OCI layouts and copied in by skopeo, then
the OCI index made from their digests (toolchain/image/oci_index.py) and the cosign key signature check
(toolchain/image/signature.py) against signatures tests/docker/cosign_format.py writes. It sits in the docker
tier because that tier installs skopeo and docker-registry (scripts/ensure-docker.sh, ENSURE_TEST_TOOLS)."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.docker import cosign_format
from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.image import oci_index, registry_api, signature
from verify.runtime import exit_codes

pytestmark = pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed")


def _blob(layout: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def push_image(where: Path, repository: str, arch: str) -> str:
    """A one-file image for linux/ARCH, written as an OCI layout and copied into the registry by skopeo;
    returns the digest the registry holds it under."""
    layout = where / f"image-{arch}"
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as archive:
        text = f"an image for {arch}\n".encode()
        member = tarfile.TarInfo("hello.txt")
        member.size = len(text)
        archive.addfile(member, io.BytesIO(text))
    diff_id = "sha256:" + hashlib.sha256(layer.getvalue()).hexdigest()
    config = {"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    manifest = {
        "schemaVersion": 2,
        "mediaType": registry_api.OCI_MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            **_blob(layout, json.dumps(config).encode()),
        },
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(layout, layer.getvalue())}
        ],
    }
    entry = {"mediaType": registry_api.OCI_MANIFEST, **_blob(layout, json.dumps(manifest).encode())}
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
    digest_file = where / f"digest-{arch}"
    done = subprocess.run(
        ["skopeo", "copy", "--quiet", "--dest-tls-verify=false", "--digestfile", str(digest_file),
         f"oci:{layout}", f"docker://{repository}:{arch}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return digest_file.read_text().strip()


@pytest.fixture(scope="module")
def images(registry: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    repository = f"{registry['host']}/tools"
    where = tmp_path_factory.mktemp("registry-tools")
    return {
        "repository": repository,
        **{arch: push_image(where, repository, arch) for arch in ("amd64", "arm64")},
    }


def _platforms(images: dict[str, str]) -> list[oci_index.PlatformImage]:
    return [
        oci_index.PlatformImage(f"cell-{arch}", f"linux/{arch}", images[arch]) for arch in ("amd64", "arm64")
    ]


def test_skopeo_puts_the_index_byte_for_byte_and_again_changes_nothing(images: dict[str, str]) -> None:
    made = oci_index.make_index(images["repository"], "stack", _platforms(images))
    assert made.platforms == {"linux/amd64": images["amd64"], "linux/arm64": images["arm64"]}
    registry = registry_api.Registry(images["repository"])
    stored = registry.get_manifest("stack")
    assert stored.digest == made.digest and stored.media_type == registry_api.OCI_INDEX
    assert [m["digest"] for m in stored.json()["manifests"]] == [images["amd64"], images["arm64"]]
    assert registry.get_manifest(made.digest).raw == stored.raw
    assert oci_index.make_index(images["repository"], "stack", _platforms(images)).digest == made.digest


def test_a_digest_of_the_wrong_platform_or_one_the_registry_lacks_is_refused(images: dict[str, str]) -> None:
    swapped = [oci_index.PlatformImage("cell-amd64", "linux/amd64", images["arm64"])]
    with pytest.raises(
        oci_index.IndexRefused, match="is an image for linux/arm64, not the cell's linux/amd64"
    ):
        oci_index.make_index(images["repository"], "wrong", swapped)
    missing = dict(images, arm64="sha256:" + "0" * 64)
    with pytest.raises(oci_index.IndexRefused, match="the registry holds no sha256:0000"):
        oci_index.make_index(images["repository"], "wrong", _platforms(missing))
    with pytest.raises(registry_api.NotFound):
        registry_api.Registry(images["repository"]).get_manifest("wrong")  # nothing was put


def test_the_key_check_reads_cosigns_format_through_skopeo(images: dict[str, str], tmp_path: Path) -> None:
    host, name = images["repository"].split("/", 1)
    key, public = cosign_format.key_pair(tmp_path)
    cosign_format.sign(host, name, images["amd64"], key)
    policy = signature.Policy("key", key=public)
    found = signature.check(images["repository"], images["amd64"], policy)
    assert found["checked"] and found["signed_digest"] == images["amd64"]
    with pytest.raises(signature.SignatureRefused, match="it is not signed"):
        signature.check(images["repository"], images["arm64"], policy)
    (tmp_path / "other").mkdir()
    _, other_public = cosign_format.key_pair(tmp_path / "other")
    with pytest.raises(signature.SignatureRefused, match="does not verify against this key"):
        signature.check(images["repository"], images["amd64"], signature.Policy("key", key=other_public))
    cosign_format.sign(host, name, images["arm64"], key, claimed=images["amd64"])
    with pytest.raises(signature.SignatureRefused, match="a valid signature of another image"):
        signature.check(images["repository"], images["arm64"], policy)


def test_an_unreachable_registry_a_bad_name_and_no_skopeo_each_say_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(EnvironmentUnavailable) as down:
        registry_api.Registry("127.0.0.1:9/apex").get_manifest("latest")
    assert down.value.exit_code == exit_codes.ENVIRONMENT and "check the address and network" in str(
        down.value
    )
    for name in ("Bad Repo", "127.0.0.1:9/a\x00b", "UPPER/case"):
        with pytest.raises(UsageError, match="not an image repository"):
            registry_api.Registry(name).get_manifest("latest")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EnvironmentUnavailable, match="no skopeo on PATH; install skopeo"):
        registry_api.Registry("127.0.0.1:9/apex").get_manifest("latest")


def test_an_answer_that_is_not_a_json_object_is_one_line_exit_3() -> None:
    for raw in (b"<html>a proxy's page</html>", b"[1, 2]", b"\xff\xfe"):
        with pytest.raises(registry_api.BadRegistryAnswer) as bad:
            registry_api.Manifest("", registry_api.digest_of(raw), raw).json()
        assert bad.value.exit_code == exit_codes.ENVIRONMENT and "\n" not in str(bad.value)
