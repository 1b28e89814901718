"""What the test suite leaves on the machine: recorded before it runs, taken back after (scripts/test.sh).

    test_machine_state.py snapshot STATE [--dockerd-pid PID] [--base-created IMAGE]
    test_machine_state.py cleanup STATE [--dry-run] [--tag-prefix PREFIX]

`snapshot` records the Docker engine's images and build-cache records as they are before the suite's
builds (a STATE that exists already is kept: .ci/run's second tier keeps the first tier's snapshot), the
dockerd this run started (none when one was already answering) and the base image it created.
`cleanup` then removes only what the suite made: images that are new since the snapshot and tagged by it
(the docker and faults tiers tag `apex-ci-*`, the apex-image tier its cell id `apex-<ref>-torch...`),
their stopped containers, the base image when this run created it, the build cache that is new since
the snapshot when this run started the daemon (nobody else can have used it), and then stops that
daemon. On an engine that was running before the suite (a shared machine, a developer's box) the new
build cache is only reported: other builds may be filling it at the same moment. --dry-run names
everything it would remove and removes nothing.
Exit: 0 done (or nothing to do); 2 bad arguments or an unreadable STATE; 3 no Docker engine to clean.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from verify.runtime import atomic  # noqa: E402  (the project's one write path)

SUITE_TAG_PREFIX = (
    "apex-"  # the last path part of every tag the suite builds (apex-ci-..., apex-<ref>-torch...)
)
DOCKERD_STOP_S = 30


def _client():
    import docker

    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any way of not answering is "no engine"
        print(
            f"test_machine_state: no Docker engine answers ({type(exc).__name__}): nothing to record or clean",
            file=sys.stderr,
        )
        raise SystemExit(3) from exc
    return client


def _suite_tag(tag: str, prefix: str) -> bool:
    repository = tag.rsplit(":", 1)[0] if ":" in tag.rsplit("/", 1)[-1] else tag
    return repository.rsplit("/", 1)[-1].startswith(prefix)


def snapshot(state: Path, dockerd_pid: int | None, base_created: str | None) -> int:
    if state.exists():
        print(f"test_machine_state: {state} exists: keeping the first snapshot of this run")
        return 0
    client = _client()
    data: dict[str, Any] = {
        "started_at": time.time(),
        "dockerd_pid": dockerd_pid,
        "base_created": base_created,
        "images": sorted(i.id for i in client.images.list(all=True)),
        "build_cache": sorted(r["ID"] for r in client.df().get("BuildCache") or []),
    }
    atomic.write_json(state, data)
    print(
        f"test_machine_state: recorded {len(data['images'])} images and {len(data['build_cache'])} build-cache "
        f"records{'; dockerd ' + str(dockerd_pid) + ' started by this run' if dockerd_pid else ''}"
    )
    return 0


def _stop_dockerd(pid: int, dry_run: bool) -> None:
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        print(f"  dockerd {pid}: already gone")
        return
    if comm != "dockerd":
        print(f"  process {pid} is {comm!r}, not the dockerd this run started: left alone")
        return
    if dry_run:
        print(f"  would stop dockerd {pid} (started by this run)")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DOCKERD_STOP_S
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.5)
    print(
        f"  stopped dockerd {pid}"
        if not Path(f"/proc/{pid}").exists()
        else f"  dockerd {pid} still running {DOCKERD_STOP_S} s after SIGTERM: stop it by hand"
    )


def cleanup(state: Path, dry_run: bool, prefix: str = SUITE_TAG_PREFIX) -> int:
    try:
        before = json.loads(state.read_text())
        known_images, known_cache = set(before["images"]), set(before["build_cache"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(
            f"test_machine_state: {state}: no usable snapshot ({exc}); run `snapshot` before the suite",
            file=sys.stderr,
        )
        return 2
    client = _client()
    verb = "would remove" if dry_run else "removing"
    ours = _suite_images(client, known_images, prefix, before.get("base_created"))
    _remove_containers_and_images(client, ours, verb, dry_run)
    _remove_build_cache(client, known_cache, bool(before.get("dockerd_pid")), verb, dry_run)
    if before.get("dockerd_pid"):
        client.close()
        _stop_dockerd(int(before["dockerd_pid"]), dry_run)
    if not dry_run:
        state.unlink(missing_ok=True)
    return 0


def _suite_images(
    client, known_images: set[str], prefix: str, base_created: str | None
) -> dict[str, list[str]]:
    """Image id -> its suite tags, for every image made since the snapshot under a suite tag."""
    ours = {}
    for image in client.images.list(all=True):
        if image.id in known_images:
            continue
        tags = [t for t in image.tags if _suite_tag(t, prefix) or t == base_created]
        if tags:
            ours[image.id] = tags
    return ours


def _remove_containers_and_images(client, ours: dict[str, list[str]], verb: str, dry_run: bool) -> None:
    """The suite's exited containers first (an image in use is not removed), then its images by tag."""
    for container in client.containers.list(all=True, filters={"status": "exited"}):
        if container.attrs.get("Image") in ours:
            print(f"  {verb} container {container.name} (of {ours[container.attrs['Image']][0]})")
            if not dry_run:
                container.remove(force=True)
    for tags in ours.values():
        for tag in tags:
            print(f"  {verb} image {tag}")
            if not dry_run:
                try:
                    client.images.remove(tag, force=True, noprune=False)
                except Exception as exc:  # noqa: BLE001 - one image in use must not stop the rest
                    print(f"    not removed: {exc}")


def _remove_build_cache(client, known_cache: set[str], own_engine: bool, verb: str, dry_run: bool) -> None:
    """Build cache made since the snapshot: pruned when this run started the engine, else only reported."""
    new_cache = [r for r in client.df().get("BuildCache") or [] if r["ID"] not in known_cache]
    size_gb = sum(r.get("Size") or 0 for r in new_cache) / 1e9
    if new_cache and own_engine:
        print(f"  {verb} {len(new_cache)} build-cache records ({size_gb:.2f} GB) made since the snapshot")
        if not dry_run:
            client.api.prune_builds(filters={"id": [r["ID"] for r in new_cache]})
    elif new_cache:
        print(
            f"  build cache: {len(new_cache)} records ({size_gb:.2f} GB) new since the snapshot, kept: this "
            "engine was running before the suite and other builds may share its cache "
            "(`docker builder prune` frees it)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot")
    snap.add_argument("state", type=Path)
    snap.add_argument("--dockerd-pid", type=int)
    snap.add_argument("--base-created")
    clean = sub.add_parser("cleanup")
    clean.add_argument("state", type=Path)
    clean.add_argument("--dry-run", action="store_true")
    clean.add_argument(
        "--tag-prefix",
        default=SUITE_TAG_PREFIX,
        help=f"the last path part of the suite's tags (default {SUITE_TAG_PREFIX}; tests use their own)",
    )
    args = parser.parse_args(argv)
    if args.command == "snapshot":
        return snapshot(args.state, args.dockerd_pid, args.base_created)
    return cleanup(args.state, args.dry_run, args.tag_prefix)


if __name__ == "__main__":
    sys.exit(main())
