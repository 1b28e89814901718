"""Which GPU code (SASS / PTX) an extension `.so` carries, read from its ELF fatbin in pure Python.

Runtime images have no cuobjdump, and loading the module to ask CUDA would run the very code under
suspicion, so this reads the bytes. Layout (little-endian), as nvcc 11.x-13.x writes it and as
documented by public reverse-engineering work (n-eiling/cuda-fatbin-decompression `fatbin-decompress.h`,
GrigoryEvko/nvopen-tools `fatbin/FORMAT_SPECIFICATION.md`), checked here against nvcc 13.0 output:

  ELF64 section `.nv_fatbin` (linked .so) or `__nv_relfatbin` (relocatable -rdc objects) holds one or
  more containers, each 8-byte aligned:
    container header, 16 bytes: u32 magic 0xBA55ED50 | u16 version (1) | u16 header_size (16)
                                | u64 fat_size (bytes of entries that follow the header)
    entry header (64 bytes; 80/96/112 with an extension for newer archs), then its payload:
      +0  u16 kind (1 = PTX, 2 = ELF/SASS cubin)   +4  u32 header_size   +8  u64 payload_size
      +16 u32 compressed_size                     +24 u16 code version minor, +26 u16 major
      +28 u32 arch (major*10 + minor: 80, 90, 100, 120, 121)
      +40 u64 flags: 0x1 64-bit, 0x10 Linux, 0x2000 LZ4 / 0x8000 zstd compressed,
                     0x100000 arch-specific ("sm_90a"), 0x200000 family-specific ("sm_100f")
    next entry = entry + header_size + payload_size.
Only headers are read: the payloads (often compressed) are never decompressed.
"""

from __future__ import annotations

import dataclasses
import io
import os
import struct
from pathlib import Path
from typing import BinaryIO

from verify.domain.arch import Arch
from verify.runtime import input_files

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
KIND_PTX = 1
KIND_ELF = 2
FLAG_COMPRESSED_LZ4 = 0x2000
FLAG_COMPRESSED_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a: runs on exactly that capability
FLAG_FAMILY_SPECIFIC = 0x200000  # sm_100f: runs on the same major, minor >= its own

_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHIIIQ")  # up to and including flags: 48 bytes


class FatbinError(ValueError):
    """The file is not an ELF we can read, or its fatbin is malformed."""


@dataclasses.dataclass(frozen=True, order=True)
class CodeTarget:
    kind: str  # "sass" | "ptx"
    arch: int  # major*10 + minor, e.g. 90
    variant: str = ""  # "" | "a" (arch-specific) | "f" (family-specific)
    compressed: bool = False

    @property
    def major(self) -> int:
        return self.arch // 10

    @property
    def minor(self) -> int:
        return self.arch % 10

    @property
    def name(self) -> str:
        prefix = "sm" if self.kind == "sass" else "compute"
        return f"{prefix}_{self.arch}{self.variant}"

    def runs_on(self, capability: tuple[int, int]) -> bool:
        major, minor = capability
        device = major * 10 + minor
        if self.variant == "a":  # arch-specific code runs on that exact capability only
            return self.arch == device
        if self.kind == "sass" or self.variant == "f":
            # cubins are binary compatible within a major version, upwards in minor
            return self.major == major and self.minor <= minor
        return self.arch <= device  # plain PTX is JIT-compiled for any newer device


@dataclasses.dataclass(frozen=True)
class FatbinTargets:
    targets: tuple[CodeTarget, ...]

    @property
    def sass(self) -> list[str]:
        return sorted({t.name for t in self.targets if t.kind == "sass"}, key=_arch_sort_key)

    @property
    def ptx(self) -> list[str]:
        return sorted({t.name for t in self.targets if t.kind == "ptx"}, key=_arch_sort_key)

    def to_json(self) -> dict:
        return {"sass": self.sass, "ptx": self.ptx}


@dataclasses.dataclass(frozen=True)
class Compatibility:
    compatible: bool
    via: str | None  # "sm_90" (native SASS) or "compute_80" (PTX JIT) or None
    message: str


def _arch_sort_key(name: str) -> tuple[tuple[int, int], str]:
    arch = Arch.from_nvcc_name(name)  # sm_90a, compute_100
    return (arch.capability if arch else (0, 0)), name


def capability_name(capability: tuple[int, int]) -> str:
    return Arch.from_capability(capability).sm


def arch_list_value(capability: tuple[int, int]) -> str:
    """The TORCH_CUDA_ARCH_LIST entry that builds native code for this device."""
    return str(Arch.from_capability(capability))


def _elf_sections(handle, path: Path) -> dict[str, tuple[int, int, int]]:
    """Section name -> (file offset, size, sh_type) of a little-endian ELF64 file."""
    ident = handle.read(64)
    if len(ident) < 64 or ident[:4] != b"\x7fELF":
        raise FatbinError(f"{path}: not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise FatbinError(
            f"{path}: only little-endian ELF64 is supported (class {ident[4]}, data {ident[5]})"
        )
    shoff = struct.unpack_from("<Q", ident, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if shoff == 0 or shnum == 0:
        return {}
    if shentsize < 64:
        raise FatbinError(f"{path}: bad ELF section header size {shentsize}")
    handle.seek(shoff)
    table = handle.read(shentsize * shnum)
    if len(table) < shentsize * shnum or shstrndx >= shnum:
        raise FatbinError(f"{path}: truncated ELF section header table")
    headers = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
    _, _, _, _, str_off, str_size = headers[shstrndx]
    handle.seek(str_off)
    names = handle.read(str_size)
    sections: dict[str, tuple[int, int, int]] = {}
    for name_off, sh_type, _flags, _addr, offset, size in headers:
        end = names.find(b"\0", name_off)
        name = names[name_off : end if end >= 0 else None].decode("ascii", "replace")
        sections[name] = (offset, size, sh_type)
    return sections


_SHT_DYNAMIC, _DT_NEEDED = 6, 1


def open_elf(source: str | os.PathLike | bytes) -> BinaryIO:
    """A handle on an ELF file's bytes: a path through the bounded reader (a regular file, at most
    input_files.EXTENSION_MODULE), or bytes already in hand (a wheel's member). FatbinError when the path
    cannot be used."""
    if isinstance(source, bytes):
        return io.BytesIO(source)
    try:
        return input_files.open_binary(source, input_files.EXTENSION_MODULE)
    except input_files.InputFileError as error:
        raise FatbinError(str(error)) from None


def needed_libraries(source: str | os.PathLike | bytes, name: str | None = None) -> list[str]:
    """The shared libraries an ELF64 file asks the loader for (its DT_NEEDED entries, as `readelf -d`
    lists them), read from .dynamic and .dynstr; [] for a file without them. FatbinError if not ELF.
    `source`: a path, or the file's bytes (then `name` names them in messages)."""
    path = Path(name or (os.fspath(source) if not isinstance(source, bytes) else "<bytes>"))
    with open_elf(source) as handle:
        sections = _elf_sections(handle, path)
        dynamic = next((v for v in sections.values() if v[2] == _SHT_DYNAMIC), None)
        strings = sections.get(".dynstr")
        if dynamic is None or strings is None:
            return []
        handle.seek(dynamic[0])
        table = handle.read(dynamic[1])
        handle.seek(strings[0])
        names = handle.read(strings[1])
    needed = []
    for tag, value in struct.iter_unpack("<qQ", table[: len(table) // 16 * 16]):
        if tag == 0:  # DT_NULL ends the table
            break
        if tag == _DT_NEEDED and value < len(names):
            end = names.find(b"\0", value)
            needed.append(names[value : end if end >= 0 else None].decode("ascii", "replace"))
    return needed


def parse_fatbin(blob: bytes) -> list[CodeTarget]:
    """Every entry of every container in a fatbin section's bytes."""
    targets: list[CodeTarget] = []
    pos = 0
    while pos + _CONTAINER.size <= len(blob):
        if blob[pos : pos + 8] == b"\0" * 8:  # alignment padding between containers
            pos += 8
            continue
        magic, _version, header_size, fat_size = _CONTAINER.unpack_from(blob, pos)
        if magic != FATBIN_MAGIC:
            raise FatbinError(f"bad fatbin magic {magic:#x} at offset {pos} (expected {FATBIN_MAGIC:#x})")
        entry = pos + header_size
        end = entry + fat_size
        if header_size < _CONTAINER.size or end > len(blob):
            raise FatbinError(f"fatbin container at offset {pos} overruns its section")
        while entry + _ENTRY.size <= end:
            (kind, _unk, entry_header, payload, _csize, _unk2, _vminor, _vmajor, arch, _name_off, _name_len,
             flags) = _ENTRY.unpack_from(blob, entry)  # fmt: skip
            if entry_header < _ENTRY.size:
                raise FatbinError(f"fatbin entry at offset {entry} has header size {entry_header}")
            if kind in (KIND_PTX, KIND_ELF):
                variant = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY_SPECIFIC else ""
                targets.append(
                    CodeTarget(
                        kind="ptx" if kind == KIND_PTX else "sass",
                        arch=arch,
                        variant=variant,
                        compressed=bool(flags & (FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD)),
                    )
                )
            entry += entry_header + payload
        pos = end + (-end % 8)
    return targets


def read_targets(path: str | os.PathLike) -> FatbinTargets | None:
    """The SASS/PTX targets compiled into `path`; None when it carries no GPU code at all (CPU-only)."""
    path = Path(path)
    try:
        with open_elf(path) as handle:
            sections = _elf_sections(handle, path)
            found = False
            targets: list[CodeTarget] = []
            for name in FATBIN_SECTIONS:
                if name not in sections:
                    continue
                offset, size, sh_type = sections[name]
                if sh_type == 8:  # SHT_NOBITS: no bytes in the file
                    continue
                found = True
                handle.seek(offset)
                try:
                    targets.extend(parse_fatbin(handle.read(size)))
                except FatbinError as exc:
                    raise FatbinError(f"{path}: section {name}: {exc}") from None
    except OSError as exc:
        raise FatbinError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not found:
        return None
    return FatbinTargets(tuple(sorted(set(targets))))


def compatibility(targets: FatbinTargets, capability: tuple[int, int]) -> Compatibility:
    """Can this device run the code in `targets`, and how (native SASS, or PTX JIT)?"""
    device = capability_name(capability)
    fix = f"rebuild with TORCH_CUDA_ARCH_LIST={arch_list_value(capability)}"
    sass = [t for t in targets.targets if t.kind == "sass" and t.runs_on(capability)]
    if sass:
        best = max(sass, key=lambda t: (t.arch, t.variant == "a"))
        return Compatibility(True, best.name, f"native SASS {best.name} runs on this GPU ({device})")
    ptx = [t for t in targets.targets if t.kind == "ptx" and t.runs_on(capability)]
    if ptx:
        best = max(ptx, key=lambda t: t.arch)
        return Compatibility(
            True,
            best.name,
            f"no SASS for {device}: the driver JIT-compiles PTX {best.name} on first use (slow start); {fix}",
        )
    built = ", ".join(targets.sass + targets.ptx) or "no GPU code"
    only = " only" if targets.targets else ""
    return Compatibility(False, None, f"arch mismatch: built for {built}{only}, this GPU is {device} — {fix}")
