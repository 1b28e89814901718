"""The stack of this environment, read from the installed torch: what decides which Apex wheel fits."""

from __future__ import annotations

import dataclasses
import os
import sys
import sysconfig

from verify.domain import stack_name
from verify.install.problem import InstallProblem


@dataclasses.dataclass(frozen=True)
class LocalStack:
    torch_version: str  # 2.13.0+cpu, as torch.__version__ says (the pin is this exact string)
    torch_cuda: str | None  # torch.version.cuda: 13.0, None for a CPU build
    cxx11_abi: bool | None  # torch._C._GLIBCXX_USE_CXX11_ABI (None: torch does not say)
    python: str  # 3.12.3
    python_tag: str  # cp312
    platform: str  # linux_x86_64, the wheel tag's spelling
    glibc: str | None  # 2.39; None off glibc
    gpu_arch: str | None  # 9.0 when a CUDA device is visible (only to fill in the build command)
    # the installed distribution's version, which is what pip and uv compare a pin with: PyPI's CUDA wheel
    # says 2.14.1 in its metadata while torch.__version__ says 2.14.1+cu130 (None: no metadata found)
    torch_distribution: str | None = None

    @property
    def torch_pin(self) -> str:
        """The exact version to pin torch to: the installed distribution's, else torch.__version__."""
        return self.torch_distribution or self.torch_version

    @property
    def name(self) -> str:
        return stack_name.stack_name(self.torch_version, self.torch_cuda)

    def describe(self) -> str:
        """'torch 2.13.0+cpu (CPU build) on Python 3.11.7 linux_x86_64, glibc 2.36, C++11 ABI'."""
        build = f"CUDA {self.torch_cuda} build" if self.torch_cuda else "CPU build"
        abi = {True: "C++11 ABI", False: "pre-C++11 ABI", None: "C++ ABI unknown"}[self.cxx11_abi]
        glibc = f"glibc {self.glibc}" if self.glibc else "no glibc"
        return f"torch {self.torch_version} ({build}) on Python {self.python} {self.platform}, {glibc}, {abi}"


def glibc_version() -> str | None:
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION")  # 'glibc 2.36'
    except (ValueError, OSError):  # not a glibc system (musl, macOS)
        return None
    return found.split()[-1] if found else None


def read() -> LocalStack:
    """The installed torch's stack; InstallProblem (exit 3) when this Python has no usable torch."""
    try:
        import torch
    except Exception as exc:  # a missing torch, or one whose import fails (a broken CUDA library)
        raise InstallProblem(
            f"this Python ({sys.executable}) cannot import torch ({type(exc).__name__}: {exc}); install torch"
            " first: the Apex index holds Apex only and never changes your torch"
        ) from None
    version, cuda = str(torch.__version__), torch.version.cuda
    try:
        stack_name.stack_name(version, cuda)
    except ValueError as exc:
        raise InstallProblem(
            f"the installed torch names no stack: {exc}; reinstall torch from PyTorch"
        ) from None
    arch = None
    if cuda and torch.cuda.is_available():
        arch = "{}.{}".format(*torch.cuda.get_device_capability(0))
    return LocalStack(
        torch_version=version,
        torch_cuda=cuda,
        cxx11_abi=getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None),
        python=".".join(map(str, sys.version_info[:3])),
        python_tag=f"cp{sys.version_info[0]}{sys.version_info[1]}",
        platform=sysconfig.get_platform().replace("-", "_").replace(".", "_"),
        glibc=glibc_version(),
        gpu_arch=arch,
        torch_distribution=_distribution_version("torch"),
    )


def _distribution_version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
