"""The ccache carried across builds as a plain directory. The pure parts here; the real
import/export round trip through BuildKit is tests/docker/test_ccache_round_trip.py, the cold/warm figures
reports/cpu-2026-12-01-ccache/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import REPO
from toolchain.errors import UsageError
from toolchain.image import ccache_carry
from verify.runtime import exit_codes


def test_a_directory_or_nothing_and_a_mount_id_of_safe_characters(tmp_path: Path) -> None:
    assert (
        ccache_carry.check_dir(None) is None and ccache_carry.check_dir(tmp_path / "new") == tmp_path / "new"
    )
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="--ccache-dir .*file: not a directory") as caught:
        ccache_carry.check_dir(tmp_path / "file")
    assert caught.value.exit_code == exit_codes.USAGE
    assert [ccache_carry.check_mount(m) for m in ("shared", "carried")] == list(ccache_carry.MOUNTS)
    with pytest.raises(UsageError, match=r"--ccache-mount 'other': use shared or carried"):
        ccache_carry.carry_args("other")


def test_each_carry_build_gets_a_fresh_id_and_writes_files_not_an_image() -> None:
    first, second = ccache_carry.carry_args("carried"), ccache_carry.carry_args("carried")
    assert first["CCACHE_MOUNT"] == "carried" and first["CCACHE_CARRY_ID"] != second["CCACHE_CARRY_ID"]
    command = [
        "docker",
        "buildx",
        "build",
        "--load",
        "--file",
        "F",
        "--tag",
        "cell",
        "--build-arg",
        "A=1",
        "ctx",
    ]
    out = ccache_carry.local_output(command, Path("/d"))
    assert out == [
        "docker",
        "buildx",
        "build",
        "--file",
        "F",
        "--build-arg",
        "A=1",
        "--output",
        "type=local,dest=/d",
        "ctx",
    ]


def test_the_seed_and_the_swap(tmp_path: Path) -> None:
    carried = tmp_path / "carried"
    (carried / "a").mkdir(parents=True)
    (carried / "a" / "obj").write_bytes(b"12345")
    context = tmp_path / "context"
    seed = ccache_carry.stage_seed(context, carried)
    assert (seed / "a" / "obj").read_bytes() == b"12345" and seed == context / "build-cache" / "ccache"
    assert list(ccache_carry.stage_seed(context, None).iterdir()) == []  # no DIR yet: an empty seed
    assert ccache_carry.count(carried).to_json() == {"path": str(carried), "files": 1, "bytes": 5}
    new = ccache_carry.export_dest(carried)
    new.mkdir()
    (new / "b").write_text("new")
    ccache_carry.swap_in(new, carried)
    assert sorted(p.name for p in carried.iterdir()) == ["b"] and not new.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "no old copy left behind"


def test_the_dockerfile_carries_the_mount_the_apex_step_compiles_in() -> None:
    text = (REPO / "docker" / "Dockerfile").read_text()
    mounts = (
        "--mount=type=cache,target=/root/.cache/ccache,id=apex-toolchain-ccache",
        "--mount=type=cache,target=/root/.cache/ccache-carried,id=apex-toolchain-ccache-carried",
    )
    apex_step = text[text.index("FROM torch AS apex-build") : text.index("FROM devel AS ccache-seed")]
    assert (
        all(m in apex_step for m in mounts)
        and "carried) export CCACHE_DIR=/root/.cache/ccache-carried" in apex_step
    )
    assert "ARG CCACHE_MOUNT=shared" in text
    for stage in ("ccache-seed", "ccache-collect"):
        body = text[text.index(f"AS {stage}") :].split("\nFROM ", 1)[0]
        assert all(m in body for m in mounts) and "CCACHE_CARRY_ID" in body and "carried) dir=" in body
    assert 'find "$dir" -mindepth 1 -delete' in text, "an import replaces the mount's content"
    assert (
        f"FROM scratch AS {ccache_carry.EXPORT_TARGET}" in text
        and f"FROM scratch AS {ccache_carry.IMPORT_TARGET}" in text
    )
    # only the seed stage reads the carried directory: the apex step's cache key does not change with it
    assert text.count(f"source={ccache_carry.SEED.as_posix()}") == 1
    assert "!build-cache/**" in (REPO / "docker" / "Dockerfile.dockerignore").read_text()
