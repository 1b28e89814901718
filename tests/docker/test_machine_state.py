"""scripts/test_machine_state.py against the real engine: after a run, only what the run tagged and made is
removed (`make test` leaves the machine as it found it). The test uses a tag prefix of its own,
so it never touches another run's images on a shared engine."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support import REPO

SCRIPT = REPO / "scripts" / "test_machine_state.py"
DOCKER = "/usr/bin/docker"


def _state(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, check=False
    )


def _exists(tag: str) -> bool:
    return subprocess.run([DOCKER, "image", "inspect", tag], capture_output=True, timeout=60).returncode == 0


def test_only_the_new_images_with_the_suites_tags_are_removed(
    tmp_path: Path, docker_client, base_image: str
) -> None:
    prefix = f"apex-machine-state-{uuid.uuid4().hex[:8]}"
    old, new, foreign = f"{prefix}-old:1", f"{prefix}-new:1", f"not-{prefix}:1"
    subprocess.run([DOCKER, "tag", base_image, old], check=True, timeout=60)  # there before the run
    state = tmp_path / "engine.json"
    try:
        snap = _state("snapshot", str(state))
        assert snap.returncode == 0, snap.stderr
        before = json.loads(state.read_text())
        assert before["dockerd_pid"] is None and docker_client.images.get(old).id in before["images"]
        assert _state("snapshot", str(state)).stdout.startswith(
            "test_machine_state: "
        )  # the first one is kept
        context = tmp_path / "ctx"
        context.mkdir()
        (context / "Dockerfile").write_text(f"FROM {base_image}\nLABEL made-by={prefix}\n")
        for tag in (new, foreign):
            subprocess.run(
                [DOCKER, "build", "-q", "-t", tag, str(context)],
                check=True,
                capture_output=True,
                timeout=300,
                env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
            )
        dry = _state("cleanup", str(state), "--dry-run", "--tag-prefix", prefix)
        assert dry.returncode == 0, dry.stderr
        assert (
            f"would remove image {new}" in dry.stdout and old not in dry.stdout and foreign not in dry.stdout
        )
        assert _exists(new) and state.exists()  # a dry run removes nothing
        done = _state("cleanup", str(state), "--tag-prefix", prefix)
        assert done.returncode == 0, done.stderr
        assert f"removing image {new}" in done.stdout
        assert not _exists(new) and _exists(old) and _exists(foreign) and _exists(base_image)
        assert "stopped dockerd" not in done.stdout  # the engine was running before: it keeps running
        assert not state.exists()
        assert _state("cleanup", str(state)).returncode == 2  # no snapshot: says so, removes nothing
    finally:
        for tag in (old, new, foreign):
            subprocess.run([DOCKER, "rmi", tag], capture_output=True, timeout=60)


def _build(context: Path, tag: str, stamp: str) -> None:
    subprocess.run(
        [DOCKER, "build", "-q", "--build-arg", f"STAMP={stamp}", "-t", tag, str(context)],
        check=True,
        capture_output=True,
        timeout=300,
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
    )


def _cache_ids(docker_client) -> set[str]:
    return {r["ID"] for r in docker_client.df().get("BuildCache") or []}


def test_on_its_own_engine_cleanup_prunes_every_new_cache_record_and_the_dangling_rebuilds(
    tmp_path: Path, docker_client, base_image: str
) -> None:
    """The path CI takes (the run started the daemon): several new build-cache records, pruned one call
    each (the engine's id filter takes one value), and the image a rebuild under the same tag left
    dangling, found by its cell label. A `sleep` stands in for the daemon's pid: it is not a dockerd,
    so it is left alone."""
    prefix = f"apex-machine-state-{uuid.uuid4().hex[:8]}"
    tag = f"{prefix}-cell:1"
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {base_image}\nARG STAMP\nLABEL io.apex-toolchain.cell={prefix}-cell\n"
        'RUN echo "$STAMP" > /one\nRUN echo "$STAMP" > /two\nRUN echo "$STAMP" > /three\n'
    )
    stand_in = subprocess.Popen(["sleep", "600"])
    state = tmp_path / "engine.json"
    try:
        assert _state("snapshot", str(state), "--dockerd-pid", str(stand_in.pid)).returncode == 0
        known = set(json.loads(state.read_text())["build_cache"])
        _build(context, tag, "first")
        dangling = docker_client.images.get(tag).id
        _build(context, tag, "second")  # the first image loses its tag
        made = _cache_ids(docker_client) - known
        assert len(made) >= 3, made
        done = _state("cleanup", str(state), "--tag-prefix", prefix, "--keep-engine")
        assert done.returncode == 0, done.stderr
        assert f"removing image {tag}" in done.stdout and f"removing image {dangling}" in done.stdout
        assert "not pruned" not in done.stdout and "freed" in done.stdout, done.stdout
        assert not (made & _cache_ids(docker_client)), "new build-cache records survived the cleanup"
        assert not _exists(tag) and not _exists(dangling) and _exists(base_image)
        assert state.exists() and stand_in.poll() is None  # --keep-engine: snapshot and daemon stay
        last = _state("cleanup", str(state), "--tag-prefix", prefix)
        assert f"process {stand_in.pid} is 'sleep', not the dockerd" in last.stdout, last.stdout
        assert stand_in.poll() is None and not state.exists()
    finally:
        stand_in.kill()
        subprocess.run([DOCKER, "rmi", "-f", tag], capture_output=True, timeout=60)


def test_reclaim_acts_only_on_its_own_engine_and_names_what_it_would_free(
    tmp_path: Path, docker_client, base_image: str
) -> None:
    """reclaim before a cold build: on an engine that was running before the suite it only reports; on its
    own it names the project's dangling images, the least recently used cache and, still short, the
    suite-tagged images of earlier runs (a dry run here: the real prune is CI's, and it would take this
    machine's whole cache)."""
    prefix = "apex-machine-state-reclaim"  # reclaim looks for the project's cell label (apex-...)
    tag = f"{prefix}-{uuid.uuid4().hex[:8]}:1"
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f'FROM {base_image}\nARG STAMP\nLABEL io.apex-toolchain.cell={prefix}\nRUN echo "$STAMP" > /one\n'
    )
    stand_in = subprocess.Popen(["sleep", "600"])
    shared, own = tmp_path / "shared.json", tmp_path / "own.json"
    try:
        _build(context, tag, "first")
        dangling = docker_client.images.get(tag).id
        _build(context, tag, "second")
        assert _state("snapshot", str(shared)).returncode == 0
        assert _state("snapshot", str(own), "--dockerd-pid", str(stand_in.pid)).returncode == 0
        enough = _state("reclaim", str(own), "--free-gib", "0")
        assert enough.returncode == 0 and "nothing to reclaim" in enough.stdout, enough.stdout
        huge = "1e9"  # more than any disk: every step is named
        report = _state("reclaim", str(shared), "--free-gib", huge)
        assert report.returncode == 0 and "nothing is reclaimed here" in report.stdout, report.stdout
        dry = _state("reclaim", str(own), "--free-gib", huge, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert f"would remove dangling image {dangling[:19]}" in dry.stdout, dry.stdout
        assert "would remove least recently used build cache" in dry.stdout
        assert f"would remove earlier run's image {tag}" in dry.stdout, dry.stdout  # still short after that
        assert _exists(dangling) and _exists(tag)  # a dry run removes nothing
        assert _state("reclaim", str(tmp_path / "none.json"), "--free-gib", "1").returncode == 2
    finally:
        stand_in.kill()
        subprocess.run([DOCKER, "rmi", "-f", tag, dangling if "dangling" in locals() else tag],
                       capture_output=True, timeout=60)  # fmt: skip


def test_its_own_engine_loses_every_image_the_run_made_and_the_base_it_created(
    tmp_path: Path, docker_client, base_image: str
) -> None:
    """Fresh-clone runs 15-17 left ~1.1 GB each: the local-route test's `devel-torch...` image (a product tag,
    not the suite's), the trixie base build.py debootstrapped, what their rebuilds left untagged, and the
    bookworm base ensure-docker.sh created (made before the snapshot, so it counted as "there before").
    On an engine the run started all of it goes; --keep-engine (between CI's tiers) keeps it, and on a
    shared engine only the created base goes with the suite's tags (the first test keeps a foreign tag)."""
    unique = uuid.uuid4().hex[:8]
    prefix, made_base, product = f"apex-machine-state-{unique}", f"base-{unique}:made", f"devel-{unique}:1"
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base_image}\nARG STAMP\nLABEL stamp=$STAMP\n")
    stand_in = subprocess.Popen(["sleep", "600"])
    state, shared = tmp_path / "engine.json", tmp_path / "shared.json"
    try:
        _build(context, made_base, f"base-{unique}")  # as ensure-docker.sh does, before the snapshot
        assert (
            _state(
                "snapshot", str(state), "--dockerd-pid", str(stand_in.pid), "--base-created", made_base
            ).returncode
            == 0
        )
        assert _state("snapshot", str(shared), "--base-created", made_base).returncode == 0
        assert docker_client.images.get(made_base).id not in json.loads(state.read_text())["images"]
        _build(context, product, f"product-{unique}")
        untagged = docker_client.images.get(product).id
        _build(context, product, f"product-again-{unique}")  # the first one loses its tag
        kept = _state("cleanup", str(state), "--tag-prefix", prefix, "--keep-engine")
        assert kept.returncode == 0, kept.stderr
        assert _exists(made_base) and _exists(product) and _exists(untagged), kept.stdout
        dry = _state("cleanup", str(shared), "--tag-prefix", prefix, "--dry-run")
        assert f"would remove image {made_base}" in dry.stdout and product not in dry.stdout, dry.stdout
        assert untagged not in dry.stdout, dry.stdout
        done = _state("cleanup", str(state), "--tag-prefix", prefix)
        assert done.returncode == 0, done.stderr
        assert f"removing image {product}" in done.stdout and f"removing image {made_base}" in done.stdout
        assert not _exists(product) and not _exists(untagged) and not _exists(made_base), done.stdout
        assert _exists(base_image) and stand_in.poll() is None  # known images stay; a sleep is no dockerd
    finally:
        stand_in.kill()
        for tag in (product, made_base, untagged):
            subprocess.run([DOCKER, "rmi", "-f", tag], capture_output=True, timeout=60)
