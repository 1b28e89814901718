"""Which manylinux tag a wheel's extension modules really satisfy (PEP 600: manylinux_2_X runs on glibc >= 2.X).

A module asks the loader for versioned symbols: `memcpy@GLIBC_2.14`, `std::...@GLIBCXX_3.4.30`. The ELF
section `.gnu.version_r` lists, per library the module needs, every version it asks of it (what
`readelf -V` and `objdump -T` show, and what auditwheel's `elf_find_versioned_symbols` reads); `.dynsym` with
`.gnu.version` says which symbol asks which version. The tag is manylinux_2_{highest GLIBC minor}_{arch},
raised to the first policy whose GLIBCXX/CXXABI/GCC limits (toolchain/data/manylinux_policy.toml) admit the
C++ runtime versions the modules ask for. Versions asked of torch's, c10's, CUDA's and the driver's libraries
are left out, as the anchors' auditwheel runs exclude them: torch's wheel brings those libraries.

Our own reader, not `auditwheel show`: show has no --exclude, so it would constrain every Apex wheel (it links
libtorch.so and libc10.so, which no policy whitelists) to linux_x86_64; and the index then needs pyelftools in
every environment that publishes. Standard library only; ELF64 little-endian (x86_64, aarch64), as
verify.layers.fatbin reads.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import io
import re
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the build extra's backport
    import tomli as tomllib

from toolchain.builder import wheel_identity
from verify.layers import fatbin
from verify.runtime import atomic, input_files

POLICY = Path(__file__).resolve().parents[1] / "data" / "manylinux_policy.toml"
MACHINES = {62: "x86_64", 183: "aarch64"}  # ELF e_machine: EM_X86_64, EM_AARCH64
CXX_FAMILIES = ("GLIBCXX", "CXXABI", "GCC")  # libstdc++'s and libgcc_s's version families
# the loader itself: auditwheel skips it too (its versions are glibc's, asked through libc)
_LOADERS = ("ld-linux*", "ld64.so.*")
LEGACY_TAGS = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
FIX = (
    "build it on an old-glibc base (PyTorch's manylinux_2_28 builder image, pytorch/manylinux2_28-builder) "
    "so its modules ask for older symbol versions"
)

_SHT_DYNSYM, _SHT_VERNEED, _SHT_VERSYM = 11, 0x6FFFFFFE, 0x6FFFFFFF
_VERNEED = struct.Struct("<HHIII")  # vn_version, vn_cnt, vn_file, vn_aux, vn_next
_VERNAUX = struct.Struct("<IHHII")  # vna_hash, vna_flags, vna_other, vna_name, vna_next
_SYM = struct.Struct("<IBBHQQ")  # st_name, st_info, st_other, st_shndx, st_value, st_size
_NUMERIC = re.compile(r"(?P<family>[A-Z]+)_(?P<version>\d+(?:\.\d+)*)", re.ASCII)

Version = tuple[int, ...]


def _version(text: str) -> Version:
    return tuple(int(x) for x in text.split("."))


def _text(version: Version) -> str:
    return ".".join(map(str, version))


@dataclasses.dataclass(frozen=True)
class ManylinuxPolicy:
    """One manylinux policy's limits for one architecture."""

    glibc: Version  # (2, 28)
    limits: dict[str, Version]  # GLIBCXX / CXXABI / GCC -> the highest version allowed
    named: frozenset[str]  # non-numeric versions allowed (CXXABI_TM_1)

    def admits(self, family: str, version: Version) -> bool:
        return version <= self.limits[family]


def policies(arch: str, path: Path = POLICY) -> list[ManylinuxPolicy]:
    """The policies for `arch`, oldest glibc first; [] for an architecture the table does not know."""
    rows = tomllib.loads(input_files.read_shipped_text(path)).get(arch) or []
    return sorted(
        (
            ManylinuxPolicy(
                glibc=_version(row["glibc"]),
                limits={f: _version(row[f]) for f in CXX_FAMILIES},
                named=frozenset(row["named"]),
            )
            for row in rows
        ),
        key=lambda p: p.glibc,
    )


@dataclasses.dataclass(frozen=True)
class ModuleVersions:
    """What one ELF file asks of each library: library -> version -> the symbols bound to it."""

    arch: str | None  # None for a machine MACHINES does not name
    needs: dict[str, dict[str, list[str]]]


def read_versions(path: str | Path) -> ModuleVersions:
    """The versions (and the symbols behind each) an ELF64 little-endian file asks of its libraries, from
    .gnu.version_r, .dynsym and .gnu.version. fatbin.FatbinError if it is not one."""
    try:
        data = input_files.read_bytes(path, input_files.EXTENSION_MODULE)
    except input_files.InputFileError as error:
        raise fatbin.FatbinError(str(error)) from None
    return versions_of(data, Path(path))


def versions_of(data: bytes, path: Path) -> ModuleVersions:
    """read_versions of an ELF file's bytes already in hand (a wheel's member); `path` names them."""
    with io.BytesIO(data) as handle:
        sections = fatbin._elf_sections(handle, path)  # raises for a non-ELF or an ELF32 / big-endian file
    machine = struct.unpack_from("<H", data, 0x12)[0]
    strings = sections.get(".dynstr")
    by_type = {kind: (offset, size) for offset, size, kind in sections.values()}
    if strings is None or _SHT_VERNEED not in by_type:
        return ModuleVersions(MACHINES.get(machine), {})
    names = data[strings[0] : strings[0] + strings[1]]
    needs, by_index = _version_needs(data, by_type[_SHT_VERNEED], names)
    if _SHT_DYNSYM in by_type and _SHT_VERSYM in by_type:
        sym_off, sym_size = by_type[_SHT_DYNSYM]
        ver_off = by_type[_SHT_VERSYM][0]
        for i in range(sym_size // _SYM.size):
            name_off, _, _, shndx, _, _ = _SYM.unpack_from(data, sym_off + i * _SYM.size)
            index = struct.unpack_from("<H", data, ver_off + 2 * i)[0] & 0x7FFF  # bit 15: hidden
            if shndx == 0 and index in by_index:  # undefined here: asked of a library
                library, version = by_index[index]
                needs[library][version].append(_name_at(names, name_off))
    for versions in needs.values():
        for symbols in versions.values():
            symbols.sort()
    return ModuleVersions(MACHINES.get(machine), needs)


def _name_at(names: bytes, offset: int) -> str:
    end = names.find(b"\0", offset)
    return names[offset : end if end >= 0 else None].decode("ascii", "replace")


def _version_needs(
    data: bytes, section: tuple[int, int], names: bytes
) -> tuple[dict[str, dict[str, list[str]]], dict[int, tuple[str, str]]]:
    """(library -> version -> [], version index -> (library, version)) from .gnu.version_r's entries."""
    needs: dict[str, dict[str, list[str]]] = {}
    by_index: dict[int, tuple[str, str]] = {}  # vna_other: the index .gnu.version gives each symbol
    start, size = section
    at = start
    while start <= at < start + size:
        _, count, file_off, aux, following = _VERNEED.unpack_from(data, at)
        library, entry = _name_at(names, file_off), at + aux
        for _ in range(count):
            _, _, other, name_off, next_aux = _VERNAUX.unpack_from(data, entry)
            version = _name_at(names, name_off)
            needs.setdefault(library, {}).setdefault(version, [])
            by_index[other] = (library, version)
            if not next_aux:
                break
            entry += next_aux
        if not following:
            break
        at += following
    return needs, by_index


@dataclasses.dataclass(frozen=True)
class Portability:
    """What a wheel's modules ask of the system, and the manylinux tag that follows (None when none does)."""

    arch: str | None
    glibc: Version | None  # the glibc the tag names: (2, 28)
    highest: dict[str, str]  # GLIBC / GLIBCXX / CXXABI / GCC -> the highest version asked ("2.26")
    symbols: dict[str, list[str]]  # "GLIBC_2.26" -> the symbols that ask it (the highest of each family)
    modules: dict[str, list[str]]  # module file -> "libc.so.6: GLIBC_2.14" entries (what the check found)
    problems: tuple[str, ...]

    @property
    def tag(self) -> str | None:
        if self.glibc is None or self.arch is None or self.problems:
            return None
        return f"manylinux_{self.glibc[0]}_{self.glibc[1]}_{self.arch}"

    @property
    def glibc_text(self) -> str | None:
        return _text(self.glibc) if self.glibc else None

    def found(self) -> str:
        """The highest versions asked, with the symbols behind them: for a message."""
        parts = []
        for family in ("GLIBC", *CXX_FAMILIES):
            if family in self.highest:
                name = f"{family}_{self.highest[family]}"
                shown = self.symbols.get(name, [])
                parts.append(
                    name + (f" ({', '.join(shown[:3])}{', ...' if len(shown) > 3 else ''})" if shown else "")
                )
        return ", ".join(parts) or "no versioned glibc or C++ runtime symbol"

    def to_json(self) -> dict:
        return {
            "manylinux": self.tag,
            "glibc": self.glibc_text,
            "highest_versions": self.highest,
            "symbols": self.symbols,
            "versions_needed": self.modules,
            "policy": POLICY.name,
        }


def decide(
    arch: str | None,
    asked: dict[str, set[Version]],
    other: set[str],
    table: list[ManylinuxPolicy] | None = None,
) -> tuple[Version | None, list[str]]:
    """(the glibc the tag names, problems) for the versions asked: family -> numeric versions, and the
    non-numeric names (GLIBC_PRIVATE, CXXABI_TM_1). Pure: the tests feed it directly."""
    if arch is None:
        return None, ["its modules are for a machine other than x86_64 or aarch64; no manylinux policy here"]
    table = policies(arch) if table is None else table
    if not table:
        return None, [f"no manylinux policy for {arch} in {POLICY.name}"]
    asked_glibc = max(asked.get("GLIBC", set()), default=table[0].glibc)[:2]  # GLIBC_2.2.5 -> 2.2
    glibc = max(asked_glibc, table[0].glibc)  # below the oldest policy: that policy's glibc
    problems = [
        f"it asks for {name}, which no manylinux policy allows (glibc-internal, or newer than {POLICY.name})"
        for name in sorted(other)
        if name.startswith("GLIBC")
    ]
    cxx_named = {name for name in other if not name.startswith("GLIBC")}

    def governing(x: Version) -> ManylinuxPolicy:
        return [p for p in table if p.glibc <= x][-1]

    for x in [glibc, *(p.glibc for p in table if p.glibc > glibc)]:  # raised to a policy the C++ fits
        policy = governing(x)
        if cxx_named <= policy.named and all(
            policy.admits(f, v) for f in CXX_FAMILIES for v in asked.get(f, ())
        ):
            return x, problems
    newest = table[-1]
    beyond = [
        f"{f}_{_text(max(asked[f]))}"
        for f in CXX_FAMILIES
        if asked.get(f) and max(asked[f]) > newest.limits[f]
    ]
    beyond += sorted(cxx_named - newest.named)
    return None, [*problems, f"it asks for {', '.join(beyond)}, beyond every policy in {POLICY.name}"]


def _is_shared_object(member: str) -> bool:
    return member.endswith(".so") or ".so." in Path(member).name


def shared_objects(wheel: Path) -> Iterator[tuple[str, bytes, frozenset[str]]]:
    """Each shared object of the wheel: its member name, its bytes (the inflated size checked before inflating:
    input_files.WHEEL_MEMBER) and the file names of every shared object the wheel holds (a module may link
    another one it ships)."""
    with input_files.open_zip(wheel) as archive:
        shared = [n for n in archive.names() if _is_shared_object(n)]
        own = frozenset(Path(n).name for n in shared)
        for member in shared:
            yield member, archive.read(member, input_files.WHEEL_MEMBER), own


def wheel_portability(wheel: Path, excluded: tuple[str, ...]) -> Portability:
    """Read every shared object in the wheel; `excluded` are fnmatch patterns of the libraries whose versions
    do not count (torch's, CUDA's, the driver's), besides the ones the wheel holds itself."""
    modules: dict[str, list[str]] = {}
    asked: dict[str, set[Version]] = {}
    symbols: dict[str, set[str]] = {}
    other: set[str] = set()
    arches: set[str | None] = set()
    problems: list[str] = []
    for member, data, own in shared_objects(wheel):
        try:
            found = versions_of(data, Path(member))
        except (
            fatbin.FatbinError,
            struct.error,
            ValueError,
            IndexError,
        ) as error:  # a damaged ELF: named
            problems.append(f"{member} is not an ELF64 file this check reads ({error})")
            continue
        arches.add(found.arch)
        modules[member] = []
        for library, versions in sorted(found.needs.items()):
            skip = library in own or any(fnmatch.fnmatchcase(library, p) for p in (*excluded, *_LOADERS))
            for version, names in sorted(versions.items()):
                modules[member].append(f"{library}: {version}" + (" (excluded)" if skip else ""))
                if skip:
                    continue
                numeric = _NUMERIC.fullmatch(version)
                if numeric and numeric["family"] in ("GLIBC", *CXX_FAMILIES):
                    asked.setdefault(numeric["family"], set()).add(_version(numeric["version"]))
                    symbols.setdefault(version, set()).update(names)
                elif version.startswith(("GLIBC", "CXXABI", "GCC")):
                    other.add(version)
    if len(arches) > 1:
        problems.append(f"its modules are for more than one machine: {sorted(map(str, arches))}")
    arch = next(iter(arches)) if len(arches) == 1 else None
    glibc, found_problems = decide(arch, asked, other) if arches else (None, ["it holds no shared object"])
    highest = {f: _text(max(v)) for f, v in asked.items()}
    return Portability(
        arch=arch,
        glibc=glibc,
        highest=highest,
        symbols={f"{f}_{v}": sorted(symbols.get(f"{f}_{v}", set())) for f, v in highest.items()},
        modules=modules,
        problems=(*problems, *found_problems),
    )


def claimed(platform_tag: str) -> list[tuple[Version, str] | None]:
    """The glibc and arch each part of a wheel's platform tag claims (manylinux_2_17_x86_64.manylinux2014_x86_64);
    None for a part that claims none (linux_x86_64)."""
    found: list[tuple[Version, str] | None] = []
    for part in platform_tag.split("."):
        modern = re.fullmatch(r"manylinux_(\d+)_(\d+)_(.+)", part, re.ASCII)
        legacy = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(.+)", part, re.ASCII)
        if modern:
            found.append(((int(modern[1]), int(modern[2])), modern[3]))
        elif legacy:
            found.append((LEGACY_TAGS[legacy[1]], legacy[2]))
        else:
            found.append(None)
    return found


def with_platform(tags: str, platform: str) -> str:
    """'cp312-cp312-linux_x86_64' -> 'cp312-cp312-' + platform."""
    return f"{tags.rsplit('-', 1)[0]}-{platform}"


def retag(wheel: Path, folder: Path, platform: str, version: str, torch_requirement: str) -> Path:
    """The wheel with its platform tag replaced, written into `folder`: the file name, the WHEEL file's Tag
    lines and the manifest's build.wheel name the new tag, RECORD is written afresh (wheel_identity.stamp,
    the builder's one rewrite path), so pip installs it. The same wheel always gives the same bytes."""
    name, file_version, tags = wheel_identity.parse_name(wheel.name)
    target = folder / f"{name}-{file_version}-{with_platform(tags, platform)}.whl"
    files = wheel_identity.read_dist_info(wheel, ("WHEEL", wheel_identity.MANIFEST_FILE))
    lines = []
    for line in files["WHEEL"].decode("utf-8").split("\n"):
        key, _, value = line.partition(":")
        lines.append(f"{key}: {with_platform(value.strip(), platform)}" if key.strip() == "Tag" else line)
    manifest = input_files.decode_json(files[wheel_identity.MANIFEST_FILE], target.name, input_files.MANIFEST)
    manifest["build"] = {**manifest["build"], "wheel": target.name}
    extra = {
        "WHEEL": "\n".join(lines).encode("utf-8"),
        wheel_identity.MANIFEST_FILE: (atomic.json_dumps(manifest, indent=2) + "\n").encode("utf-8"),
    }
    return wheel_identity.stamp(wheel, target, version, torch_requirement, extra)
