"""One tag for every platform of a stack: an OCI image index made from the per-platform digests that were
pushed (by `build.py publish`, or by buildx with push-by-digest in CI), PUT under the shared tag
(Cell.tag: the cell id without its platform suffix). What `docker buildx imagetools create` does; the
registry calls are skopeo's (toolchain/image/registry_api.py), the index's content is decided here, so the
same code runs in CI and against the tests' local registry.

A per-platform push may itself be an index (buildx attaches SBOM and provenance as attestation manifests
beside the image): its entries are taken as they are, so the attestations stay reachable from the new index.
The platform each image really has (its config's os/architecture) must be its cell's: a digest recorded for
the wrong cell is refused, never published under the tag. The index has no timestamp: the same digests
give the same index digest (publishing twice changes nothing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from toolchain.errors import ToolchainError
from toolchain.image import registry_api
from verify.runtime import exit_codes

ATTESTATION = "vnd.docker.reference.type"  # buildx's annotation on an attestation manifest


class IndexRefused(ToolchainError):
    """The recorded digests do not make one image of these platforms: exit 1, nothing published."""

    exit_code = exit_codes.FAILED


@dataclass(frozen=True)
class PlatformImage:
    cell: str  # cell id
    platform: str  # "linux/arm64"
    digest: str  # what was pushed for it


@dataclass(frozen=True)
class ImageIndex:
    repository: str
    tag: str
    digest: str
    platforms: dict[str, str]  # platform -> the digest its entry names

    @property
    def ref(self) -> str:
        return f"{self.repository}@{self.digest}"


def platform_of(entry_platform: dict) -> str:
    parts = [entry_platform.get("os", ""), entry_platform.get("architecture", "")]
    if entry_platform.get("variant"):
        parts.append(entry_platform["variant"])
    return "/".join(parts)


def _entries(registry: registry_api.Registry, image: PlatformImage) -> list[dict]:
    try:
        manifest = registry.get_manifest(image.digest)
    except registry_api.NotFound:
        raise IndexRefused(
            f"{image.cell}: the registry holds no {image.digest} (recorded for {image.platform}); "
            "publish that cell again"
        ) from None
    if manifest.media_type in registry_api.INDEX_TYPES:
        entries = manifest.json().get("manifests") or []
        found = [
            platform_of(e.get("platform") or {})
            for e in entries
            if ATTESTATION not in (e.get("annotations") or {})
        ]
    else:
        config = registry.get_config(image.digest)
        found = [platform_of(config)]
        entry = {
            "mediaType": manifest.media_type,
            "digest": manifest.digest,
            "size": len(manifest.raw),
            "platform": {k: config[k] for k in ("os", "architecture", "variant") if config.get(k)},
        }
        entries = [entry]
    if found != [image.platform]:
        raise IndexRefused(
            f"{image.cell}: {image.digest} is an image for {', '.join(found) or 'no platform'}, not "
            f"the cell's {image.platform}; publish the cell's own image (build it with its platform)"
        )
    return entries


def make_index(repository: str, tag: str, images: list[PlatformImage]) -> ImageIndex:
    """PUT the index of `images` (one per platform) under REPOSITORY:TAG; returns what the registry stored."""
    platforms = [image.platform for image in images]
    if len(set(platforms)) != len(platforms):
        raise IndexRefused(
            f"{tag}: two cells record the same platform ({', '.join(sorted(platforms))}); one image "
            "per platform goes under a tag"
        )
    registry = registry_api.Registry(repository)
    entries: list[dict] = []
    named: dict[str, str] = {}
    for image in sorted(images, key=lambda i: i.platform):
        own = _entries(registry, image)
        entries += own
        named[image.platform] = next(
            e["digest"] for e in own if ATTESTATION not in (e.get("annotations") or {})
        )
    index = {"schemaVersion": 2, "mediaType": registry_api.OCI_INDEX, "manifests": entries}
    raw = json.dumps(index, separators=(",", ":"), sort_keys=True).encode()
    stored = registry.put_index(tag, raw)
    if stored != registry_api.digest_of(raw):
        raise IndexRefused(
            f"{repository}:{tag}: the registry stored the index as {stored}, not "
            f"{registry_api.digest_of(raw)} (what was sent); check the registry"
        )
    return ImageIndex(repository, tag, stored, named)
