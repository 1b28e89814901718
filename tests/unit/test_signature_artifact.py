"""The key policy's artifact check (toolchain/image/signature.py) in the unit tier: which layer of cosign's
signature artifact counts, the payload's claims, and the caps on what a registry may answer.

The registry side is a stand-in `skopeo` first on PATH (as test_rules_trust.py's stand-in `cosign`): asked
`skopeo copy ... docker://REPO:TAG dir:FOLDER`, it copies the files a test laid out under `store/TAG/`
(skopeo's `dir:` layout: manifest.json and each blob under its sha256) and records its arguments; a tag with
no folder is skopeo's "manifest unknown". Everything after that is the real code: registry_api's blob digest
check, the shape checks, the ECDSA verification and the claims. The same rules against a real registry
through the real skopeo: test_rules_trust.py's docker-tier tests."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from toolchain.errors import UsageError
from toolchain.image import signature
from verify.runtime import exit_codes

REPOSITORY = "ghcr.io/acme/apex"
DIGEST = "sha256:" + hashlib.sha256(b"the image manifest").hexdigest()
TAG = DIGEST.replace(":", "-") + ".sig"
KEY = ec.generate_private_key(ec.SECP256R1())  # one key for the module: generating one per case costs time
STRANGER = ec.generate_private_key(ec.SECP256R1())
ANNOTATION_CAP = 1 << 16  # characters per annotation value
LAYER_CAP = 1000  # layers per artifact
KEY_FILE_CAP = 64 << 10  # bytes of --signature-key


class Store:
    """What the stand-in skopeo serves: store/TAG/manifest.json and store/TAG/<hex> per blob."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls = root.parent / "skopeo-argv.txt"

    def put(self, layers: list[dict], blobs: list[bytes], *, manifest: bytes | None = None) -> None:
        folder = self.root / TAG
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        raw = json.dumps({"schemaVersion": 2, "layers": layers}).encode() if manifest is None else manifest
        (folder / "manifest.json").write_bytes(raw)
        for blob in blobs:
            (folder / hashlib.sha256(blob).hexdigest()).write_bytes(blob)

    def argv(self) -> list[str]:
        """The last call's arguments (one a line: none of them holds a newline)."""
        return self.calls.read_text().splitlines()


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    served = Store(tmp_path / "store")
    served.root.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "skopeo"
    script.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$@\" > '{served.calls}'\n"
        'for arg; do case "$arg" in docker://*) ref="${arg#docker://}";; dir:*) dest="${arg#dir:}";; esac; done\n'
        'tag="${ref##*:}"\n'
        f"src='{served.root}'/\"$tag\"\n"
        'if [ ! -d "$src" ]; then\n'
        '  echo \'time="2026-12-03T00:00:00Z" level=fatal msg="reading manifest in x: manifest unknown"\' >&2\n'
        "  exit 1\n"
        "fi\n"
        'exec cp -R "$src" "$dest"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return served


def _payload(
    names: str | None = DIGEST, kind: object = signature.PAYLOAD_TYPE, identity: object = "absent"
) -> bytes:
    image = {} if names is None else {"docker-manifest-digest": names}
    critical: dict = {"type": kind, "image": image}
    if identity != "absent":
        critical["identity"] = identity
    return json.dumps({"critical": critical}).encode()


def _layer(payload: bytes, key: ec.EllipticCurvePrivateKey = KEY, **annotations: str) -> dict:
    sig = base64.b64encode(key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
    return {
        "digest": "sha256:" + hashlib.sha256(payload).hexdigest(),
        "annotations": {signature.SIGNATURE_ANNOTATION: sig, **annotations},
    }


def _public(tmp_path: Path, key: ec.EllipticCurvePrivateKey = KEY, *, size: int | None = None) -> Path:
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    path = tmp_path / "cosign.pub"
    path.write_bytes(pem if size is None else pem + b"\n" * (size - len(pem)))  # PEM readers skip blank lines
    return path


def _check(public: Path) -> dict:
    policy = signature.Policy.from_options(
        identity=None, issuer=None, key=public, off=False, repository=REPOSITORY
    )
    return signature.check(REPOSITORY, DIGEST, policy)


def _refused(public: Path) -> str:
    with pytest.raises(signature.SignatureRefused) as caught:
        _check(public)
    assert caught.value.exit_code == exit_codes.FAILED
    return str(caught.value)


def test_a_key_signature_of_this_digest_passes_and_says_what_it_checked(store: Store, tmp_path: Path) -> None:
    payload = _payload(identity={"docker-reference": REPOSITORY})
    store.put([_layer(payload)], [payload])
    public = _public(tmp_path)
    assert _check(public) == {
        "checked": True,
        "policy": "key",
        "key": str(public),
        "key_sha256": hashlib.sha256(public.read_bytes()).hexdigest(),
        "signed_digest": DIGEST,
        "docker_reference": REPOSITORY,
        "by": "build.py (cosign's key signature format)",
    }
    called = store.argv()
    assert called[:3] == ["copy", "--quiet", f"docker://{REPOSITORY}:{TAG}"] and called[3].startswith("dir:")


@pytest.mark.parametrize(
    "identity",
    ["absent", None, {}, {"docker-reference": None}],
    ids=["no-identity", "null", "empty", "null-ref"],
)
def test_the_docker_reference_claim_is_optional(store: Store, tmp_path: Path, identity: object) -> None:
    payload = _payload(identity=identity)
    store.put([_layer(payload)], [payload])
    assert _check(_public(tmp_path))["docker_reference"] is None


# Each: the layers before the one valid signature of this digest by this key. The valid layer after them must
# still be found (a layer that does not count never ends the search), and on their own they are refused
# with the reason named.
OTHER = "sha256:" + "0" * 64  # sorts before DIGEST
LATER = "sha256:" + "f" * 64  # sorts after DIGEST
NOT_HELD = "sha256:" + hashlib.sha256(b"a blob the artifact does not hold").hexdigest()
_BAD_LAYERS: dict[str, tuple[Callable[[], tuple[list[dict], list[bytes]]], str]] = {
    "no-annotations": (lambda: ([{"digest": NOT_HELD}], []), "no signature layers"),
    "other-annotation-only": (
        lambda: ([{"digest": NOT_HELD, "annotations": {"x": "y"}}], []),
        "no signature layers",
    ),
    "empty-signature": (
        lambda: ([{"digest": NOT_HELD, "annotations": {signature.SIGNATURE_ANNOTATION: ""}}], []),
        "no signature layers",
    ),
    "blob-not-held": (
        lambda: ([{**_layer(_payload()), "digest": NOT_HELD}], []),
        "a signature layer the artifact does not hold",
    ),
    "stranger-key": (
        lambda: ([_layer(_payload(), STRANGER)], [_payload()]),
        "a signature that does not verify against this key",
    ),
    "not-base64": (
        lambda: (
            [{**_layer(_payload()), "annotations": {signature.SIGNATURE_ANNOTATION: "not*base64"}}],
            [_payload()],
        ),
        "a signature that does not verify against this key",
    ),
    "other-digest-before": (
        lambda: ([_layer(_payload(OTHER))], [_payload(OTHER)]),
        f"a valid signature of another image ({OTHER})",
    ),
    "other-digest-after": (
        lambda: ([_layer(_payload(LATER))], [_payload(LATER)]),
        f"a valid signature of another image ({LATER})",
    ),
    "no-digest-claim": (
        lambda: ([_layer(_payload(None))], [_payload(None)]),
        "a valid signature of another image (no digest claim)",
    ),
    "type-before": (
        lambda: (
            [_layer(_payload(kind="a container image attestation"))],
            [_payload(kind="a container image attestation")],
        ),
        f"a valid signature of another image ({DIGEST})",
    ),
    "type-after": (
        lambda: ([_layer(_payload(kind="zz signature"))], [_payload(kind="zz signature")]),
        f"a valid signature of another image ({DIGEST})",
    ),
    "type-not-a-string": (
        lambda: ([_layer(_payload(kind=["x"]))], [_payload(kind=["x"])]),
        "a valid signature of another image (no digest claim)",
    ),
    "payload-not-json": (lambda: ([_layer(b"not json")], [b"not json"]), "(no digest claim)"),
}


@pytest.mark.parametrize("case", list(_BAD_LAYERS))
def test_a_layer_that_does_not_count_is_passed_over_and_alone_is_refused(
    store: Store, tmp_path: Path, case: str
) -> None:
    make, reason = _BAD_LAYERS[case]
    layers, blobs = make()
    public = _public(tmp_path)
    store.put(layers, blobs)
    message = _refused(public)
    assert reason in message and message.startswith(f"refusing {REPOSITORY}@{DIGEST}: ")
    good = _payload()
    store.put([*layers, _layer(good)], [*blobs, good])
    assert _check(public)["signed_digest"] == DIGEST


def test_every_reason_is_named_once_and_sorted(store: Store, tmp_path: Path) -> None:
    stranger, other = _payload(), _payload(OTHER)
    store.put(
        [_layer(other), _layer(stranger, STRANGER), _layer(other), {"digest": NOT_HELD}], [other, stranger]
    )
    assert _refused(_public(tmp_path)).endswith(
        f"{REPOSITORY}:{TAG} holds a signature that does not verify against this key; a valid signature of "
        f"another image ({OTHER}); re-sign the image with the key whose public half --signature-key names"
    )


def test_no_artifact_is_not_signed_and_an_artifact_that_is_not_json_is_not_signed(
    store: Store, tmp_path: Path
) -> None:
    public = _public(tmp_path)
    assert f"it is not signed (no {REPOSITORY}:{TAG})" in _refused(public)
    store.put([], [], manifest=b"[not json")
    assert f"not signed ({REPOSITORY}:{TAG}: " in _refused(public)


def _annotated(chars: int) -> tuple[list[dict], list[bytes]]:
    payload = _payload()
    return [_layer(payload, note="a" * chars)], [payload]


def _many(count: int) -> tuple[list[dict], list[bytes]]:
    payload = _payload()
    filler = [{"digest": OTHER} for _ in range(count - 1)]
    return [*filler, _layer(payload)], [payload]


def _layer_digest(digest: str) -> tuple[list[dict], list[bytes]]:
    payload = _payload()
    return [{**_layer(payload), "digest": digest}], [payload]


@pytest.mark.parametrize(
    ("artifact", "refusal"),
    [
        (lambda: _annotated(ANNOTATION_CAP), None),
        (lambda: _annotated(ANNOTATION_CAP + 1), "is not a cosign signature artifact"),
        (lambda: _many(LAYER_CAP), None),
        (lambda: _many(LAYER_CAP + 1), "is not a cosign signature artifact"),
        (lambda: ([], []), "holds no signature layers"),
        (lambda: ([{"digest": NOT_HELD, "annotations": None}], []), "is not a cosign signature artifact"),
        (lambda: _layer_digest("sha256:" + "A" * 64), "is not a cosign signature artifact"),
        (lambda: _layer_digest("sha512:" + "a" * 64), "is not a cosign signature artifact"),
    ],
    ids=[
        "annotation-at-cap",
        "annotation-over",
        "layers-at-cap",
        "layers-over",
        "no-layers",
        "null-annotations",
        "upper-hex",
        "sha512",
    ],
)
def test_the_artifact_caps_and_shape(
    store: Store, tmp_path: Path, artifact: Callable, refusal: str | None
) -> None:
    layers, blobs = artifact()
    store.put(layers, blobs)
    public = _public(tmp_path)
    if refusal is None:
        assert _check(public)["signed_digest"] == DIGEST
    else:
        assert refusal in _refused(public)


def test_a_key_file_up_to_64_kib_is_read_and_a_larger_one_is_bad_input(store: Store, tmp_path: Path) -> None:
    payload = _payload()
    store.put([_layer(payload)], [payload])
    assert _check(_public(tmp_path, size=KEY_FILE_CAP))["signed_digest"] == DIGEST
    with pytest.raises(UsageError, match="is larger than") as caught:
        _check(_public(tmp_path, size=KEY_FILE_CAP + 1))
    assert caught.value.exit_code == exit_codes.USAGE
