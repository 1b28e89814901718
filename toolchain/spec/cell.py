"""One matrix cell, fully resolved and frozen: what the Dockerfile's ARGs receive and what the image is tagged."""

from __future__ import annotations

import dataclasses

from toolchain.spec import compat as compat_mod
from toolchain.spec.cell_id import CellId
from verify.domain.arch import Arch, arch_list_text


@dataclasses.dataclass(frozen=True)
class Cell:
    """One fully resolved build: what the Dockerfile ARGs receive and what the image is tagged."""

    id: str  # == report cell id == local image tag (the registry tag too, unless image_tag differs)
    name: str  # the [cells.NAME] table, or "cli" for a cell made from command-line values
    cuda: str  # "12.4"
    torch: str  # "2.6.0"
    python: str  # "3.12"
    os: str  # "ubuntu22.04"
    gcc: str  # "11"
    archs: tuple[Arch, ...]  # (Arch(8, 0), Arch(9, 0)): parsed once, by the matrix; str() where it leaves
    apex_repo: str
    apex_ref: str
    apex_flags: dict[str, str]  # {"APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1", ...}
    extras: tuple[str, ...]  # contrib extension names, e.g. ("xentropy",)
    base_devel: str
    base_runtime: str
    torch_index_url: str
    variant: str = ""  # the id's suffix when archs/extras/flags/gcc differ from the defaults
    platform: str = compat_mod.DEFAULT_PLATFORM  # docker --platform: "linux/amd64" or "linux/arm64"
    # which bases it stands on: "nvidia" (nvidia/cuda images), "local" (a debootstrap base of compat.toml's
    # [local_base], CUDA from NVIDIA's wheels), "given" (base_devel/base_runtime written by the user)
    base_route: str = "nvidia"
    os_cuda_packages: tuple[
        str, ...
    ] = ()  # a local base's CUDA from its OS's archive (compat.toml [os_cuda])
    os_cuda_components: tuple[str, ...] = ()

    # the registry tag this cell's image goes under: the id without its platform suffix, shared by the cells of
    # one stack on other platforms (an OCI index, toolchain/image/oci_index.py); "" means the id itself
    image_tag: str = ""
    # the record `id` was made from (toolchain/spec/cell_id.py), carried so nothing parses the id back;
    # None for an explicit tag (the user's name). Not in to_json: the id is its rendering.
    made_id: CellId | None = None

    @property
    def tag(self) -> str:
        """The registry tag: one for every platform of the stack (cu132 and cu132-arm64 share it)."""
        return self.image_tag or self.id

    @property
    def arch_list(self) -> str:
        """TORCH_CUDA_ARCH_LIST form: '8.0;9.0' (verify/domain/arch.py's one rendering)."""
        return arch_list_text(self.archs)

    def build_args(self) -> dict[str, str]:
        """The Dockerfile's ARGs for this cell (names agreed in the shared contracts)."""
        return {
            "BASE_DEVEL_IMAGE": self.base_devel,
            "BASE_RUNTIME_IMAGE": self.base_runtime,
            "CUDA_VERSION": self.cuda,
            "PYTHON_VERSION": self.python,
            "TORCH_VERSION": self.torch,
            "TORCH_INDEX_URL": self.torch_index_url,
            "TORCH_CUDA_ARCH_LIST": self.arch_list,
            "APEX_REPO": self.apex_repo,
            "APEX_REF": self.apex_ref,
            "APEX_FLAGS": " ".join(f"{k}={v}" for k, v in self.apex_flags.items()),
            "CELL_ID": self.id,
            "GCC_VERSION": self.gcc,
            "OS_CUDA_PACKAGES": " ".join(self.os_cuda_packages),
            "OS_CUDA_COMPONENTS": " ".join(self.os_cuda_components),
        }

    def to_json(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        del data["made_id"]
        data["archs"] = [str(a) for a in self.archs]
        data["extras"] = list(self.extras)
        data["os_cuda_packages"] = list(self.os_cuda_packages)
        data["os_cuda_components"] = list(self.os_cuda_components)
        return data
