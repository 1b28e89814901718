"""`build.py publish`: push a built cell's image to a registry and record the digest it was pushed as, so
that every later pull names the image by content (`REPO@sha256:...`), never by a mutable tag.

The record, `out/cells/<cell id>/published.json` next to the cell's result.json:
    {"record_version": "1", "cell": ID, "repository": REPO, "tag": ID, "digest": "sha256:...",
     "ref": "REPO@sha256:...", "image_id": "sha256:...", "pushed_at": ..., "pushed_by": ...}
`pushed_by` is "build.py publish" (pushed here through the Docker SDK) or "buildx bake" (CI pushed with
buildx by digest, SBOM and provenance attached; `--bake-metadata` reads the digest from bake's metadata file).

`build.py publish --index` then puts every platform of a stack under its one tag (Cell.tag; an OCI index,
toolchain/image/oci_index.py) and rewrites each member cell's record to name the index: `digest`/`ref` become
the index's (what is signed and pulled: the engine picks the node's platform from it), `platform` and
`platform_digest` keep what was pushed for this cell, `index` lists the tag and every platform's digest.

Pulling back (`build.py pull`, toolchain/image/pull.py) takes the digest from this record or from --digest:
a malformed digest is exit 2; a digest the registry does not hold (changed by hand, or the image
deleted), or content that does not match its digest, is refused with exit 1; so is an image whose id
differs from the one published.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from toolchain.errors import EnvironmentUnavailable, ToolchainError, UsageError
from toolchain.timestamps import now
from verify.runtime import atomic, exit_codes, input_files
from verify.runtime import field_types as ft
from verify.runtime.messages import printable

RECORD_NAME = "published.json"
RECORD_VERSION = "1"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class DigestRefused(ToolchainError):
    """The registry does not hold what the digest names, or the content does not match it: exit 1."""

    exit_code = exit_codes.FAILED


def record_path(out: Path, cell_id: str) -> Path:
    return out / "cells" / cell_id / RECORD_NAME


def check_digest(digest: str, where: str) -> str:
    if not DIGEST.match(digest or ""):
        raise UsageError(
            f"{where} {digest!r}: not a sha256 image digest; pass sha256: and 64 hex digits "
            "(the digest `build.py publish` recorded)"
        )
    return digest


def read_record(out: Path, cell_id: str) -> dict[str, Any] | None:
    path = record_path(out, cell_id)
    if not path.exists():
        return None
    try:
        record = input_files.read_json(path, input_files.CELL_RESULT)
    except input_files.InputFileError as err:
        raise UsageError(f"unreadable publish record: {err}; or re-run build.py publish") from None
    if not isinstance(record, dict):
        raise UsageError(f"{path}: not a publish record (a JSON object); re-run build.py publish")
    check_digest(str(record.get("digest", "")), f"{path}: digest")
    return record


def _record(
    out: Path,
    cell_id: str,
    repository: str,
    digest: str,
    image_id: str | None,
    pushed_by: str,
    platform: str | None = None,
) -> dict:
    record = {
        "record_version": RECORD_VERSION,
        "cell": cell_id,
        "repository": repository,
        "tag": cell_id,
        "digest": check_digest(digest, "pushed digest"),
        "ref": f"{repository}@{digest}",
        "image_id": image_id,
        "pushed_at": now(),
        "pushed_by": pushed_by,
        "platform": platform,
        "platform_digest": digest,
    }
    write_record(out, cell_id, record)
    return record


def write_record(out: Path, cell_id: str, record: dict) -> None:
    """OUT/cells/<cell id>/published.json by the owned-tree rule: --out is the tool's folder, so a link
    planted there (the record, the cell's folder, cells/) is refused, naming it, never followed."""
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_json_in_tree(out, f"cells/{cell_id}/{RECORD_NAME}", record)


def publish_indexes(cells: list, repository: str, *, out: Path) -> tuple[list[dict], list[str]]:
    """For each stack among `cells` (cells grouped by Cell.tag): the index of its platforms' recorded digests
    under the tag, and each member's record rewritten to name it. A stack with a member that has no record
    (its build failed) or a wrong one is left as it was; the others go on. (index records, problems)."""
    from toolchain.image import oci_index

    stacks: dict[str, list] = {}
    for cell in cells:
        stacks.setdefault(cell.tag, []).append(cell)
    made, problems = [], []
    for tag, members in stacks.items():
        found = {cell.id: read_record(out, cell.id) for cell in members}
        missing = [cid for cid, record in found.items() if record is None]
        if missing:
            problems.append(
                f"{tag}: no publish record for {', '.join(missing)} (its build failed or was not pushed: "
                f"no {record_path(out, missing[0])}); the tag was not moved"
            )
            continue
        records = {cid: record for cid, record in found.items() if record is not None}
        other = sorted({r["repository"] for r in records.values() if r["repository"] != repository})
        if other:
            problems.append(
                f"{tag}: the records name {', '.join(other)}, not --registry {repository}; pass that "
                "registry, or publish the cells there"
            )
            continue
        images = [
            oci_index.PlatformImage(
                cell.id, cell.platform, records[cell.id].get("platform_digest") or records[cell.id]["digest"]
            )
            for cell in members
        ]
        try:
            index = oci_index.make_index(repository, tag, images)
        except oci_index.IndexRefused as refused:
            problems.append(str(refused))
            continue
        for cell in members:
            record = dict(
                records[cell.id],
                platform=cell.platform,
                platform_digest=index.platforms[cell.platform],
                digest=index.digest,
                ref=index.ref,
                tag=tag,
                index={"tag": tag, "digest": index.digest, "platforms": index.platforms, "made_at": now()},
            )
            write_record(out, cell.id, record)
        made.append(
            {"tag": tag, "ref": index.ref, "platforms": index.platforms, "cells": [c.id for c in members]}
        )
    return made, problems


def push(
    cell_id: str, repository: str, *, out: Path, local: str | None = None, platform: str | None = None
) -> dict[str, object]:
    """Tag the local image (default: the cell id) as REPOSITORY:<cell id>, push it, record the digest."""
    import docker
    from docker.errors import APIError, DockerException

    from toolchain.image import docker_host

    docker_host.ping()
    client = docker.from_env(timeout=600)
    image = docker_host.local_image(client, local or cell_id)
    image.tag(repository, tag=cell_id)
    digest, errors = None, []
    try:
        for event in client.images.push(repository, tag=cell_id, stream=True, decode=True):
            if "error" in event:
                errors.append(str(event.get("error")))
            aux = event.get("aux") or {}
            digest = aux.get("Digest", digest)
    except (APIError, DockerException, OSError) as err:
        errors.append(str(err).splitlines()[0] if str(err) else type(err).__name__)
    if errors or not digest:
        why = errors[-1] if errors else "the registry returned no digest"
        raise EnvironmentUnavailable(
            f"pushing {repository}:{cell_id} failed ({why}); check the registry is "
            "reachable and you are logged in (docker login)"
        )
    return _record(out, cell_id, repository, digest, image.id, "build.py publish", platform)


_DIGEST = ft.Str(max_len=256)  # its form is checked where the record is made (`not a sha256 image digest`)
# what the record takes from bake's metadata for one target (bake writes more keys)
_BAKE_ENTRY = ft.Record(
    {"containerimage.digest": _DIGEST, "containerimage.config.digest": ft.Nullable(_DIGEST)},
    required=("containerimage.digest",),
)


def from_bake_metadata(
    cell_id: str, target: str, repository: str, metadata: Path, *, out: Path, platform: str | None = None
) -> dict[str, object]:
    """Record what `docker buildx bake --push --metadata-file FILE` pushed for this cell's bake target."""
    try:
        data = input_files.read_json(metadata, input_files.CELL_RESULT)
    except input_files.InputFileError as err:
        raise UsageError(
            f"--bake-metadata unreadable: {err}; pass the file bake's --metadata-file wrote"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(
            f"--bake-metadata {metadata}: not bake metadata (a JSON object of targets); "
            "pass the file bake's --metadata-file wrote"
        )
    entry = data.get(target)
    if not isinstance(entry, dict) or "containerimage.digest" not in entry:
        raise UsageError(
            f"--bake-metadata {metadata}: no pushed digest for bake target {target!r} (targets: "
            f"{', '.join(printable(k) for k in sorted(data)) or 'none'}); bake this cell with --push"
        )
    problems = ft.check(entry, _BAKE_ENTRY, target)
    if problems:  # a list or a number where a digest belongs: named, never used
        raise UsageError(
            f"--bake-metadata {metadata}: not bake metadata ({ft.summary(problems)}); pass the file bake's "
            "--metadata-file wrote"
        )
    return _record(
        out,
        cell_id,
        repository,
        entry["containerimage.digest"],
        entry.get("containerimage.config.digest"),
        "buildx bake",
        platform,
    )


def refusal(reason: str, ref: str) -> DigestRefused | None:
    """A pull failure that means "not the published image": exit 1 instead of retrying or exit 3."""
    low = reason.lower()
    if "manifest unknown" in low or "not found" in low:
        return DigestRefused(
            f"refusing {ref}: the registry holds no image with this digest (the digest was changed, "
            "or the image deleted); use the digest build.py publish recorded, or publish again"
        )
    if "verification failed" in low or "digest mismatch" in low or "does not match" in low:
        return DigestRefused(
            f"refusing {ref}: the registry's content does not match the digest ({reason}); "
            "the image was tampered with in the registry: publish it again"
        )
    return None
