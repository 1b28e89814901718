"""The compatibility facts (data/compat.toml) as typed lookups: torch<->CUDA wheels, Python ranges,
nvcc's host-GCC and GPU-arch limits, base images per CUDA and OS, the pinned Apex commit."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

from toolchain.toml_loader import load_toml
from verify import input_files

DATA = Path(__file__).with_name("data") / "compat.toml"

_ARCH = re.compile(r"^(?P<num>\d+\.\d+)(?P<suffix>[af]?)(?P<ptx>\+PTX)?$")


def version_key(text: str) -> tuple[int, ...]:
    """'2.10' sorts after '2.9'."""
    return tuple(int(part) for part in text.split("."))


def minor_of(version: str) -> str:
    """'2.6.0+cu124' -> '2.6'."""
    return ".".join(version.split("+")[0].split(".")[:2])


@dataclasses.dataclass(frozen=True)
class TorchRelease:
    minor: str
    version: str  # the patch pinned by default
    cuda: tuple[str, ...]
    python_min: str
    python_max: str

    def supports_python(self, python: str) -> bool:
        return version_key(self.python_min) <= version_key(python) <= version_key(self.python_max)


@dataclasses.dataclass(frozen=True)
class Toolkit:
    nvcc: tuple[str, ...]
    gcc_max: int
    archs: tuple[str, ...]


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

    # --- lookups -----------------------------------------------------------------------------
    def torch_release(self, version: str) -> TorchRelease | None:
        return self.torch.get(minor_of(version))

    def torch_for_cuda(self, cuda: str) -> list[TorchRelease]:
        """Torch releases with a wheel for this CUDA, newest first."""
        found = [t for t in self.torch.values() if cuda in t.cuda]
        return sorted(found, key=lambda t: version_key(t.minor), reverse=True)

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

    def base_images(self, cuda: str, os_name: str) -> tuple[str, str]:
        fields = {"cuda": cuda, "cuda_full": self.cuda[cuda].full, "os": os_name}
        return self.devel_image_pattern.format(**fields), self.runtime_image_pattern.format(**fields)


def parse_arch(arch: str) -> tuple[str, str, bool] | None:
    """'9.0a+PTX' -> ('9.0', 'a', True); None when it is not an arch at all."""
    match = _ARCH.match(arch.strip())
    if not match:
        return None
    return match["num"], match["suffix"], bool(match["ptx"])


@functools.lru_cache(maxsize=4)
def load(path: Path = DATA) -> Compat:
    raw = load_toml(path, input_files.FACTS)
    return Compat(
        apex_repo=raw["apex"]["repo"],
        apex_default_ref=raw["apex"]["default_ref"],
        apex_core_flags=tuple(raw["apex"]["core_flags"]),
        index_url_pattern=raw["pytorch"]["index_url"],
        torch={
            minor: TorchRelease(
                minor=minor,
                version=row["version"],
                cuda=tuple(row["cuda"]),
                python_min=row["python"][0],
                python_max=row["python"][1],
            )
            for minor, row in raw["torch"].items()
        },
        toolkits=tuple(
            Toolkit(nvcc=tuple(row["nvcc"]), gcc_max=int(row["gcc_max"]), archs=tuple(row["archs"]))
            for row in raw["toolkit"]
        ),
        cuda={
            version: CudaRelease(version=version, full=row["full"], os=tuple(row["os"]))
            for version, row in raw["cuda"].items()
        },
        os={
            name: OsRelease(name=name, gcc_default=str(row["gcc_default"]), gcc=tuple(str(g) for g in row["gcc"]),
                            python=tuple(row["python"]))
            for name, row in raw["os"].items()
        },
        devel_image_pattern=raw["images"]["devel"],
        runtime_image_pattern=raw["images"]["runtime"],
    )
