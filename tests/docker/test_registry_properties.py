"""Property tests for `build.py publish-index` and `build.py pull`, against a real distribution
registry on localhost and the real engine: two platform images that BuildKit makes without running
anything (FROM scratch + COPY) are published once; then generated runs damage one publish record (cut,
not UTF-8, a FIFO, a directory, a link to /dev/zero, a value replaced by a huge number, a non-ASCII digit,
a string of the wrong shape ...) and give hostile values (digests, registries that stay on 127.0.0.1,
signature keys that are FIFOs, devices, empty or garbage files, identities that are not regular expressions,
--refs-out paths). The contract of the unit tier's property tests (tests/unit/test_cli_properties.py):
exit 0-3, no traceback, nothing written outside the given output folders (the example's temp tree listed
before and after), no false success: publish-index is exit 0 only on whole records, and pull never passes
here (an image without Python cannot be verified: exit 3 at best). In-process, derandomized, bounded."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.unit.test_cli_properties import (
    PROPERTY,
    _assert_contract,
    _call,
    _keeps_checkout,
    _sandbox,
    odd_text,
)
from tests.unit.test_new_commands_properties import (
    DAMAGE,
    PATH_KINDS,
    STRUCTURAL,
    _own_tempdir,
    _tree,
    damage_file,
    hostile_path,
    raw_json,
)
from toolchain import cli as toolchain_cli
from verify.runtime import exit_codes

pytestmark = pytest.mark.property
AMD64, ARM64 = "prop", "prop-arm64"
SEEN: dict[str, set[int]] = {"publish-index": set(), "pull": set()}


@pytest.fixture(scope="module")
def stack(docker_client, registry: dict, tmp_path_factory: pytest.TempPathFactory):
    """Two platform images of one stack, each published (not yet indexed): matrix, out, repository."""
    unique = uuid.uuid4().hex[:8]
    where = tmp_path_factory.mktemp("i24-registry-properties")
    matrix = where / "matrix.toml"
    matrix.write_text(
        f'[defaults]\npython = "3.12"\narchs = ["9.0"]\n\n[cells.{AMD64}]\ncuda = "13.2"\n'
        f'torch = "2.15"\n\n[cells.{ARM64}]\ncuda = "13.2"\ntorch = "2.15"\nplatform = "linux/arm64"\n'
    )
    from toolchain.image import docker_host

    images = {}
    for cell, platform in ((AMD64, "linux/amd64"), (ARM64, "linux/arm64")):
        context = where / cell
        context.mkdir()
        (context / "Dockerfile").write_text("FROM scratch\nCOPY marker /marker\n")
        (context / "marker").write_text(f"{unique} {platform}")
        images[cell] = f"i24-rest-prop-{cell}-{unique}"
        built = subprocess.run(
            [
                *docker_host.docker_client().build_prefix(),
                "--platform",
                platform,
                "--tag",
                images[cell],
                str(context),
            ],
            env=dict(os.environ, DOCKER_BUILDKIT="1"),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert built.returncode == 0, built.stdout + built.stderr
    repository = f"{registry['host']}/i24-rest-prop-{unique}"
    out = where / "out"
    for cell, image in images.items():
        code, stderr = _call(
            toolchain_cli.main,
            [
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
            ],
        )
        assert code == 0, stderr
    yield {"matrix": matrix, "out": out, "repository": repository, "host": registry["host"]}
    import docker

    for image in docker_client.images.list():  # only what this module tagged or pulled
        if any(
            n.startswith((repository, "i24-rest-prop-"))
            for n in (image.tags or []) + (image.attrs.get("RepoDigests") or [])
        ):
            try:
                docker_client.images.remove(image.id, force=True)
            except docker.errors.ImageNotFound:
                pass


OURS = "THE-STACKS-REGISTRY"  # replaced by the real registry's repository in each example
registry_value = st.one_of(
    st.just(OURS),
    st.just(OURS),
    st.just(OURS),  # registries that never leave this host
    st.sampled_from(
        [
            "127.0.0.1:9/apex",
            "",
            " ",
            "Bad Repo:tag",
            "--x",
            "127.0.0.1:99999/x",
            f"{OURS}@sha256:{'0' * 64}",
            "http://127.0.0.1:9/x",
        ]
    ),
    odd_text.map(lambda s: "127.0.0.1:9/" + s),
)


# --- publish-index ---------------------------------------------------------------------------------------


def test_every_damaged_record_is_indexed_or_refused(stack: dict) -> None:
    _keeps_checkout(lambda: _publish_index_examples(stack))
    assert SEEN["publish-index"] >= {0, 1, 2}, SEEN["publish-index"]


@settings(PROPERTY, max_examples=25)
@given(
    registry=registry_value,
    member=st.sampled_from([AMD64, ARM64]),
    damage=st.sampled_from(DAMAGE),
    where=st.integers(0, 10**6),
    raw=raw_json,
    refs_kind=st.sampled_from(["none", "given", "given", *PATH_KINDS]),
)
def _publish_index_examples(
    stack: dict, registry: str, member: str, damage: str, where: int, raw: str, refs_kind: str
) -> None:
    registry = registry.replace(OURS, stack["repository"])
    with _sandbox() as root, _own_tempdir(root) as tmp:
        out = root / "given" / "out"
        shutil.copytree(stack["out"], out, symlinks=True)
        record = next(
            p
            for p in out.glob("cells/*/published.json")
            if (p.parent.name.endswith("arm64")) == (member == ARM64)
        )
        damage_file(record, damage, where, raw)
        argv = [
            "publish-index",
            "--matrix",
            str(stack["matrix"]),
            "--registry",
            registry.replace("\x00", ""),
            "--out",
            str(out),
        ]
        if refs_kind != "none":
            argv += [
                "--refs-out",
                hostile_path(
                    root / "given" / "refs", "missing" if refs_kind == "given" else refs_kind, "refs.txt"
                ),
            ]
        before = _tree(root)
        code, stderr = _call(toolchain_cli.main, argv)
        _assert_contract(code, stderr, usage_prefix="")
        if code == exit_codes.OK:  # no false success: both records whole, the stack's own registry
            assert damage in ("none", "a value replaced") and registry == stack["repository"], (
                damage,
                stderr,
            )
        if damage in STRUCTURAL and registry == stack["repository"]:
            assert code != exit_codes.OK
        SEEN["publish-index"].add(code)
        changed = {k for k in before.keys() | _tree(root).keys() if before.get(k) != _tree(root).get(k)}
        assert all(k.startswith("given") for k in changed), sorted(changed)[:20]
        assert not list(tmp.iterdir())


# --- pull --------------------------------------------------------------------------------------------

KEY_KINDS = [
    "garbage",
    "a certificate",
    "empty file",
    "fifo",
    "dev-zero",
    "directory",
    "missing",
    "dangling symlink",
]


def _key(root: Path, kind: str, garbage: bytes) -> str:
    root.mkdir(parents=True, exist_ok=True)
    if kind == "garbage":
        (root / "key.pub").write_bytes(garbage)
        return str(root / "key.pub")
    if kind == "a certificate":  # PEM framing around something that is not an ECDSA public key
        (root / "key.pub").write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
        return str(root / "key.pub")
    return hostile_path(root, kind, "key.pub")


def test_every_pull_is_refused_or_fails_without_a_false_pass(stack: dict) -> None:
    _keeps_checkout(lambda: _pull_examples(stack))
    assert SEEN["pull"] >= {1, 2, 3}, SEEN["pull"]


@settings(PROPERTY, max_examples=30)
@given(
    registry=registry_value,
    cell=st.sampled_from([AMD64, AMD64, ARM64, "nope"]),
    damage=st.sampled_from(["none", "none", *DAMAGE]),
    where=st.integers(0, 10**6),
    raw=raw_json,
    policy=st.sampled_from(["none", "no-check", "no-check", "no-check", "key", "identity"]),
    key_kind=st.sampled_from(KEY_KINDS),
    garbage=st.binary(max_size=300),
    identity=st.one_of(st.sampled_from(["(", "[", "^https://x@", "*", "", "a" * 100_000]), odd_text),
    digest=st.one_of(
        st.none(),
        st.none(),
        st.sampled_from(["sha256:" + "0" * 64, "sha256:xyz", "md5:00", "", "sha256:" + "f" * 63]),
        odd_text,
    ),
    extra=st.lists(
        st.sampled_from(
            [
                "--by-digest",
                "--no-pull",
                "--gpu none",
                "--gpu require",
                "--gpu auto",
                "--platform linux/arm64",
                "--platform linux/s390x",
                "--engine docker",
            ]
        ),
        max_size=2,
    ),
)
@example(
    registry=OURS,
    cell=AMD64,
    damage="none",
    where=0,
    raw="1",
    policy="no-check",
    key_kind="missing",
    garbage=b"",
    identity="",
    digest=None,
    extra=[],
)  # pulled: a FROM-scratch image cannot be verified
@example(
    registry=OURS,
    cell=AMD64,
    damage="none",
    where=0,
    raw="1",
    policy="no-check",
    key_kind="missing",
    garbage=b"",
    identity="",
    digest="sha256:" + "0" * 64,
    extra=[],
)  # a digest the registry does not hold
@example(
    registry=OURS,
    cell=AMD64,
    damage="none",
    where=0,
    raw="1",
    policy="key",
    key_kind="garbage",
    garbage=b"\xff" * 40,
    identity="",
    digest=None,
    extra=[],
)
@example(
    registry=OURS,
    cell=AMD64,
    damage="fifo",
    where=0,
    raw="1",
    policy="no-check",
    key_kind="missing",
    garbage=b"",
    identity="",
    digest=None,
    extra=["--by-digest"],
)
def _pull_examples(
    stack: dict,
    registry: str,
    cell: str,
    damage: str,
    where: int,
    raw: str,
    policy: str,
    key_kind: str,
    garbage: bytes,
    identity: str,
    digest: str | None,
    extra: list[str],
) -> None:
    registry = registry.replace(OURS, stack["repository"])
    with _sandbox() as root, _own_tempdir(root) as tmp:
        out = root / "given" / "out"
        shutil.copytree(stack["out"], out, symlinks=True)
        for record in out.glob("cells/*/published.json"):
            if record.parent.name.endswith("arm64") == (cell == ARM64):
                damage_file(record, damage, where, raw)
        argv = [
            "pull",
            "--matrix",
            str(stack["matrix"]),
            "--cell",
            cell,
            "--registry",
            registry.replace("\x00", ""),
            "--out",
            str(out),
        ]
        argv += {
            "none": [],
            "no-check": ["--no-signature-check"],
            "key": ["--signature-key", _key(root / "keys", key_kind, garbage)],
            "identity": ["--signature-identity", identity.replace("\x00", "")],
        }[policy]
        argv += ["--digest", digest.replace("\x00", "")] if digest is not None else []
        for option in extra:
            argv += option.split()
        before = _tree(root)
        code, stderr = _call(toolchain_cli.main, argv)
        _assert_contract(code, stderr, usage_prefix="")
        assert code != exit_codes.OK, (argv, stderr)  # FROM scratch: nothing here can verify it
        if policy == "none" and "--no-pull" not in extra:
            assert code in (exit_codes.USAGE, exit_codes.ENVIRONMENT), (
                argv,
                code,
                stderr,
            )  # no policy: never pulled
        SEEN["pull"].add(code)
        after = _tree(root)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        assert all(k.startswith("given") for k in changed), sorted(changed)[:20]
        assert not list(tmp.iterdir())
