"""What an image says about itself, without running it: labels from the image config, and the build
manifest and static report read from a created (never started) container with `get_archive`."""

from __future__ import annotations

import io
import json
import tarfile

from toolchain import engine
from toolchain.errors import UsageError

NAMESPACE = "io.apex-toolchain."
OCI = "org.opencontainers.image."
EMBEDDED = {
    "manifest": "/opt/apex/build-manifest.json",
    "static_report": "/opt/apex/verify-static.json",
    "static_report_markdown": "/opt/apex/verify-static.md",
}


def _read_file(container, path: str) -> str | None:
    from docker.errors import NotFound

    try:
        stream, _ = container.get_archive(path)
    except NotFound:
        return None
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
        member = next((m for m in archive.getmembers() if m.isfile()), None)
        return archive.extractfile(member).read().decode("utf-8", errors="replace") if member else None


def _consistency(labels: dict[str, str], manifest: dict | None) -> list[str]:
    """Where the labels and the embedded manifest disagree (a manifest from another image)."""
    if not manifest:
        return []
    problems = []
    cell = labels.get(NAMESPACE + "cell")
    if cell and manifest.get("cell") and cell != manifest["cell"]:
        problems.append(f"label cell {cell} != manifest cell {manifest['cell']}")
    asked = labels.get(NAMESPACE + "apex.commit")
    commit = (manifest.get("apex") or {}).get("commit")
    if asked and commit and not commit.startswith(asked) and not asked.startswith(commit):
        problems.append(f"label apex.commit {asked} != manifest commit {commit}")
    archs = labels.get(NAMESPACE + "archs")
    if archs and manifest.get("arch_list") and archs != manifest["arch_list"]:
        problems.append(f"label archs {archs} != manifest arch_list {manifest['arch_list']}")
    return problems


def inspect(tag: str) -> dict:
    """Labels, embedded manifest and static report of a local image; no container is started."""
    import docker
    from docker.errors import ImageNotFound

    engine.ping()
    client = docker.from_env(timeout=60)
    try:
        image = client.images.get(tag)
    except ImageNotFound:
        raise UsageError(f"image {tag!r} is not in the local Docker store; build it (build.py image) or docker pull it") from None
    config = image.attrs.get("Config") or {}
    labels = dict(config.get("Labels") or {})
    result: dict = {
        "tag": tag,
        "id": image.id,
        "created": image.attrs.get("Created"),
        "size_bytes": image.attrs.get("Size"),
        "user": config.get("User") or "root",
        "cmd": config.get("Cmd"),
        "labels": {k[len(NAMESPACE):]: v for k, v in sorted(labels.items()) if k.startswith(NAMESPACE)},
        "oci": {k[len(OCI):]: v for k, v in sorted(labels.items()) if k.startswith(OCI)},
    }
    container = client.containers.create(image.id)  # created, never started: only its filesystem is read
    try:
        for key, path in EMBEDDED.items():
            text = _read_file(container, path)
            if text is not None and path.endswith(".json"):
                try:
                    result[key] = json.loads(text)
                except ValueError:
                    result[key] = {"error": f"{path} is not valid JSON"}
            else:
                result[key] = text
    finally:
        container.remove(force=True)
    result["consistency_problems"] = _consistency(labels, result.get("manifest"))
    return result
