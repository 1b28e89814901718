"""Which signature policy `build.py pull` applies, decided before any engine or registry
is asked. The checks themselves run against a real registry in tests/docker/test_signed_index.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from toolchain.errors import UsageError
from toolchain.image import signature
from verify.runtime import exit_codes

REPO = "ghcr.io/acme/apex"


def policy(**given) -> signature.Policy:
    options = {"identity": None, "issuer": None, "key": None, "off": False, **given}
    return signature.Policy.from_options(repository=REPO, **options)


def test_one_policy_is_required_and_the_message_names_all_three() -> None:
    with pytest.raises(UsageError) as caught:
        policy()
    assert caught.value.exit_code == exit_codes.USAGE and f"no signature policy for {REPO}" in str(
        caught.value
    )
    assert all(
        way in str(caught.value)
        for way in ("--signature-identity", "--signature-key", "--no-signature-check")
    )


def test_the_three_policies_and_their_exclusion(tmp_path: Path) -> None:
    key = tmp_path / "cosign.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n")
    assert policy(off=True) == signature.Policy("off")
    assert policy(key=key) == signature.Policy("key", key=key)
    keyless = policy(identity="^https://github.com/acme/apex/")
    assert keyless.kind == "keyless" and keyless.issuer == signature.GITHUB_ISSUER
    assert policy(identity="x", issuer="https://issuer.example").issuer == "https://issuer.example"
    with pytest.raises(UsageError, match="--signature-identity and --no-signature-check are exclusive"):
        policy(identity="x", off=True)
    with pytest.raises(UsageError, match="--signature-key .*missing.pub: no such file"):
        policy(key=tmp_path / "missing.pub")


def test_a_key_that_is_not_cosigns_kind_is_bad_input(tmp_path: Path) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    path = tmp_path / "rsa.pub"
    path.write_bytes(
        rsa_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(UsageError, match="not the ECDSA key cosign makes"):
        signature.check(REPO, "sha256:" + "a" * 64, policy(key=path))
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("not a key")
    with pytest.raises(UsageError, match="not a PEM public key"):
        signature.check(REPO, "sha256:" + "a" * 64, policy(key=garbage))
    assert signature.check(REPO, "sha256:" + "a" * 64, policy(off=True))["checked"] is False
