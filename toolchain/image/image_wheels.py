"""The Apex wheel and its manifest out of an image's /opt/apex, read from a created (never started)
container, for `build.py index --image TAG`."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from toolchain.errors import UsageError
from toolchain.image import docker_host
from verify.domain.layout import IMAGE, MANIFEST_NAME

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
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            wanted = [
                m
                for m in archive.getmembers()
                if m.isfile()
                and "/" in m.name
                and m.name.count("/") == 1
                and (m.name.endswith(".whl") or m.name.endswith("/" + MANIFEST_NAME))
            ]
            dest.mkdir(parents=True, exist_ok=True)
            for member in wanted:
                file = archive.extractfile(member)
                assert file is not None  # a regular file's member always has one
                (dest / Path(member.name).name).write_bytes(file.read())
    finally:
        container.remove(force=True)
    if not any(dest.glob("*.whl")):
        raise UsageError(
            f"image {tag!r} has no wheel in {APEX_DIR} (built before the runtime images carried it); "
            "rebuild it with build.py image, or pass the build's out/ folder"
        )
    return dest
