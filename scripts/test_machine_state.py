"""What the test suite leaves on the machine: recorded before it runs, taken back after (scripts/test.sh).

    test_machine_state.py snapshot STATE [--dockerd-pid PID] [--base-created IMAGE]
    test_machine_state.py cleanup STATE [--dry-run] [--tag-prefix PREFIX] [--keep-engine]
    test_machine_state.py reclaim STATE --free-gib N [--dry-run]

`snapshot` records the Docker engine's images and build-cache records as they are before the suite's
builds (a STATE that exists already is kept: .ci/run's second tier keeps the first tier's snapshot), the
dockerd this run started (none when one was already answering) and the base image it created.
`cleanup` then removes only what the suite made: images that are new since the snapshot and tagged by it
(the docker and faults tiers tag `apex-ci-*`, the apex-image tier its cell id `apex-<ref>-torch...`),
their stopped containers, the base image when this run created it (made before the snapshot, so the
snapshot leaves it out), and, when this run started the daemon (nobody else can have used it), every
other image new since the snapshot (the product's own tags such as `devel-torch...`, the local Debian
base build.py debootstraps, what a rebuild left untagged) and the new build cache; then it stops that
daemon. On an engine that was running before the suite (a shared machine, a developer's box) images
without the suite's tags and the new build cache are kept (cache only reported): other builds may be
making them at the same moment. --keep-engine (between .ci/run's tiers) keeps the base images too.
--dry-run names everything it would remove and removes nothing.
Exit: 0 done (or nothing to do); 2 bad arguments or an unreadable STATE; 3 no Docker engine to clean.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from verify.runtime import atomic, input_files  # noqa: E402  (the project's one write and read paths)
from verify.runtime.messages import printable  # noqa: E402

SUITE_TAG_PREFIX = (
    "apex-"  # the last path part of every tag the suite builds (apex-ci-..., apex-<ref>-torch...)
)
CELL_LABEL = "io.apex-toolchain.cell"  # every image the project builds carries its cell id here
DOCKERD_STOP_S = 30


def _client():
    import docker

    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any way of not answering is "no engine"
        print(
            printable(
                f"test_machine_state: no Docker engine answers ({type(exc).__name__}): nothing to record or clean"
            ),
            file=sys.stderr,
        )
        raise SystemExit(3) from exc
    return client


def _suite_tag(tag: str, prefix: str) -> bool:
    repository = tag.rsplit(":", 1)[0] if ":" in tag.rsplit("/", 1)[-1] else tag
    return repository.rsplit("/", 1)[-1].startswith(prefix)


def snapshot(state: Path, dockerd_pid: int | None, base_created: str | None) -> int:
    if state.exists():
        print(printable(f"test_machine_state: {state} exists: keeping the first snapshot of this run"))
        return 0
    client = _client()
    images = client.images.list(all=True)
    # the base ensure-docker.sh created already exists; it is this run's, so it is not "there before"
    made_base = {i.id for i in images if base_created and base_created in i.tags}
    data: dict[str, Any] = {
        "started_at": time.time(),
        "dockerd_pid": dockerd_pid,
        "base_created": base_created,
        "images": sorted(i.id for i in images if i.id not in made_base),
        "build_cache": sorted(r["ID"] for r in client.df().get("BuildCache") or []),
    }
    atomic.write_json(state, data)
    print(
        printable(
            f"test_machine_state: recorded {len(data['images'])} images and {len(data['build_cache'])} build-cache "
            f"records{'; dockerd ' + str(dockerd_pid) + ' started by this run' if dockerd_pid else ''}"
        )
    )
    return 0


def _stop_dockerd(pid: int, dry_run: bool) -> None:
    try:
        comm = input_files.read_system_text(f"/proc/{pid}/comm").strip()
    except input_files.InputFileError:
        print(printable(f"  dockerd {pid}: already gone"))
        return
    if comm != "dockerd":
        print(printable(f"  process {pid} is {comm!r}, not the dockerd this run started: left alone"))
        return
    if dry_run:
        print(printable(f"  would stop dockerd {pid} (started by this run)"))
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DOCKERD_STOP_S
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.5)
    print(
        printable(
            f"  stopped dockerd {pid}"
            if not Path(f"/proc/{pid}").exists()
            else f"  dockerd {pid} still running {DOCKERD_STOP_S} s after SIGTERM: stop it by hand"
        )
    )


def _read_state(state: Path) -> dict[str, Any] | None:
    try:
        before = input_files.read_json(state, input_files.MANIFEST)
        before["known_images"], before["known_cache"] = set(before["images"]), set(before["build_cache"])
        return before
    except (input_files.InputFileError, KeyError, TypeError) as exc:
        print(
            printable(
                f"test_machine_state: {state}: no usable snapshot ({exc}); run `snapshot` before the suite"
            ),
            file=sys.stderr,
        )
        return None


def cleanup(state: Path, dry_run: bool, prefix: str = SUITE_TAG_PREFIX, keep_engine: bool = False) -> int:
    before = _read_state(state)
    if before is None:
        return 2
    client = _client()
    verb = "would remove" if dry_run else "removing"
    own_engine = bool(before.get("dockerd_pid"))
    ours = _suite_images(
        client,
        before["known_images"],
        prefix,
        None if keep_engine else before.get("base_created"),
        every_new=own_engine and not keep_engine,
    )
    _remove_containers_and_images(client, ours, verb, dry_run)
    _remove_build_cache(client, before["known_cache"], own_engine, verb, dry_run)
    if keep_engine:
        return 0
    if own_engine:
        client.close()
        _stop_dockerd(int(before["dockerd_pid"]), dry_run)
    if not dry_run:
        state.unlink(missing_ok=True)
    return 0


def _suite_images(
    client, known_images: set[str], prefix: str, base_created: str | None, every_new: bool
) -> dict[str, list[str]]:
    """Image id -> its suite tags (its id when a rebuild left it dangling), for every image made since the
    snapshot under a suite tag or a suite cell label; with `every_new` (an engine this run started) every
    image made since, under all its tags. Newest first: an image goes before the one it was built on."""
    ours = {}
    images = sorted(client.images.list(all=True), key=lambda i: str(i.attrs.get("Created", "")), reverse=True)
    for image in images:
        if image.id in known_images:
            continue
        tags = [t for t in image.tags if every_new or _suite_tag(t, prefix) or t == base_created]
        if tags:
            ours[image.id] = tags
        elif every_new or _dangling_of_ours(image, prefix):
            ours[image.id] = [image.id]
    return ours


def _dangling_of_ours(image, prefix: str = SUITE_TAG_PREFIX) -> bool:
    cell = (image.attrs.get("Config") or {}).get("Labels") or {}
    return not image.tags and str(cell.get(CELL_LABEL, "")).startswith(prefix)


def _remove_containers_and_images(client, ours: dict[str, list[str]], verb: str, dry_run: bool) -> None:
    """The suite's exited containers first (an image in use is not removed), then its images by tag."""
    for container in client.containers.list(all=True, filters={"status": "exited"}):
        if container.attrs.get("Image") in ours:
            print(printable(f"  {verb} container {container.name} (of {ours[container.attrs['Image']][0]})"))
            if not dry_run:
                container.remove(force=True)
    for tags in ours.values():
        for tag in tags:
            print(printable(f"  {verb} image {tag}"))
            if not dry_run:
                try:
                    client.images.remove(tag, force=True, noprune=False)
                except Exception as exc:  # noqa: BLE001 - one image in use must not stop the rest
                    print(printable(f"    not removed: {exc}"))


def _remove_build_cache(client, known_cache: set[str], own_engine: bool, verb: str, dry_run: bool) -> None:
    """Build cache made since the snapshot: pruned when this run started the engine, else only reported."""
    new_cache = [r for r in client.df().get("BuildCache") or [] if r["ID"] not in known_cache]
    size_gb = sum(r.get("Size") or 0 for r in new_cache) / 1e9
    if new_cache and own_engine:
        print(
            printable(
                f"  {verb} {len(new_cache)} build-cache records ({size_gb:.2f} GB) made since the snapshot"
            )
        )
        if not dry_run:
            _prune_records(client, [r["ID"] for r in new_cache])
    elif new_cache:
        print(
            f"  build cache: {len(new_cache)} records ({size_gb:.2f} GB) new since the snapshot, kept: this "
            "engine was running before the suite and other builds may share its cache "
            "(`docker builder prune` frees it)"
        )


def _prune_records(client, ids: list[str]) -> None:
    """One prune call per record: the engine's `id` filter takes one value (a list is a 400, "filters
    expect only one value"). A record that others still build on is kept while they exist, so the
    records go deepest first (every child of a new record is new too); a second round catches a record
    whose child another run was still using."""
    freed, failed, left = 0, [], set(ids)
    for _round in range(2):
        records = client.df().get("BuildCache") or []
        for record_id in _deepest_first(records, left):
            try:
                reply = client.api.prune_builds(filters={"id": record_id}, all=True)
                freed += int(reply.get("SpaceReclaimed") or 0)
            except Exception as exc:  # noqa: BLE001 - one record in use must not stop the rest
                failed.append(f"{record_id[:12]} ({exc})")
        left &= {r["ID"] for r in client.df().get("BuildCache") or []}
        if not left:
            break
    kept = f"; {len(left)} not pruned (in use?)" if left else ""
    print(
        printable(
            f"    freed {freed / 1e9:.2f} GB{kept}" + (f"; errors: {', '.join(failed[:5])}" if failed else "")
        )
    )


def _deepest_first(records: list[dict], wanted: set[str]) -> list[str]:
    """The wanted record ids, each after every record that builds on it (engines name one `Parent`, newer
    ones a list of `Parents`)."""
    parents = {r["ID"]: list(r.get("Parents") or ([r["Parent"]] if r.get("Parent") else [])) for r in records}
    depth: dict[str, int] = {}

    def depth_of(record_id: str) -> int:
        if record_id not in depth:
            depth[record_id] = 0  # a cycle, were there one, ends here
            depth[record_id] = 1 + max(
                (depth_of(p) for p in parents.get(record_id, []) if p in parents), default=-1
            )
        return depth[record_id]

    return sorted((i for i in wanted if i in parents), key=lambda i: (-depth_of(i), i))


def _free_gib(client) -> float:
    root = Path(client.info().get("DockerRootDir") or "/var/lib/docker")
    return shutil.disk_usage(root if root.exists() else "/").free / 2**30


def reclaim(state: Path, free_gib: float, dry_run: bool) -> int:
    before = _read_state(state)
    if before is None:
        return 2
    client = _client()
    free = _free_gib(client)
    if free >= free_gib:
        print(
            f"test_machine_state: {free:.1f} GiB free under Docker's root (>= {free_gib:g}): nothing to reclaim"
        )
        return 0
    if not before.get("dockerd_pid"):
        print(
            f"test_machine_state: {free:.1f} GiB free, {free_gib:g} wanted; this engine was running before the "
            "suite, so nothing is reclaimed here (`docker builder prune` / `docker image prune` free space)"
        )
        return 0
    verb = "would remove" if dry_run else "removing"
    dangling = [i for i in client.images.list(all=True) if _dangling_of_ours(i)]
    _remove_images(client, dangling, "dangling image", verb, dry_run)
    _prune_least_recent(client, free_gib, verb, dry_run)
    if _free_gib(client) < free_gib:  # still short: what earlier runs tagged and never took back
        stale = [i for i in client.images.list() if i.id in before["known_images"] and _tagged_of_ours(i)]
        _remove_images(client, stale, "earlier run's image", verb, dry_run)
        _prune_least_recent(client, free_gib, verb, dry_run)
    print(f"test_machine_state: {_free_gib(client):.1f} GiB free under Docker's root ({free_gib:g} wanted)")
    return 0


def _tagged_of_ours(image, prefix: str = SUITE_TAG_PREFIX) -> bool:
    cell = str(((image.attrs.get("Config") or {}).get("Labels") or {}).get(CELL_LABEL, ""))
    return cell.startswith(prefix) and any(_suite_tag(t, prefix) for t in image.tags)


def _remove_images(client, images: list, what: str, verb: str, dry_run: bool) -> None:
    for image in images:
        print(
            printable(
                f"  {verb} {what} {image.tags[0] if image.tags else image.short_id} (cell {image.labels.get(CELL_LABEL)})"
            )
        )
        if not dry_run:
            try:
                client.images.remove(image.id, force=True)
            except Exception as exc:  # noqa: BLE001 - one image in use must not stop the rest
                print(printable(f"    not removed: {exc}"))


def _prune_least_recent(client, free_gib: float, verb: str, dry_run: bool) -> None:
    """Build cache pruned least recently used first until free_gib are free (the engine's keep-storage).
    A record whose layers an image still holds frees nothing, so it goes round again, the last time
    keeping nothing unused."""
    for last in (False, False, True):
        short = (free_gib - _free_gib(client)) * 2**30
        if short <= 0:
            return
        cache = client.df().get("BuildCache") or []
        total = sum(r.get("Size") or 0 for r in cache if not r.get("InUse"))
        keep = 0 if last else max(0, int(total - short))
        print(
            printable(
                f"  {verb} least recently used build cache: {total / 1e9:.2f} GB unused, keeping {keep / 1e9:.2f} GB"
            )
        )
        if dry_run:
            return
        freed = client.api.prune_builds(keep_storage=keep, all=True).get("SpaceReclaimed") or 0
        print(f"    freed {int(freed) / 1e9:.2f} GB")
        if keep == 0:
            return


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
    clean.add_argument(
        "--keep-engine", action="store_true", help="leave the daemon running and the snapshot in place"
    )
    recl = sub.add_parser("reclaim")
    recl.add_argument("state", type=Path)
    recl.add_argument("--free-gib", type=float, required=True)
    recl.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "snapshot":
        return snapshot(args.state, args.dockerd_pid, args.base_created)
    if args.command == "reclaim":
        return reclaim(args.state, args.free_gib, args.dry_run)
    return cleanup(args.state, args.dry_run, args.tag_prefix, args.keep_engine)


if __name__ == "__main__":
    sys.exit(main())
