"""The compatibility facts (data/compat.toml) as typed lookups: torch<->CUDA wheels (per platform),
Python ranges, nvcc's host-GCC and GPU-arch limits, base images per CUDA and OS, the pinned Apex
commit, and the leads (claims seen but not confirmed) recorded beside them."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from toolchain.spec import compat_shape
from toolchain.spec.toml_loader import load_toml
from verify.runtime import input_files

DATA = Path(__file__).parents[1] / "data" / "compat.toml"


def version_key(text: str) -> tuple[int, ...]:
    """'2.10' sorts after '2.9'."""
    return tuple(int(part) for part in text.split("."))


def minor_of(version: str) -> str:
    """'2.6.0+cu124' -> '2.6'."""
    return ".".join(version.split("+")[0].split(".")[:2])


DEFAULT_PLATFORM = "linux/amd64"


@dataclasses.dataclass(frozen=True)
class TorchRelease:
    minor: str
    version: str  # the patch pinned by default
    cuda: tuple[str, ...]  # CUDA builds with linux x86_64 wheels
    python_min: str
    python_max: str
    pypi_cuda: str | None = None  # the CUDA of the wheels on PyPI itself (None: CPU-only there)
    aarch64_cuda: tuple[str, ...] = ()  # CUDA builds with linux aarch64 wheels
    patches: tuple[str, ...] = ()  # the patch releases a cell may name (the pinned one among them)

    def supports_python(self, python: str) -> bool:
        return version_key(self.python_min) <= version_key(python) <= version_key(self.python_max)

    def cuda_for(self, platform: Platform) -> tuple[str, ...]:
        """The CUDA builds with wheels for this platform's machine."""
        return self.aarch64_cuda if platform.torch_wheels == "aarch64_cuda" else self.cuda


@dataclasses.dataclass(frozen=True)
class Toolkit:
    nvcc: tuple[str, ...]
    gcc_max: int
    archs: tuple[str, ...]
    ptx_on_highest: bool = False  # default arch lists end in "<highest>+PTX" (as PyTorch's CUDA 13 wheels)
    nvcc_wheel: bool = True  # NVIDIA publishes this nvcc (the compiler, not only ptxas) as a wheel


@dataclasses.dataclass(frozen=True)
class Platform:
    name: str  # "linux/arm64", as docker --platform takes it
    machine: str  # "aarch64", as `uname -m` and wheel tags say it
    id_suffix: str  # "arm64" -> "...-ubuntu24.04-arm64"; "" for the default platform
    torch_wheels: str  # the TorchRelease field listing its CUDA builds: "cuda" | "aarch64_cuda"


@dataclasses.dataclass(frozen=True)
class Lead:
    """A claim seen in a source but not confirmed: recorded, never used as a fact."""

    where: str  # "torch 2.15", "cuda 13.4"
    text: str


@dataclasses.dataclass(frozen=True)
class CudaRelease:
    version: str
    full: str
    os: tuple[str, ...]  # first is the default


@dataclasses.dataclass(frozen=True)
class OsRelease:
    name: str
    gcc_default: str
    gcc: tuple[str, ...]
    python: tuple[str, ...]  # what `apt-get install python<ver>` finds
    glibc: str | None = None  # its C library's version (None: not recorded, so no host_clash row applies)


@dataclasses.dataclass(frozen=True)
class LocalBase:
    """An OS base made here with debootstrap (no registry): CUDA then comes from NVIDIA's wheels."""

    os: str  # "debian12"
    image: str  # "apex-toolchain/base:bookworm"
    suite: str  # "bookworm", what debootstrap takes


@dataclasses.dataclass(frozen=True)
class OsCuda:
    """A CUDA toolkit in an OS's own package archive (for a local base whose CUDA has no nvcc wheel)."""

    os: str
    cuda: str
    packages: tuple[str, ...]
    components: tuple[str, ...]  # archive components to enable (Debian: contrib non-free)


@dataclasses.dataclass(frozen=True)
class HostClash:
    """A glibc whose C23 math declarations break nvcc's host pass up to some nvcc."""

    glibc_min: str
    nvcc_max: str
    error: str
    source: str

    def applies(self, glibc: str | None, nvcc: str) -> bool:
        return (
            glibc is not None
            and version_key(glibc) >= version_key(self.glibc_min)
            and version_key(nvcc) <= version_key(self.nvcc_max)
        )


@dataclasses.dataclass(frozen=True)
class Compat:
    apex_repo: str
    apex_default_ref: str
    apex_core_flags: tuple[str, ...]
    index_url_pattern: str
    torch: dict[str, TorchRelease]
    toolkits: tuple[Toolkit, ...]
    cuda: dict[str, CudaRelease]
    os: dict[str, OsRelease]
    devel_image_pattern: str
    runtime_image_pattern: str
    platforms: dict[str, Platform] = dataclasses.field(default_factory=dict)  # first is the default
    leads: tuple[Lead, ...] = ()
    local_bases: dict[str, LocalBase] = dataclasses.field(default_factory=dict)  # os -> its debootstrap base
    host_clashes: tuple[HostClash, ...] = ()
    os_cuda: dict[str, OsCuda] = dataclasses.field(default_factory=dict)
    pypi_index_url: str = "https://pypi.org/simple"
    free_threaded_refused: str | None = None  # why a free-threaded Python ("3.14t") cannot be a cell here
    source: Path = DATA  # the file these facts were read from (its [[apex.builds]]: toolchain.spec.apex_refs)

    # --- lookups -----------------------------------------------------------------------------
    def torch_release(self, version: str) -> TorchRelease | None:
        return self.torch.get(minor_of(version))

    def torch_for_cuda(self, cuda: str, platform: str = DEFAULT_PLATFORM) -> list[TorchRelease]:
        """Torch releases with a wheel for this CUDA (on this platform), newest first."""
        where = self.platform(platform)
        found = [t for t in self.torch.values() if cuda in t.cuda_for(where)]
        return sorted(found, key=lambda t: version_key(t.minor), reverse=True)

    def platform(self, name: str) -> Platform:
        """The platform record; one not in the facts is read as the default platform's rules."""
        return self.platforms.get(name) or Platform(DEFAULT_PLATFORM, "x86_64", "", "cuda")

    @property
    def default_platform(self) -> str:
        return next(iter(self.platforms), DEFAULT_PLATFORM)

    def toolkit(self, nvcc: str) -> Toolkit | None:
        for row in self.toolkits:
            if nvcc in row.nvcc:
                return row
        return None

    def all_cuda_versions(self) -> list[str]:
        versions = {c for t in self.torch.values() for c in t.cuda} | set(self.cuda)
        return sorted(versions, key=version_key)

    def index_url(self, cuda: str) -> str:
        return self.index_url_pattern.format(cuda_tag="cu" + cuda.replace(".", ""))

    def pypi_carries(self, torch_version: str, cuda: str) -> bool:
        """Whether PyPI's own torch wheel of this release is its CUDA `cuda` build (PyPI carries one CUDA)."""
        release = self.torch_release(torch_version)
        return release is not None and release.pypi_cuda == cuda

    def local_base_for_python(self, python: str) -> LocalBase | None:
        """The local base whose OS packages this Python (the newest OS first)."""
        for base in reversed(list(self.local_bases.values())):
            if python in self.os[base.os].python:
                return base
        return None

    def cuda_from_os(self, os_name: str, cuda: str) -> OsCuda | None:
        found = self.os_cuda.get(os_name)
        return found if found is not None and found.cuda == cuda else None

    def host_clash(self, os_name: str, nvcc: str) -> HostClash | None:
        if self.cuda_from_os(os_name, nvcc):  # the OS's own toolkit, patched for its glibc
            return None
        glibc = self.os[os_name].glibc if os_name in self.os else None
        return next((c for c in self.host_clashes if c.applies(glibc, nvcc)), None)

    def base_images(self, cuda: str, os_name: str) -> tuple[str, str]:
        fields = {"cuda": cuda, "cuda_full": self.cuda[cuda].full, "os": os_name}
        return self.devel_image_pattern.format(**fields), self.runtime_image_pattern.format(**fields)


def _leads(raw: dict) -> tuple[Lead, ...]:
    """Every `leads = [...]` of the torch, toolkit and cuda rows, labelled with its row."""
    found: list[Lead] = []
    for minor, row in raw.get("torch", {}).items():
        found += [Lead(f"torch {minor}", text) for text in row.get("leads", ())]
    for row in raw.get("toolkit", ()):
        found += [Lead(f"nvcc {'/'.join(row['nvcc'])}", text) for text in row.get("leads", ())]
    for version, row in raw.get("cuda", {}).items():
        found += [Lead(f"cuda {version}", text) for text in row.get("leads", ())]
    return tuple(found)


@functools.lru_cache(maxsize=4)
def load(path: Path = DATA) -> Compat:
    raw = compat_shape.check(load_toml(path, input_files.FACTS), Path(path))
    return Compat(
        apex_repo=raw["apex"]["repo"],
        apex_default_ref=raw["apex"]["default_ref"],
        apex_core_flags=tuple(raw["apex"]["core_flags"]),
        index_url_pattern=raw["pytorch"]["index_url"],
        pypi_index_url=raw["pytorch"].get("pypi_index_url", "https://pypi.org/simple"),
        torch={
            minor: TorchRelease(
                minor=minor,
                version=row["version"],
                cuda=tuple(row["cuda"]),
                python_min=row["python"][0],
                python_max=row["python"][1],
                pypi_cuda=row.get("pypi_cuda"),
                aarch64_cuda=tuple(row.get("aarch64_cuda", ())),
                patches=tuple(row.get("patches", [row["version"]])),
            )
            for minor, row in raw["torch"].items()
        },
        toolkits=tuple(
            Toolkit(
                nvcc=tuple(row["nvcc"]),
                gcc_max=int(row["gcc_max"]),
                archs=tuple(row["archs"]),
                ptx_on_highest=bool(row.get("ptx_on_highest", False)),
                nvcc_wheel=bool(row.get("nvcc_wheel", True)),
            )
            for row in raw["toolkit"]
        ),
        cuda={
            version: CudaRelease(version=version, full=row["full"], os=tuple(row["os"]))
            for version, row in raw["cuda"].items()
        },
        os={
            name: OsRelease(
                name=name,
                gcc_default=str(row["gcc_default"]),
                gcc=tuple(str(g) for g in row["gcc"]),
                python=tuple(row["python"]),
                glibc=row.get("glibc"),
            )
            for name, row in raw["os"].items()
        },
        local_bases={
            name: LocalBase(os=name, image=row["image"], suite=row["suite"])
            for name, row in raw.get("local_base", {}).items()
        },
        os_cuda={
            name: OsCuda(
                os=name,
                cuda=row["cuda"],
                packages=tuple(row["packages"]),
                components=tuple(row.get("components", ())),
            )
            for name, row in raw.get("os_cuda", {}).items()
        },
        host_clashes=tuple(
            HostClash(
                glibc_min=row["glibc_min"], nvcc_max=row["nvcc_max"], error=row["error"], source=row["source"]
            )
            for row in raw.get("host_clash", ())
        ),
        devel_image_pattern=raw["images"]["devel"],
        runtime_image_pattern=raw["images"]["runtime"],
        platforms={
            name: Platform(
                name=name,
                machine=row["machine"],
                id_suffix=row["id_suffix"],
                torch_wheels=row["torch_wheels"],
            )
            for name, row in raw.get("platform", {}).items()
        },
        leads=_leads(raw),
        free_threaded_refused=raw.get("free_threaded", {}).get("refused"),
        source=Path(path),
    )
