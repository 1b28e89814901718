"""The signature check `build.py pull` makes before it pulls: is the digest it is about to pull signed?

Three policies, one of which a pull from a registry must name (else exit 2, naming all three):
  keyless  --signature-identity REGEX [--signature-issuer URL]: signed by a CI identity through Sigstore
           (images.yml signs each index with cosign keyless: the certificate names the workflow). Checked
           by the `cosign` CLI (Fulcio certificate, Rekor entry); no cosign on the node is exit 3.
  key      --signature-key cosign.pub: signed with a key pair (`cosign sign --key`). Checked here (cosign is
           not packaged where this runs; Debian's skopeo has sigstore disabled): cosign's signature artifact
           for the digest (tag `sha256-<hex>.sig` in the same repository, fetched by skopeo) holds a
           simple-signing payload per layer, signed (ECDSA P-256, SHA-256) in the layer's
           `dev.cosignproject.cosign/signature` annotation; a signature counts only if it verifies against
           the key and its payload names this very digest.
  off      --no-signature-check: a private registry whose images nobody signs. Recorded as not checked.
A missing or bad signature is exit 1 (refused: nothing is pulled); a registry or cosign that cannot be
reached is exit 3.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from toolchain.errors import EnvironmentUnavailable, ToolchainError, UsageError
from toolchain.image import registry_api
from verify.runtime import exit_codes, input_files
from verify.runtime import field_types as ft

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
PAYLOAD_TYPE = "cosign container image signature"
COSIGN_TIMEOUT_S = 120
_KEY = input_files.InputKind(
    "signature public key",
    64 << 10,
    "cosign.pub is under 200 bytes",
    "pass cosign.pub (cosign generate-key-pair)",
)
HOW = (
    "pass --signature-identity REGEX (images signed keyless by a CI workflow, e.g. "
    "'^https://github.com/OWNER/REPO/.github/workflows/images.yml@'), --signature-key cosign.pub (signed with a "
    "key pair), or --no-signature-check (a private registry whose images are not signed)"
)


# cosign's signature artifact and simple-signing payload, as far as the check reads them: a registry answer
# of another shape is "not signed" (exit 1), never a traceback
_DIGEST = ft.Str(pattern="sha256:[0-9a-f]{64}", means="a sha256 digest")
_ARTIFACT = ft.Record(
    {
        "layers": ft.ListOf(
            ft.Record(
                {"digest": _DIGEST, "annotations": ft.MapOf(ft.Str(max_len=1 << 16))}, required=("digest",)
            ),
            max_items=1000,
        )
    },
    required=("layers",),
)
_PAYLOAD = ft.Record(
    {
        "critical": ft.Record(
            {
                "type": ft.STR,
                "image": ft.Record({"docker-manifest-digest": ft.STR}, required=("docker-manifest-digest",)),
                "identity": ft.Nullable(ft.Record({"docker-reference": ft.Nullable(ft.STR)})),
            },
            required=("type", "image"),
        )
    },
    required=("critical",),
)


class SignatureRefused(ToolchainError):
    """The digest is not signed as the policy requires: exit 1, nothing pulled."""

    exit_code = exit_codes.FAILED


@dataclasses.dataclass(frozen=True)
class Policy:
    kind: str  # "keyless" | "key" | "off"
    identity: str | None = None
    issuer: str = GITHUB_ISSUER
    key: Path | None = None

    @classmethod
    def from_options(
        cls, *, identity: str | None, issuer: str | None, key: Path | None, off: bool, repository: str
    ) -> Policy:
        given = [
            name
            for name, value in (
                ("--signature-identity", identity),
                ("--signature-key", key),
                ("--no-signature-check", off),
            )
            if value
        ]
        if len(given) > 1:
            raise UsageError(f"pull: {' and '.join(given)} are exclusive; pass one signature policy")
        if off:
            return cls("off")
        if key is not None:
            if not Path(key).is_file():
                raise UsageError(
                    f"--signature-key {key}: no such file; pass the public key (cosign.pub, PEM)"
                )
            return cls("key", key=Path(key))
        if identity:
            return cls("keyless", identity=identity, issuer=issuer or GITHUB_ISSUER)
        raise UsageError(f"pull: no signature policy for {repository}; {HOW}")


def check(repository: str, digest: str, policy: Policy) -> dict:
    """What the check found, for the cell's result; raises SignatureRefused (exit 1) when unsigned."""
    if policy.kind == "off":
        return {"checked": False, "policy": "off", "reason": "--no-signature-check"}
    if policy.kind == "keyless":
        return _keyless(repository, digest, policy)
    assert policy.key is not None  # from_options gives kind "key" a key
    return _with_key(repository, digest, policy.key)


def _keyless(repository: str, digest: str, policy: Policy) -> dict:
    cosign = shutil.which("cosign")
    if cosign is None:
        raise EnvironmentUnavailable(
            "--signature-identity: the cosign CLI is not on PATH (it checks Sigstore's "
            "certificate and transparency log); install cosign, or pass --signature-key "
            "or --no-signature-check"
        )
    ref = f"{repository}@{digest}"
    assert policy.identity is not None  # from_options gives kind "keyless" an identity
    command = [
        cosign,
        "verify",
        ref,
        "--certificate-identity-regexp",
        policy.identity,
        "--certificate-oidc-issuer",
        policy.issuer,
        "--output",
        "json",
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=COSIGN_TIMEOUT_S, env=os.environ
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentUnavailable(
            f"cosign verify {ref} took over {COSIGN_TIMEOUT_S} s; check the network "
            "to the registry and Sigstore"
        ) from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise SignatureRefused(
            f"refusing {ref}: cosign found no signature by {policy.identity} (issuer "
            f"{policy.issuer}): {lines[-1] if lines else 'exit ' + str(done.returncode)}; "
            "pull an image the workflow signed, or check --signature-identity"
        )
    return {
        "checked": True,
        "policy": "keyless",
        "identity": policy.identity,
        "issuer": policy.issuer,
        "signed_digest": digest,
        "by": "cosign verify",
    }


def _public_key(key_path: Path) -> tuple[Any, bytes]:
    """The ECDSA public key --signature-key names (read through the bounded reader), and its bytes."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key_bytes = input_files.read_bytes(key_path, _KEY)
        key = serialization.load_pem_public_key(key_bytes)
    except input_files.InputFileError as err:
        raise UsageError(f"--signature-key {err}") from None
    except ValueError as err:
        raise UsageError(
            f"--signature-key {key_path}: not a PEM public key ({err}); pass cosign.pub"
        ) from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise UsageError(
            f"--signature-key {key_path}: a {type(key).__name__}, not the ECDSA key cosign makes"
        )
    return key, key_bytes


def _with_key(repository: str, digest: str, key_path: Path) -> dict:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key, key_bytes = _public_key(key_path)
    registry = registry_api.Registry(repository)
    tag = digest.replace(":", "-") + ".sig"
    try:
        manifest, blobs = registry.get_artifact(tag)
        artifact = manifest.json()
    except registry_api.NotFound:
        raise SignatureRefused(
            f"refusing {repository}@{digest}: it is not signed (no {repository}:{tag}); sign it "
            f"(cosign sign --key cosign.key {repository}@{digest}), or {HOW}"
        ) from None
    except registry_api.BadRegistryAnswer as err:
        raise SignatureRefused(
            f"refusing {repository}@{digest}: not signed ({repository}:{tag}: {err})"
        ) from None
    problems = ft.check(artifact, _ARTIFACT, tag)
    if problems:
        raise SignatureRefused(
            f"refusing {repository}@{digest}: not signed ({repository}:{tag} is not a cosign signature "
            f"artifact: {ft.summary(problems)}); re-sign it with cosign sign --key"
        )
    reasons = []
    for layer in artifact["layers"]:
        signature = (layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION)
        if not signature:
            continue
        payload = blobs.get(layer.get("digest") or "")
        if payload is None:
            reasons.append("a signature layer the artifact does not hold")
            continue
        try:
            key.verify(base64.b64decode(signature), payload, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError):
            reasons.append("a signature that does not verify against this key")
            continue
        claims = _claims(payload)
        if claims.get("digest") != digest or claims.get("type") != PAYLOAD_TYPE:
            reasons.append(
                f"a valid signature of another image ({claims.get('digest') or 'no digest claim'})"
            )
            continue
        return {
            "checked": True,
            "policy": "key",
            "key": str(key_path),
            "key_sha256": hashlib.sha256(key_bytes).hexdigest(),
            "signed_digest": digest,
            "docker_reference": claims.get("reference"),
            "by": "build.py (cosign's key signature format)",
        }
    found = "; ".join(sorted(set(reasons))) or "no signature layers"
    raise SignatureRefused(
        f"refusing {repository}@{digest}: {repository}:{tag} holds {found}; re-sign the image "
        "with the key whose public half --signature-key names"
    )


def _claims(payload: bytes) -> dict:
    """What a signed payload claims; {} for a payload of another shape (then it names no digest: refused)."""
    try:
        data = input_files.decode_json(payload, "the signed payload", input_files.REGISTRY_ANSWER)
    except input_files.InputFileError:
        return {}
    if ft.check(data, _PAYLOAD, "payload"):
        return {}
    critical = data["critical"]
    return {
        "type": critical.get("type"),
        "digest": (critical.get("image") or {}).get("docker-manifest-digest"),
        "reference": (critical.get("identity") or {}).get("docker-reference"),
    }
