"""Trust before pull (`build.py pull`), without an engine: a stand-in registry on 127.0.0.1 that answers the
OCI distribution calls the signature step makes, and a stand-in `cosign` on PATH that records its arguments.

The rules: a keyless signature is checked for the signer identity and issuer the user named (never any
signer), on the digest, never the tag; a tag is resolved to its digest first and that digest is what gets
pulled; a key signature counts only when it verifies against the key and names this very digest; what the
engine pulled must carry the digest whose signature was checked."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import shutil
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from toolchain.commands import images
from toolchain.console import Console
from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.image import publish, pull, signature
from toolchain.image.container_engine import ImageInfo
from verify.runtime import exit_codes

IDENTITY = "^https://github.com/acme/apex/.github/workflows/images.yml@"
TAG = "apex-6424da3-torch2.11.0-cu13.0-py3.12-ubuntu24.04"
IMAGE_MANIFEST = json.dumps(
    {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "layers": []}
).encode()
IMAGE_DIGEST = "sha256:" + hashlib.sha256(IMAGE_MANIFEST).hexdigest()


class StandInRegistry:
    """Manifests and blobs by reference on 127.0.0.1 (http, as Docker speaks to a loopback registry), asked
    through skopeo (toolchain/image/registry_api.py): its `/v2/` ping answers, and is not recorded."""

    def __init__(self) -> None:
        self.manifests: dict[str, tuple[bytes, str]] = {}  # reference -> (bytes, media type)
        self.blobs: dict[str, bytes] = {}
        self.asked: list[str] = []
        registry = self

        class DistributionApi(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
                self.do_GET()

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path == "/v2/":  # the client's version check before any call
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                registry.asked.append(self.path)
                _, _, rest = self.path.partition("/v2/acme/apex/")
                kind, _, reference = rest.partition("/")
                found = (
                    registry.manifests.get(reference)
                    if kind == "manifests"
                    else (registry.blobs.get(reference), "application/octet-stream")
                    if kind == "blobs"
                    else None
                )
                body, media = found or (None, "")
                if body is None:  # the distribution API's error body, as a real registry answers
                    error = b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}'
                    self.send_response(404)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    if self.command == "GET":
                        self.wfile.write(error)
                    return
                self.send_response(200)
                self.send_header("Content-Type", media)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), DistributionApi)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.repository = f"127.0.0.1:{self.server.server_address[1]}/acme/apex"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def registry() -> Iterator[StandInRegistry]:
    if shutil.which("skopeo") is None:  # a fresh machine's unit tier: the docker tier installs it
        pytest.fail("skopeo is not installed: these tests belong to the docker tier, which installs it")
    served = StandInRegistry()
    served.manifests[TAG] = (IMAGE_MANIFEST, "application/vnd.oci.image.manifest.v1+json")
    served.manifests[IMAGE_DIGEST] = served.manifests[TAG]
    yield served
    served.close()


@pytest.fixture
def cosign(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `cosign` first on PATH: appends its argv (one JSON line) to calls.jsonl; exits COSIGN_STANDIN_EXIT."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.jsonl"
    script = bin_dir / "cosign"
    script.write_text(
        "#!/bin/sh\n"
        f"python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\" >> {calls}\n"
        'if [ "${COSIGN_STANDIN_EXIT:-0}" != 0 ]; then echo "Error: no matching signatures:" >&2; '
        'echo "none of the expected identities matched what was in the certificate" >&2; '
        'echo "main.go:74: error during command execution: no matching signatures" >&2; fi\n'
        'exit "${COSIGN_STANDIN_EXIT:-0}"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def _calls(calls: Path) -> list[list[str]]:
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def _keyless(repository: str, issuer: str | None = None) -> signature.Policy:
    return signature.Policy.from_options(
        identity=IDENTITY, issuer=issuer, key=None, off=False, repository=repository
    )


def test_keyless_asks_cosign_for_the_named_signer_and_issuer_on_the_digest(cosign: Path) -> None:
    repository = "ghcr.io/acme/apex"
    found = signature.check(repository, IMAGE_DIGEST, _keyless(repository))
    (argv,) = _calls(cosign)
    assert argv == [
        "verify",
        f"{repository}@{IMAGE_DIGEST}",
        "--certificate-identity-regexp",
        IDENTITY,
        "--certificate-oidc-issuer",
        signature.GITHUB_ISSUER,
        "--output",
        "json",
    ]
    assert found == {
        "checked": True,
        "policy": "keyless",
        "identity": IDENTITY,
        "issuer": signature.GITHUB_ISSUER,
        "signed_digest": IMAGE_DIGEST,
        "by": "cosign verify",
    }
    signature.check(repository, IMAGE_DIGEST, _keyless(repository, "https://issuer.example"))
    assert _calls(cosign)[1][5] == "https://issuer.example"


def test_a_signature_by_another_signer_is_refused_exit_1(
    cosign: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COSIGN_STANDIN_EXIT", "1")
    with pytest.raises(signature.SignatureRefused) as caught:
        signature.check("ghcr.io/acme/apex", IMAGE_DIGEST, _keyless("ghcr.io/acme/apex"))
    assert caught.value.exit_code == exit_codes.FAILED
    message = str(caught.value)
    assert message.startswith(
        f"refusing ghcr.io/acme/apex@{IMAGE_DIGEST}: cosign found no signature by {IDENTITY}"
    )
    assert (
        message.endswith(
            ": main.go:74: error during command execution: no matching signatures; pull an image "
            "the workflow signed, or check --signature-identity"
        )
        and "\n" not in message
    )  # cosign's last line


def test_without_cosign_keyless_is_environment_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    with pytest.raises(EnvironmentUnavailable, match="cosign CLI is not on PATH") as caught:
        signature.check("ghcr.io/acme/apex", IMAGE_DIGEST, _keyless("ghcr.io/acme/apex"))
    assert caught.value.exit_code == exit_codes.ENVIRONMENT


@pytest.mark.docker  # skopeo makes the registry calls: the docker tier installs it
def test_a_tag_is_pinned_to_its_digest_and_that_digest_is_what_was_checked_and_gets_pulled(
    registry: StandInRegistry, cosign: Path
) -> None:
    out = io.StringIO()
    ref, digest, found = images._signature_first(
        f"{registry.repository}:{TAG}", None, _keyless(registry.repository), Console(out)
    )
    assert (ref, digest) == (f"{registry.repository}@{IMAGE_DIGEST}", IMAGE_DIGEST)
    assert found["signed_digest"] == IMAGE_DIGEST
    (argv,) = _calls(cosign)
    assert argv[1] == ref  # cosign checked the digest that will be pulled, not the tag
    assert registry.asked == [f"/v2/acme/apex/manifests/{TAG}"]
    assert "SIGNED" in out.getvalue() and IDENTITY in out.getvalue()


@pytest.mark.docker  # skopeo makes the registry calls: the docker tier installs it
def test_a_ref_by_digest_is_checked_as_it_is_and_an_unknown_tag_is_bad_input(
    registry: StandInRegistry, cosign: Path
) -> None:
    given = f"{registry.repository}@{IMAGE_DIGEST}"
    ref, digest, _ = images._signature_first(
        given, IMAGE_DIGEST, _keyless(registry.repository), Console(io.StringIO())
    )
    assert (ref, digest) == (given, IMAGE_DIGEST) and registry.asked == []
    with pytest.raises(UsageError, match="the registry has no such tag"):
        images._signature_first(
            f"{registry.repository}:nope", None, _keyless(registry.repository), Console(io.StringIO())
        )


@pytest.mark.docker  # skopeo makes the registry calls: the docker tier installs it
def test_no_signature_check_is_said_and_recorded_as_not_checked(
    registry: StandInRegistry, cosign: Path
) -> None:
    out = io.StringIO()
    off = signature.Policy.from_options(identity=None, issuer=None, key=None, off=True, repository="x")
    ref, _, found = images._signature_first(f"{registry.repository}:{TAG}", None, off, Console(out))
    assert found == {"checked": False, "policy": "off", "reason": "--no-signature-check"}
    assert "UNSIGNED" in out.getvalue() and _calls(cosign) == []


# --- the key policy, against the same stand-in registry ------------------------------------------------------


def _signed(
    registry: StandInRegistry, key: ec.EllipticCurvePrivateKey, names: str, *, kind: str | None = None
):
    """cosign's signature artifact for IMAGE_DIGEST (tag sha256-<hex>.sig): one layer whose payload names `names`."""
    payload = json.dumps(
        {
            "critical": {
                "type": kind or signature.PAYLOAD_TYPE,
                "image": {"docker-manifest-digest": names},
                "identity": {"docker-reference": registry.repository},
            }
        }
    ).encode()
    blob = "sha256:" + hashlib.sha256(payload).hexdigest()
    registry.blobs[blob] = payload
    sig = base64.b64encode(key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
    artifact = {"layers": [{"digest": blob, "annotations": {signature.SIGNATURE_ANNOTATION: sig}}]}
    tag = IMAGE_DIGEST.replace(":", "-") + ".sig"
    registry.manifests[tag] = (json.dumps(artifact).encode(), "application/vnd.oci.image.manifest.v1+json")


def _public(tmp_path: Path, key: ec.EllipticCurvePrivateKey, name: str = "cosign.pub") -> Path:
    path = tmp_path / name
    path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


def _with_key(registry: StandInRegistry, public: Path) -> dict:
    policy = signature.Policy.from_options(
        identity=None, issuer=None, key=public, off=False, repository=registry.repository
    )
    return signature.check(registry.repository, IMAGE_DIGEST, policy)


@pytest.mark.docker  # skopeo makes the registry calls: the docker tier installs it
def test_a_key_signature_of_this_digest_passes(registry: StandInRegistry, tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    _signed(registry, key, IMAGE_DIGEST)
    public = _public(tmp_path, key)
    found = _with_key(registry, public)
    assert found["checked"] is True and found["signed_digest"] == IMAGE_DIGEST
    assert found["key_sha256"] == hashlib.sha256(public.read_bytes()).hexdigest()
    assert found["docker_reference"] == registry.repository


@pytest.mark.docker  # skopeo makes the registry calls: the docker tier installs it
def test_a_valid_signature_of_another_digest_or_by_another_key_is_refused(
    registry: StandInRegistry, tmp_path: Path
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    _signed(registry, key, "sha256:" + "b" * 64)  # the key's own signature, of another image
    with pytest.raises(signature.SignatureRefused, match="a valid signature of another image") as caught:
        _with_key(registry, _public(tmp_path, key))
    assert caught.value.exit_code == exit_codes.FAILED
    _signed(registry, key, IMAGE_DIGEST, kind="something else")
    with pytest.raises(signature.SignatureRefused, match="a valid signature of another image"):
        _with_key(registry, _public(tmp_path, key))
    _signed(registry, key, IMAGE_DIGEST)
    stranger = _public(tmp_path, ec.generate_private_key(ec.SECP256R1()), "other.pub")
    with pytest.raises(signature.SignatureRefused, match="does not verify against this key"):
        _with_key(registry, stranger)


@pytest.mark.docker  # skopeo makes the registry calls: the docker tier installs it
def test_an_unsigned_digest_is_refused(registry: StandInRegistry, tmp_path: Path) -> None:
    public = _public(tmp_path, ec.generate_private_key(ec.SECP256R1()))
    with pytest.raises(signature.SignatureRefused, match="it is not signed") as caught:
        _with_key(registry, public)
    assert caught.value.exit_code == exit_codes.FAILED
    tag = IMAGE_DIGEST.replace(":", "-") + ".sig"
    registry.manifests[tag] = (
        b'{"layers": [{"digest": "sha256:00"}]}',
        "application/vnd.oci.image.manifest.v1+json",
    )
    # an artifact naming a blob the registry does not hold: skopeo cannot copy it whole, so it is not signed
    with pytest.raises(signature.SignatureRefused, match="not signed"):
        _with_key(registry, public)


# --- what the engine pulled (its answer as recorded) ---------------------------------------------------------


def _pulled(repo_digests: tuple[str, ...], image_id: str = "sha256:" + "c" * 64) -> ImageInfo:
    return ImageInfo(ref="", id=image_id, repo_digests=repo_digests, labels={})


def test_the_pulled_image_must_carry_the_checked_digest_and_the_published_id() -> None:
    ref = f"ghcr.io/acme/apex@{IMAGE_DIGEST}"
    pull.check_pulled(ref, _pulled((ref,)), None)
    pull.check_pulled(ref, _pulled(("ghcr.io/acme/apex@sha256:" + "d" * 64, ref)), "sha256:" + "c" * 64)
    with pytest.raises(publish.DigestRefused, match="does not carry this digest") as caught:
        pull.check_pulled(ref, _pulled(("ghcr.io/acme/apex@sha256:" + "d" * 64,)), None)
    assert caught.value.exit_code == exit_codes.FAILED
    with pytest.raises(publish.DigestRefused, match="does not carry this digest"):
        pull.check_pulled(
            ref, _pulled((f"ghcr.io/other/apex@{IMAGE_DIGEST}",)), None
        )  # same digest, other repo
    with pytest.raises(publish.DigestRefused, match="is not the published sha256:eee"):
        pull.check_pulled(ref, _pulled((ref,)), "sha256:" + "e" * 64)
    pull.check_pulled(
        f"ghcr.io/acme/apex:{TAG}", _pulled(()), None
    )  # --no-signature-check by tag: not pinned


def test_resolve_takes_the_published_digest_and_refuses_another_registry(tmp_path: Path) -> None:
    cell = TAG
    record = publish.record_path(tmp_path, cell)
    record.parent.mkdir(parents=True)
    record.write_text(
        json.dumps({"repository": "ghcr.io/acme/apex", "digest": IMAGE_DIGEST, "image_id": "x"})
    )
    ref, digest, found = pull.resolve(cell, None, digest=None, by_digest=True, out=tmp_path)
    assert (ref, digest) == (f"ghcr.io/acme/apex@{IMAGE_DIGEST}", IMAGE_DIGEST) and found
    with pytest.raises(UsageError, match="records a push to ghcr.io/acme/apex, not --registry"):
        pull.resolve(cell, "ghcr.io/mallory/apex", digest=None, by_digest=False, out=tmp_path)
    given = "sha256:" + "f" * 64
    ref, digest, _ = pull.resolve(cell, "ghcr.io/acme/apex/", digest=given, by_digest=True, out=tmp_path)
    assert ref == f"ghcr.io/acme/apex@{given}"
    with pytest.raises(UsageError, match="--by-digest: no digest"):
        pull.resolve("other-cell", "ghcr.io/acme/apex", digest=None, by_digest=True, out=tmp_path)
    assert pull.resolve("other-cell", "ghcr.io/acme/apex", digest=None, by_digest=False, out=tmp_path)[
        :2
    ] == (
        "ghcr.io/acme/apex:other-cell",
        None,
    )
    with pytest.raises(UsageError, match="not a sha256 image digest"):
        pull.resolve(cell, None, digest="sha256:short", by_digest=False, out=tmp_path)
    with pytest.raises(UsageError, match="pull: no registry"):
        pull.resolve("other-cell", None, digest=None, by_digest=False, out=tmp_path)


def test_cosign_that_hangs_is_environment_unavailable_and_a_silent_refusal_names_its_exit(
    cosign: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(signature, "COSIGN_TIMEOUT_S", 0.5)
    script = cosign.parent / "bin" / "cosign"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    with pytest.raises(EnvironmentUnavailable, match="took over 0.5 s") as caught:
        signature.check("ghcr.io/acme/apex", IMAGE_DIGEST, _keyless("ghcr.io/acme/apex"))
    assert caught.value.exit_code == exit_codes.ENVIRONMENT
    script.write_text("#!/bin/sh\nexit 7\n")
    with pytest.raises(
        signature.SignatureRefused, match=r"\(issuer https://token.actions.githubusercontent.com\): exit 7;"
    ):
        signature.check("ghcr.io/acme/apex", IMAGE_DIGEST, _keyless("ghcr.io/acme/apex"))


@pytest.mark.docker  # skopeo makes the registry calls: the docker tier installs it
def test_a_payload_that_is_not_json_or_names_no_digest_is_another_images(
    registry: StandInRegistry, tmp_path: Path
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    for payload in (
        b"not json",
        b"[1, 2]",
        json.dumps({"critical": {"type": signature.PAYLOAD_TYPE}}).encode(),
    ):
        blob = "sha256:" + hashlib.sha256(payload).hexdigest()
        registry.blobs[blob] = payload
        sig = base64.b64encode(key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
        artifact = {"layers": [{"digest": blob, "annotations": {signature.SIGNATURE_ANNOTATION: sig}}]}
        registry.manifests[IMAGE_DIGEST.replace(":", "-") + ".sig"] = (
            json.dumps(artifact).encode(),
            "application/vnd.oci.image.manifest.v1+json",
        )
        with pytest.raises(
            signature.SignatureRefused, match=r"a valid signature of another image \(no digest claim\)"
        ):
            _with_key(registry, _public(tmp_path, key))


def test_pulled_ids_and_recorded_repositories_compare_by_value_however_they_sort(tmp_path: Path) -> None:
    hexes = 64
    built_id = "sha256:" + "c" * hexes  # made at run time: equal values, distinct objects
    ref = f"ghcr.io/acme/apex@{IMAGE_DIGEST}"
    pull.check_pulled(ref, _pulled((ref,), image_id=built_id), "".join(["sha256:", "c" * hexes]))
    for other in ("sha256:" + "a" * hexes, "sha256:" + "e" * hexes):  # sorts before and after
        with pytest.raises(publish.DigestRefused, match="is not the published"):
            pull.check_pulled(ref, _pulled((ref,), image_id=built_id), other)
    with pytest.raises(publish.DigestRefused, match=r"\(repo digests: none\)"):
        pull.check_pulled(ref, _pulled(()), None)
    record = publish.record_path(tmp_path, TAG)
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"repository": "ghcr.io/acme/apex", "digest": IMAGE_DIGEST}))
    same = "".join(["ghcr.io/acme/apex", "/"])
    assert pull.resolve(TAG, same, digest=None, by_digest=False, out=tmp_path)[1] == IMAGE_DIGEST
    for other in ("ghcr.io/aaa/apex", "ghcr.io/zzz/apex"):
        with pytest.raises(UsageError, match="records a push to"):
            pull.resolve(TAG, other, digest=None, by_digest=False, out=tmp_path)


def _layer(registry: StandInRegistry, key: ec.EllipticCurvePrivateKey, names: str) -> dict:
    payload = json.dumps(
        {"critical": {"type": signature.PAYLOAD_TYPE, "image": {"docker-manifest-digest": names}}}
    ).encode()
    blob = "sha256:" + hashlib.sha256(payload).hexdigest()
    registry.blobs[blob] = payload
    sig = base64.b64encode(key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
    return {"digest": blob, "annotations": {signature.SIGNATURE_ANNOTATION: sig}}


@pytest.mark.docker  # skopeo makes the registry calls: the docker tier installs it
def test_every_signature_layer_is_tried_until_one_holds(registry: StandInRegistry, tmp_path: Path) -> None:
    key, stranger = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    tag = IMAGE_DIGEST.replace(":", "-") + ".sig"
    for before in (
        _layer(registry, stranger, IMAGE_DIGEST),  # does not verify against the key
        _layer(registry, key, "sha256:" + "0" * 64),  # the key's, of another image (sorts before)
        _layer(registry, key, "sha256:" + "f" * 64),  # the key's, of another image (sorts after)
        {"digest": "sha256:" + hashlib.sha256(b"").hexdigest()},  # no signature annotation
    ):
        registry.blobs["sha256:" + hashlib.sha256(b"").hexdigest()] = b""  # a registry holds every layer
        layers = [before, _layer(registry, key, IMAGE_DIGEST)]
        registry.manifests[tag] = (
            json.dumps({"layers": layers}).encode(),
            "application/vnd.oci.image.manifest.v1+json",
        )
        assert _with_key(registry, _public(tmp_path, key))["signed_digest"] == IMAGE_DIGEST
        registry.manifests[tag] = (
            json.dumps({"layers": [before]}).encode(),
            "application/vnd.oci.image.manifest.v1+json",
        )
        with pytest.raises(signature.SignatureRefused):
            _with_key(registry, _public(tmp_path, key))


def test_a_policy_once_decided_does_not_change() -> None:
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        _keyless("ghcr.io/acme/apex").identity = ".*"  # type: ignore[misc]


def test_a_cosign_killed_by_a_signal_has_not_verified_anything(cosign: Path) -> None:
    script = cosign.parent / "bin" / "cosign"
    script.write_text("#!/bin/sh\nkill -9 $$\n")  # exit status -9: not 0, and not above 0 either
    with pytest.raises(signature.SignatureRefused, match="exit -9"):
        signature.check("ghcr.io/acme/apex", IMAGE_DIGEST, _keyless("ghcr.io/acme/apex"))


@pytest.mark.docker  # skopeo makes the registry calls: the docker tier installs it
def test_a_payload_of_another_type_is_refused_whichever_way_it_sorts(
    registry: StandInRegistry, tmp_path: Path
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    for kind in ("a container image attestation", "zz signature"):
        _signed(registry, key, IMAGE_DIGEST, kind=kind)
        with pytest.raises(signature.SignatureRefused, match="a valid signature of another image"):
            _with_key(registry, _public(tmp_path, key))
