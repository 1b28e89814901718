"""The Apex build's ccache carried across builds as a plain directory, for CI caches that cannot see inside
BuildKit: the Actions cache exporter drops cache mounts (docker/build-push-action#1011, moby/buildkit#3011),
so every weekly rebuild would compile cold.

Around the image build, in the same BuildKit builder:
  import: DIR (e.g. restored by actions/cache) -> the build context's build-cache/ccache -> docker/Dockerfile's
          ccache-import target makes it the content of the apex-build step's ccache mount (CCACHE_MOUNT);
  build:  the apex-build step compiles through ccache in that mount (hits for every unit DIR already had);
  export: the ccache target (the mount as a plain directory) -> `--output type=local` -> a sibling of DIR,
          then swapped in for DIR (the old one is removed only after the new one is complete).
Why a directory and not sccache's Actions backend: it works with any CI cache (actions/cache, a bucket, a
runner's disk), needs no credentials inside the build, and ccache is what the builder already uses.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from pathlib import Path
from typing import overload

from toolchain.errors import UsageError

# docker/Dockerfile's CCACHE_MOUNT: `shared` is every build's mount (what bake uses: CI's fresh builder has it
# empty, so `build.py ccache import` fills it); `carried` is `build.py image --ccache-dir`'s own, so that on a
# long-lived daemon the build is exactly as warm as DIR, never warmed by other builds' objects.
MOUNTS = ("shared", "carried")
SEED = Path("build-cache") / "ccache"  # where the carried directory sits in the build context
IMPORT_TARGET, EXPORT_TARGET = "ccache-import", "ccache"


@dataclasses.dataclass(frozen=True)
class CarriedCache:
    """What one directory of carried ccache holds: counted before the import and after the export."""

    path: str
    files: int
    bytes: int

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@overload
def check_dir(path: Path, option: str = ...) -> Path: ...


@overload
def check_dir(path: None, option: str = ...) -> None: ...


def check_dir(path: Path | None, option: str = "--ccache-dir") -> Path | None:
    """DIR may be missing (a first run: created, empty) or a directory; anything else is exit 2."""
    if path is None:
        return None
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"{option} {path}: not a directory; pass the directory the CI cache restores "
            "(it is created when missing)"
        )
    return path


def check_mount(mount: str) -> str:
    if mount not in MOUNTS:
        raise UsageError(f"--ccache-mount {mount!r}: use {' or '.join(MOUNTS)}")
    return mount


def count(path: Path) -> CarriedCache:
    files = size = 0
    if path.is_dir():
        for entry in path.rglob("*"):
            if entry.is_file() and not entry.is_symlink():
                files += 1
                size += entry.stat().st_size
    return CarriedCache(str(path), files, size)


def stage_seed(context: Path, ccache_dir: Path | None) -> Path:
    """Put DIR's content (none when DIR is missing or None) at build-cache/ccache in the private context."""
    seed = context / SEED
    if seed.exists():
        shutil.rmtree(seed)
    if ccache_dir is not None and ccache_dir.is_dir():
        shutil.copytree(ccache_dir, seed, symlinks=True)
    else:
        seed.mkdir(parents=True)
    return seed


def carry_args(mount: str) -> dict[str, str]:
    """The build args of all three builds: one cache mount, and a fresh id so that neither the import nor
    the export is answered from BuildKit's layer cache."""
    return {"CCACHE_MOUNT": check_mount(mount), "CCACHE_CARRY_ID": uuid.uuid4().hex}


def local_output(command: list[str], dest: Path) -> list[str]:
    """A build command (buildkit_build.build_command) turned into one that writes the target's files to DEST: no
    image tag, no --load (buildx refuses --load with --output)."""
    out, skip = [], False
    for word in command[:-1]:
        if skip:
            skip = False
            continue
        if word == "--tag":
            skip = True
            continue
        if word != "--load":
            out.append(word)
    return [*out, "--output", f"type=local,dest={dest}", command[-1]]


def export_dest(ccache_dir: Path) -> Path:
    return ccache_dir.parent / f".{ccache_dir.name}.export-{uuid.uuid4().hex[:8]}"


def swap_in(new: Path, ccache_dir: Path) -> None:
    """Replace DIR by the exported NEW (same filesystem: siblings). DIR is never half-written: NEW is
    complete before the renames, and the old content is removed last."""
    old = None
    if ccache_dir.exists():
        old = ccache_dir.parent / f".{ccache_dir.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(ccache_dir, old)
    os.rename(new, ccache_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
