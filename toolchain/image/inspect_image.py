"""What an image says about itself, without running it: labels from the image config, and the build
manifest and static report read from a created (never started) container with `get_archive`."""

from __future__ import annotations

from toolchain.image import docker_host
from toolchain.spec.image_labels import CELL, NAMESPACE, OCI
from verify.domain.layout import IMAGE
from verify.runtime import input_files

EMBEDDED = {
    "manifest": str(IMAGE.manifest),
    "static_report": str(IMAGE.static_report),
    "static_report_markdown": str(IMAGE.static_markdown),
}


def _read_file(container, path: str) -> str | None:
    from docker.errors import NotFound

    try:
        stream, _ = container.get_archive(path)
    except NotFound:
        return None
    data = input_files.read_chunks(stream, path, input_files.MANIFEST)
    for _, content in input_files.tar_files(data, path, input_files.MANIFEST):
        return content.decode("utf-8", errors="replace")
    return None


def _consistency(labels: dict[str, str], manifest: dict | None) -> list[str]:
    """Where the labels and the embedded manifest disagree (a manifest from another image)."""
    if not manifest:
        return []
    problems = []
    cell = labels.get(CELL)
    if cell and manifest.get("cell") and cell != manifest["cell"]:
        problems.append(f"label cell {cell} != manifest cell {manifest['cell']}")
    # the label is the ref the build asked for (APEX_REF: a commit, tag or branch); the manifest has
    # both that ref and the commit it resolved to, so a tag or branch is not a disagreement
    asked = labels.get(NAMESPACE + "apex.ref") or labels.get(
        NAMESPACE + "apex.commit"
    )  # .commit: older images
    apex = manifest.get("apex") or {}
    ref, commit = apex.get("ref"), apex.get("commit")
    if asked and (ref or commit) and asked != ref and not (commit and commit.startswith(asked)):
        problems.append(f"label apex.ref {asked} != manifest apex ref {ref} (commit {commit})")
    archs = labels.get(NAMESPACE + "archs")
    if archs and manifest.get("arch_list") and archs != manifest["arch_list"]:
        problems.append(f"label archs {archs} != manifest arch_list {manifest['arch_list']}")
    return problems


def inspect(tag: str) -> dict:
    """Labels, embedded manifest and static report of a local image; no container is started."""
    import docker

    docker_host.ping()
    client = docker.from_env(timeout=60)
    image = docker_host.local_image(client, tag)
    config = image.attrs.get("Config") or {}
    labels = dict(config.get("Labels") or {})
    result: dict = {
        "tag": tag,
        "id": image.id,
        "created": image.attrs.get("Created"),
        "size_bytes": image.attrs.get("Size"),
        "user": config.get("User") or "root",
        "cmd": config.get("Cmd"),
        "labels": {k[len(NAMESPACE) :]: v for k, v in sorted(labels.items()) if k.startswith(NAMESPACE)},
        "oci": {k[len(OCI) :]: v for k, v in sorted(labels.items()) if k.startswith(OCI)},
    }
    container = client.containers.create(image.id)  # created, never started: only its filesystem is read
    try:
        for key, path in EMBEDDED.items():
            text = _read_file(container, path)
            if text is not None and path.endswith(".json"):
                try:
                    result[key] = input_files.parse_json(text, path, input_files.MANIFEST)
                except input_files.InputFileError:
                    result[key] = {"error": f"{path} is not valid JSON"}
            else:
                result[key] = text
    finally:
        container.remove(force=True)
    manifest = result.get("manifest") if isinstance(result.get("manifest"), dict) else None
    # the commit Apex was really built from (the label holds only the ref that was asked for)
    result["apex_commit"] = ((manifest or {}).get("apex") or {}).get("commit")
    result["consistency_problems"] = _consistency(labels, manifest)
    return result
