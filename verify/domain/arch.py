"""A GPU arch and an arch list: one grammar, and each form the arch takes (matrix.toml, TORCH_CUDA_ARCH_LIST,
the cell id's tag, nvcc's names)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from verify.domain.problem import ValueProblem
from verify.runtime.messages import shown

# A TORCH_CUDA_ARCH_LIST entry: 9.0, 9.0+PTX, 9.0a (arch-specific), 10.0f (family-specific).
# ASCII digits only: nvcc and torch read no others (Python's \d would take '٩.٠').
ARCH_PATTERN = r"([0-9]+)\.([0-9])([af]?)(\+PTX)?"  # compat.toml's toolkit rows are read with it too
_ARCH = re.compile(ARCH_PATTERN)
# nvcc's and the fatbin's names: sm_90, sm_90a, compute_100f (the last digit is the minor)
_NVCC_NAME = re.compile(r"(sm|compute)_([0-9]+)([0-9])([af]?)")
_LIST_SEPARATORS = re.compile(r"[;,\s]+")


@dataclasses.dataclass(frozen=True, order=True)
class Arch:
    """One GPU compute capability to build for. Its six forms, one value: `make ARCHS='8.0;9.0'`,
    `build.py --archs`, matrix.toml's `archs = ["9.0"]` and the Cell (str: '9.0a+PTX'), the
    Dockerfile's TORCH_CUDA_ARCH_LIST ARG and the builder's env (arch_list_text), the tag suffix
    (tag_token: '90aptx'), and nvcc's names (sm / compute / gencode)."""

    major: int
    minor: int
    suffix: str = ""  # "a" arch-specific, "f" family-specific, "" portable
    ptx: bool = False  # also embed PTX, which newer GPUs JIT-compile

    @classmethod
    def parse(cls, text: str) -> Arch:
        """'9.0a+PTX' -> Arch(9, 0, 'a', True); anything else raises ValueProblem."""
        match = _ARCH.fullmatch(text.strip()) if isinstance(text, str) else None
        if not match:
            raise ValueProblem(
                f"{shown(text)} is not a compute capability",
                f"write it as {_guess(text)} (MAJOR.MINOR in ASCII digits, optionally with a or f "
                "and +PTX; e.g. 9.0 for H100/H200)",
            )
        return cls(int(match[1]), int(match[2]), match[3], bool(match[4]))

    @classmethod
    def from_capability(cls, capability: tuple[int, int]) -> Arch:
        """The arch that builds native code for a device of this capability: (9, 0) -> 9.0."""
        return cls(int(capability[0]), int(capability[1]))

    @classmethod
    def from_nvcc_name(cls, name: str) -> Arch | None:
        """'compute_90' / 'sm_100a' -> the arch; None for any other text."""
        match = _NVCC_NAME.fullmatch(name.strip())
        return cls(int(match[2]), int(match[3]), match[4]) if match else None

    def __str__(self) -> str:
        """The TORCH_CUDA_ARCH_LIST entry and matrix.toml's form: '9.0', '10.0a+PTX'."""
        return f"{self.number}{self.suffix}" + ("+PTX" if self.ptx else "")

    @property
    def number(self) -> str:
        """'9.0': the capability alone, as compat.toml's toolkit rows list what nvcc compiles."""
        return f"{self.major}.{self.minor}"

    @property
    def capability(self) -> tuple[int, int]:
        return self.major, self.minor

    @property
    def tag_token(self) -> str:
        """The cell id's variant form: 9.0 -> '90', 9.0a+PTX -> '90aptx'."""
        return f"{self.major}{self.minor}{self.suffix}" + ("ptx" if self.ptx else "")

    @property
    def sm(self) -> str:
        """nvcc's real-architecture name (SASS): 'sm_90a'."""
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @property
    def compute(self) -> str:
        """nvcc's virtual-architecture name (PTX): 'compute_90a'."""
        return f"compute_{self.major}{self.minor}{self.suffix}"

    def gencode(self) -> list[str]:
        """nvcc's flags for it, as torch's cpp_extension writes them from TORCH_CUDA_ARCH_LIST."""
        flags = [f"-gencode=arch={self.compute},code={self.sm}"]
        if self.ptx:
            flags.append(f"-gencode=arch={self.compute},code={self.compute}")
        return flags

    def with_ptx(self) -> Arch:
        return dataclasses.replace(self, ptx=True)


def _guess(text: object) -> str:
    """'90' -> '9.0', 'sm_100' -> '10.0': the digits read as MAJOR.MINOR (ASCII only), else 9.0."""
    digits = re.sub(r"[^0-9]", "", text if isinstance(text, str) else "")[:4]
    return f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 else "9.0"


def split_arch_list(text: str) -> list[str]:
    """'8.0;9.0', '8.0 9.0+PTX', '8.0,9.0' -> its entries, unparsed (empty ones dropped)."""
    return [part for part in _LIST_SEPARATORS.split(text.strip()) if part]


def parse_arch_list(text: str | Iterable[str]) -> tuple[Arch, ...]:
    """A TORCH_CUDA_ARCH_LIST (or a list of entries) -> its archs, in order; the first bad entry raises."""
    entries = split_arch_list(text) if isinstance(text, str) else [str(a).strip() for a in text]
    return tuple(Arch.parse(entry) for entry in entries)


def arch_list_text(archs: Iterable[Arch | str]) -> str:
    """TORCH_CUDA_ARCH_LIST's form: '8.0;9.0+PTX' (what the Dockerfile ARG and the builder's env hold)."""
    return ";".join(str(a) for a in archs)


def tag_suffix(archs: Iterable[Arch]) -> str:
    """The cell id's arch part: 8.0, 9.0+PTX -> 'sm80_90ptx'."""
    return "sm" + "_".join(a.tag_token for a in archs)
