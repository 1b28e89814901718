"""The matrix for CI systems: a GitHub Actions `fromJson` matrix and a `docker buildx bake` definition.

Both are generated from the validated cells, so CI never holds a second copy of the matrix: a cell
added to matrix.toml appears in the next workflow run, and a cell that fails validation fails the
generator (exit 2) instead of a build.
"""

from __future__ import annotations

import re
from typing import TypedDict

from toolchain.errors import UsageError
from toolchain.spec import image_labels, targets
from toolchain.spec.cell import Cell
from toolchain.spec.cell_fields import REPOSITORY_RE
from verify.runtime.messages import shown

CACHE_KINDS = ("gha", "registry", "none")
_BAKE_NAME = re.compile(r"[^A-Za-z0-9_-]")
# GitHub runners per docker platform, so every image builds natively (no QEMU): hosted runners for
# the build (`ubuntu-24.04-arm` is GitHub's hosted arm64 Linux runner), self-hosted GPU runners for
# the GPU verify (`ARM64` is the architecture label every arm64 self-hosted runner carries).
BUILD_RUNNERS = {"linux/amd64": "ubuntu-24.04", "linux/arm64": "ubuntu-24.04-arm"}
GPU_RUNNERS = {
    "linux/amd64": ["self-hosted", "linux", "gpu"],
    "linux/arm64": ["self-hosted", "linux", "gpu", "ARM64"],
}


def check_repository(value: str | None, option: str) -> None:
    """--registry / --cache-ref name an image repository (no tag: the cell id is the tag); exit 2 if not."""
    if value is not None and not REPOSITORY_RE.match(value.rstrip("/")):
        raise UsageError(
            f"{option} {shown(value)}: not an image repository (lower-case [host[:port]/]path, no tag "
            "or spaces); pass e.g. ghcr.io/acme/apex or 127.0.0.1:5000/apex"
        )


class GhCellJSON(TypedDict):
    """One `include` entry of gh-matrix: a cell as the build workflow's jobs use it."""

    cell: str
    target: str
    id: str
    image: str
    cuda: str
    torch: str
    python: str
    os: str
    archs: str
    platform: str
    tag: str
    stack_artifact: str
    runner: str
    gpu_runner: list[str]
    cache_scope: str


class GhMatrixJSON(TypedDict):
    include: list[GhCellJSON]


class GhStackJSON(TypedDict):
    """One `include` entry of gh-matrix --stacks: a registry tag and the cells under it."""

    tag: str
    cells: str
    platforms: str
    artifact: str


class GhStacksJSON(TypedDict):
    include: list[GhStackJSON]


class BakeGroupJSON(TypedDict):
    targets: list[str]


# one bake target (a cell); the cache keys are not identifiers, hence the functional form
BakeTargetJSON = TypedDict(
    "BakeTargetJSON",
    {
        "context": str,
        "dockerfile": str,
        "target": str,
        "args": dict[str, str],
        "labels": dict[str, str],
        "tags": list[str],
        "platforms": list[str],
        "output": list[str],
        "cache-from": list[str],
        "cache-to": list[str],
    },
    total=False,
)


class BakeJSON(TypedDict):
    """docker-bake.json: the `default` group and one target per cell."""

    group: dict[str, BakeGroupJSON]
    target: dict[str, BakeTargetJSON]


def image_ref(cell: Cell, registry: str | None) -> str:
    """`ghcr.io/org/apex:<tag>` (Cell.tag: one for all the stack's platforms), or the bare cell id for a local image."""
    return f"{registry.rstrip('/')}:{cell.tag}" if registry else cell.id


def gh_matrix(cells: list[Cell], registry: str | None = None) -> GhMatrixJSON:
    """`strategy.matrix` for GitHub Actions: one `include` entry per cell (use with fromJson). `target` is
    the cell's bake target (bake_target_name): the workflow asks bake for it, never for `cell`."""
    names = bake_target_names(cells)
    return {
        "include": [
            {
                "cell": cell.name,
                "target": names[cell.name],
                "id": cell.id,
                "image": image_ref(cell, registry),
                "cuda": cell.cuda,
                "torch": cell.torch,
                "python": cell.python,
                "os": cell.os,
                "archs": cell.arch_list,
                "platform": cell.platform,
                "tag": cell.tag,  # the registry tag: shared by the stack's platforms (publish-index)
                "stack_artifact": stack_artifact(cell.tag),  # the index job's records for that tag
                "runner": BUILD_RUNNERS[cell.platform],
                "gpu_runner": GPU_RUNNERS[cell.platform],
                # one BuildKit cache per cell: cells never evict each other's layers
                "cache_scope": cell.id,
            }
            for cell in cells
        ]
    }


def gh_stacks(cells: list[Cell]) -> GhStacksJSON:
    """`strategy.matrix` for the index job: one entry per registry tag, naming the cells (one per platform)
    whose digests `build.py publish-index` puts under it."""
    stacks: dict[str, list[Cell]] = {}
    for cell in cells:
        stacks.setdefault(cell.tag, []).append(cell)
    return {
        "include": [
            {
                "tag": tag,
                "cells": " ".join(c.name for c in members),
                "platforms": " ".join(c.platform for c in members),
                "artifact": stack_artifact(tag),
            }
            for tag, members in stacks.items()
        ]
    }


def stack_artifact(tag: str) -> str:
    """The artifact name the index job uploads a stack's rewritten publish records under."""
    return "records-" + _BAKE_NAME.sub("_", tag)


def bake_target_name(cell: Cell) -> str:
    """The one naming rule between matrix cells and bake targets: bake allows [A-Za-z0-9_-], so every
    other character of the cell name becomes `_` (cell `cu12.4` -> target `cu12_4`). gh-matrix,
    bake and `publish --bake-metadata` all name a cell's target through this function."""
    return _BAKE_NAME.sub("_", cell.name)


def bake_target_names(cells: list[Cell]) -> dict[str, str]:
    """{cell name: bake target}; two cells that would share a target are a usage error (exit 2)."""
    names: dict[str, str] = {}
    for cell in cells:
        target = bake_target_name(cell)
        clash = next((other for other, t in names.items() if t == target), None)
        if clash:
            raise UsageError(
                f"cells {clash} and {cell.name} both become bake target {target!r} (a target name "
                "has only letters, digits, '_' and '-'); rename one of them in the matrix"
            )
        names[cell.name] = target
    return names


def bake(
    cells: list[Cell],
    *,
    registry: str | None = None,
    target: str = "runtime",
    cache: str = "none",
    cache_ref: str | None = None,
    push_by_digest: bool = False,
) -> BakeJSON:
    """A docker-bake.json: one target per cell with its build args, labels and tag(s), grouped as `default`.

    `docker buildx bake -f docker-bake.json [--push] [TARGET...]` then builds the matrix on whatever
    BuildKit builders are configured (local, remote, Kubernetes), with no scheduler of ours.
    """
    entries: dict[str, BakeTargetJSON] = {}
    names = bake_target_names(cells)
    for cell in cells:
        args = targets.build_args(cell.build_args(), target, cell.base_route)
        entry: BakeTargetJSON = {
            "context": ".",
            "dockerfile": "docker/Dockerfile",
            "target": target,
            "args": {
                k: v for k, v in args.items() if k not in image_labels.LABEL_ONLY_ARGS
            },  # as `build.py image` passes
            "labels": image_labels.for_image(target, args),  # the ones `build.py image` gives
            "tags": [image_ref(cell, registry)],
            "platforms": [cell.platform],
        }
        if push_by_digest and registry:
            # untagged: the stack's tag is the OCI index publish-index makes from every platform's digest
            del entry["tags"]
            entry["output"] = [
                f"type=image,name={registry.rstrip('/')},push-by-digest=true,name-canonical=true,push=true"
            ]
        if cache == "gha":
            entry["cache-from"] = [f"type=gha,scope={cell.id}"]
            entry["cache-to"] = [f"type=gha,scope={cell.id},mode=max"]
        elif cache == "registry":
            ref = cache_ref or (f"{registry.rstrip('/')}-cache" if registry else None)
            if ref:
                entry["cache-from"] = [f"type=registry,ref={ref}:{cell.id}"]
                entry["cache-to"] = [f"type=registry,ref={ref}:{cell.id},mode=max"]
        entries[names[cell.name]] = entry
    return {"group": {"default": {"targets": list(entries)}}, "target": entries}
