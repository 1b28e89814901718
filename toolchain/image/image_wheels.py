"""The Apex wheel and its manifest out of an image's /opt/apex, read from a created (never started)
container, for `build.py index --image TAG`."""

from __future__ import annotations

from pathlib import Path

from toolchain.errors import UsageError
from toolchain.image import docker_host
from verify.domain.layout import IMAGE, MANIFEST_NAME
from verify.runtime import atomic, input_files

APEX_DIR = str(IMAGE.root)


def copy_out(tag: str, dest: Path) -> Path:
    """dest/<wheel>.whl and dest/build-manifest.json from the image; UsageError when it has no wheel."""
    import docker
    from docker.errors import NotFound

    docker_host.ping()
    client = docker.from_env(timeout=300)
    image = docker_host.local_image(client, tag)
    container = client.containers.create(image.id)  # only its filesystem is read
    try:
        try:
            stream, _ = container.get_archive(APEX_DIR)
        except NotFound:
            raise UsageError(f"image {tag!r} has no {APEX_DIR}: not an image this toolchain built") from None
        data = input_files.read_chunks(stream, f"{tag}:{APEX_DIR}", input_files.ARCHIVE_STREAM)
        dest.mkdir(parents=True, exist_ok=True)
        for member, content in input_files.tar_files(data, f"{tag}:{APEX_DIR}", input_files.ARCHIVE_STREAM):
            if member.name.count("/") == 1 and (
                member.name.endswith(".whl") or member.name.endswith("/" + MANIFEST_NAME)
            ):
                atomic.write_bytes(dest / Path(member.name).name, content)
    finally:
        container.remove(force=True)
    if not any(dest.glob("*.whl")):
        raise UsageError(
            f"image {tag!r} has no wheel in {APEX_DIR} (built before the runtime images carried it); "
            "rebuild it with build.py image, or pass the build's out/ folder"
        )
    return dest
