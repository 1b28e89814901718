"""A signer for the docker tier, writing what `cosign sign --key` writes (no cosign binary installs from the
package indexes here, and Debian's skopeo 1.9.3 refuses `--sign-by-sigstore-private-key`: "Debian-local
change: sigstore disabled"). Kept apart from toolchain/image/signature.py on purpose: it speaks the registry
API with urllib and builds the artifact from cosign's published layout, so the pull-side check is tested
against a signature it did not make itself.

The layout: a simple-signing payload (JSON naming the image digest) as the one layer of an OCI manifest tagged
`sha256-<hex>.sig` in the image's repository, its ECDSA P-256 / SHA-256 signature in the layer's
`dev.cosignproject.cosign/signature` annotation (base64)."""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.request
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"


def key_pair(where: Path) -> tuple[ec.EllipticCurvePrivateKey, Path]:
    """A fresh P-256 key and its public half written as cosign.pub (PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = where / "cosign.pub"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return key, public


def payload(repository: str, digest: str) -> bytes:
    claims = {
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": None,
    }
    return json.dumps(claims, separators=(",", ":")).encode()


def sign(
    host: str, name: str, digest: str, key: ec.EllipticCurvePrivateKey, *, claimed: str | None = None
) -> str:
    """Push the signature artifact of DIGEST to http://HOST's repository NAME; `claimed` puts another digest
    in the payload (a valid signature of the wrong image). Returns the artifact's tag."""
    body = payload(f"{host}/{name}", claimed or digest)
    signature = base64.b64encode(key.sign(body, ec.ECDSA(hashes.SHA256()))).decode()
    config = json.dumps(
        {"architecture": "", "os": "", "config": {}, "rootfs": {"type": "layers", "diff_ids": []}}
    ).encode()
    manifest: dict[str, object] = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config),
                   "digest": _push_blob(host, name, config)},
        "layers": [{"mediaType": SIMPLE_SIGNING, "size": len(body), "digest": _push_blob(host, name, body),
                    "annotations": {"dev.cosignproject.cosign/signature": signature}}],
    }  # fmt: skip
    tag = digest.replace(":", "-") + ".sig"
    request = urllib.request.Request(
        f"http://{host}/v2/{name}/manifests/{tag}",
        data=json.dumps(manifest).encode(),
        method="PUT",
        headers={"Content-Type": str(manifest["mediaType"])},
    )
    urllib.request.urlopen(request, timeout=30).close()
    return tag


def _push_blob(host: str, name: str, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = urllib.request.Request(f"http://{host}/v2/{name}/blobs/uploads/", data=b"", method="POST")
    with urllib.request.urlopen(start, timeout=30) as answer:
        location = answer.headers["Location"]
    if location.startswith("/"):
        location = f"http://{host}{location}"
    put = urllib.request.Request(
        f"{location}{'&' if '?' in location else '?'}digest={digest}",
        data=data,
        method="PUT",
        headers={"Content-Type": "application/octet-stream"},
    )
    urllib.request.urlopen(put, timeout=30).close()
    return digest
