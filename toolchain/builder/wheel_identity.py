"""A wheel that says which stack it was built for: the PEP 440 local version names the Apex commit, the CUDA
and the torch (`0.1+g6424da3.cu130.torch2.11`), `Requires-Dist: torch==2.11.*` makes pip and uv refuse it
on another torch minor, and the build manifest (and, after the gate, the static verify report) travel in
its `.dist-info`, where `python -m verify` finds them on any machine the wheel is installed on.

Apex's setup.py always writes `apex-0.1-<tags>.whl`, so two stacks' wheels collide; `stamp` rewrites the
wheel pip built (a zip: new dist-info folder name, METADATA's Version and torch pin, the extra files, a
RECORD with every hash) into the final name. Standard library only: it runs inside the build image.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import re
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from verify.domain import layout, stack_name
from verify.domain.commit import is_commit_sha, short_ref
from verify.domain.stack_name import cuda_tag, torch_minor  # one rule, shared with apex-verify install
from verify.layers import manifest
from verify.runtime import input_files

# what the dist-info carries besides pip's own files (verify/layers/manifest.py reads the first there)
MANIFEST_FILE = manifest.DIST_INFO_NAME
VERIFY_FILES = (layout.STATIC_REPORT_NAME, layout.STATIC_MARKDOWN_NAME)
# PEP 427: NAME-VERSION(-BUILD)?-PY-ABI-PLATFORM.whl, the build tag starting with a digit; pip refuses a name
# with fewer parts ("wrong number of parts"), so the index must not take one
_WHEEL_NAME = re.compile(
    r"(?P<name>[^-]+)-(?P<version>[^-]+)-(?P<tags>(?:\d[^-/\\]*-)?[^-/\\]+-[^-/\\]+-[^-/\\]+)\.whl", re.ASCII
)


@dataclasses.dataclass(frozen=True)
class WheelIdentity:
    """What a build's wheel is called and what it requires."""

    version: str  # 0.1+g6424da3.cu130.torch2.11
    torch_requirement: str  # torch==2.11.*
    stack: str  # torch2.11-cu130: the index's folder for this wheel

    @property
    def local(self) -> str:
        return self.version.partition("+")[2]

    def to_json(self) -> dict[str, str]:
        return {
            "version": self.version,
            "local": self.local,
            "torch_requirement": self.torch_requirement,
            "stack": self.stack,
        }


def source_label(commit: str | None, ref: str | None) -> str | None:
    """The local version's first part: g + 7 hex of the commit (git describe's habit), else a tag as text."""
    for value in (commit, ref):
        if value and is_commit_sha(value.lower()):
            return "g" + short_ref(value.lower())
    if ref:
        label = re.sub(r"[^a-z0-9]+", ".", ref.lower()).strip(".")
        return label or None
    return None


def identity(
    base_version: str, commit: str | None, ref: str | None, torch_version: str, torch_cuda: str | None
) -> WheelIdentity:
    """The local version from the build's facts; base_version is setup.py's ('0.1')."""
    minor, cuda = torch_minor(torch_version), cuda_tag(torch_cuda)
    parts = [p for p in (source_label(commit, ref), cuda, f"torch{minor}") if p]
    return WheelIdentity(
        version=f"{base_version.partition('+')[0]}+{'.'.join(parts)}",
        torch_requirement=f"torch=={minor}.*",
        stack=stack_name.stack_name(torch_version, torch_cuda),
    )


def is_stack_name(name: object) -> bool:
    """Whether `name` is a stack's folder name (`torch2.11-cu130`, `torch2.13-cpu`), ASCII digits only: the
    one rule verify.domain.stack_name holds, for toolchain/index/, which may not import verify/domain/."""
    return isinstance(name, str) and stack_name.parse(name) is not None


def parse_name(wheel_name: str) -> tuple[str, str, str]:
    """(distribution, version, tags) of a wheel file name."""
    found = _WHEEL_NAME.fullmatch(wheel_name)
    if not found:
        raise ValueError(f"{wheel_name!r} is not a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)")
    return found.group("name"), found.group("version"), found.group("tags")


def final_name(raw_wheel_name: str, ident: WheelIdentity) -> str:
    name, _, tags = parse_name(raw_wheel_name)
    return f"{name}-{ident.version}-{tags}.whl"


def dist_info_dir(archive: zipfile.ZipFile | input_files.ZipInput) -> str:
    """The one top-level `*.dist-info/` folder of a wheel."""
    names = archive.names() if isinstance(archive, input_files.ZipInput) else archive.namelist()
    found = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
    if len(found) != 1:
        raise ValueError(f"a wheel holds one .dist-info folder; this one holds {len(found)}: {found}")
    return found[0]


def metadata_with(metadata: str, version: str, torch_requirement: str) -> str:
    """METADATA with this Version and one torch requirement (setup.py's own torch line, if any, replaced)."""
    lines, out, placed = metadata.split("\n"), [], False
    head_end = next((i for i, line in enumerate(lines) if line == ""), len(lines))  # headers, then the body
    for line in lines[:head_end]:
        if line.startswith("Version:"):
            out.append(f"Version: {version}")
        elif re.match(r"^Requires-Dist:\s*torch\b(?![-_.a-z0-9])", line, re.I):
            continue
        else:
            out.append(line)
    for i, line in enumerate(out):
        if line.startswith("Version:") and not placed:
            out.insert(i + 1, f"Requires-Dist: {torch_requirement}")
            placed = True
            break
    return "\n".join(out + lines[head_end:])


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def stamp(
    wheel: Path, target: Path, version: str, torch_requirement: str, extra: Mapping[str, bytes]
) -> Path:
    """Write `target`: `wheel` with its dist-info renamed for `version`, METADATA's Version and torch pin set,
    `extra` files (name -> bytes) added to the dist-info (replacing same-named ones) and a fresh RECORD.
    Written beside the target and renamed over it: a reader never sees half a wheel. `wheel` may be `target`."""
    with input_files.open_zip(wheel) as source:
        old_info = dist_info_dir(source)
        name = old_info[: -len(".dist-info")].split("-", 1)[0]
        new_info = f"{name}-{version}.dist-info"
        entries: list[tuple[zipfile.ZipInfo, bytes]] = []
        for info in source.infos():
            top, _, rest = info.filename.partition("/")
            if top == old_info and rest in ("RECORD", *extra):
                continue
            data = source.read(info, input_files.WHEEL_MEMBER)
            if top == old_info:
                if rest == "METADATA":
                    data = metadata_with(data.decode("utf-8"), version, torch_requirement).encode("utf-8")
                info = _renamed(info, f"{new_info}/{rest}")
            entries.append((info, data))
    for rest, data in extra.items():
        info = zipfile.ZipInfo(f"{new_info}/{rest}", date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        entries.append((info, data))
    record = "".join(f"{_csv(i.filename)},{_record_hash(d)},{len(d)}\n" for i, d in entries if not i.is_dir())
    record += f"{new_info}/RECORD,,\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as out:
            for info, data in entries:
                out.writestr(info, data, compress_type=info.compress_type)
            out.writestr(
                _renamed(
                    zipfile.ZipInfo(f"{new_info}/RECORD", date_time=(1980, 1, 1, 0, 0, 0)),
                    f"{new_info}/RECORD",
                    0o644,
                ),
                record,
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _renamed(info: zipfile.ZipInfo, filename: str, mode: int | None = None) -> zipfile.ZipInfo:
    new = zipfile.ZipInfo(filename, date_time=info.date_time)
    new.compress_type = (
        info.compress_type
        if info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
        else zipfile.ZIP_DEFLATED
    )
    new.external_attr = (mode << 16) if mode is not None else info.external_attr
    return new


def _csv(path: str) -> str:
    return f'"{path}"' if "," in path or '"' in path else path


def read_dist_info(
    wheel: Path, names: tuple[str, ...] = (MANIFEST_FILE, *VERIFY_FILES, "METADATA")
) -> dict[str, bytes]:
    """The named files of a wheel's dist-info that it has (name -> bytes), through the bounded reader: a
    file that is not a wheel, or a member that would inflate past input_files.WHEEL_METADATA, is
    input_files.InputFileError before anything large is read."""
    with input_files.open_zip(wheel) as archive:
        info = dist_info_dir(archive)
        present = set(archive.names())
        return {
            n: archive.read(f"{info}/{n}", input_files.WHEEL_METADATA)
            for n in names
            if f"{info}/{n}" in present
        }
