"""`build.py clean` (make clean-images): remove what `build.py image` leaves in the engine.

A cold `make image CUDA=12.4` leaves ~13 GB: the image, the local Debian base it made, and BuildKit's
cache (the pip and ccache cache mounts, the layers of the steps that ran the project's scripts). Ours are
found by what marks them: images by the label every image built here carries (io.apex-toolchain.cell) or
by being a local base of compat.toml [local_base]; cache records by "apex-toolchain" in their description
(the cache mount ids apex-toolchain-pip/-ccache, the /run/apex-toolchain binds of the RUN steps). Cache
that names no project (a base image's layers, the devel stage's apt step) stays: `docker builder prune`
removes every project's. The selection is a pure function of the engine's API answers, so it is tested on
real shapes; removing goes through functions handed in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from toolchain.spec import image_labels

CACHE_MARKER = "apex-toolchain"


@dataclasses.dataclass(frozen=True)
class Item:
    id: str
    what: str  # tags, or the cache record's description
    size: int  # bytes


@dataclasses.dataclass(frozen=True)
class CleanPlan:
    images: tuple[Item, ...]
    cache: tuple[Item, ...]

    @property
    def size(self) -> int:
        return sum(i.size for i in (*self.images, *self.cache))


def select(
    images: Iterable[Mapping[str, Any]], cache: Iterable[Mapping[str, Any]], base_images: Iterable[str]
) -> CleanPlan:
    """Ours among `GET /images/json` entries and `GET /system/df`'s BuildCache records (not those in use)."""
    bases = set(base_images)
    ours = [
        Item(i["Id"], ", ".join(i.get("RepoTags") or []) or "<untagged>", int(i.get("Size") or 0))
        for i in images
        if image_labels.CELL in (i.get("Labels") or {}) or bases & set(i.get("RepoTags") or [])
    ]
    records = [
        Item(r["ID"], str(r.get("Description") or ""), int(r.get("Size") or 0))
        for r in cache
        if CACHE_MARKER in str(r.get("Description") or "") and not r.get("InUse")
    ]
    return CleanPlan(tuple(ours), tuple(records))


def remove(
    plan: CleanPlan, remove_image: Callable[[str], None], prune_cache: Callable[[str], int]
) -> tuple[int, list[str]]:
    """Images first (their layers then become unused cache), then each cache record by id. Returns the
    bytes the cache pruning reported and one line per thing that could not be removed."""
    problems: list[str] = []
    for image in plan.images:
        try:
            remove_image(image.id)
        except Exception as err:  # the engine's APIError, e.g. a container still uses it: say so, go on
            problems.append(f"image {image.what}: {str(err).splitlines()[0] if str(err) else err!r}")
    freed = 0
    for record in plan.cache:
        try:
            freed += prune_cache(record.id)
        except Exception as err:
            problems.append(f"cache {record.id[:12]}: {str(err).splitlines()[0] if str(err) else err!r}")
    return freed, problems


def human(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e8 else f"{size / 1e6:.0f} MB"
