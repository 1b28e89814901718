"""The project's domain values, each with one parser and its renderings, shared by toolchain/spec (the
matrix), toolchain/builder (inside the image) and verify: a GPU arch and an arch list, the short-sha rule,
the Apex source-tree check, the contrib extras, and the image's /opt/apex layout.

Standard library only: the builder and verify import it inside images (Python 3.10). A value that does
not parse raises ValueProblem (what is wrong, and the fix); each caller says it in its own terms (a cell's
problem list, an exit-2 UsageError naming the option).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from verify.runtime.messages import closest, did_you_mean, shown


class ValueProblem(ValueError):
    """A value that does not parse: `problem` (what is wrong with it) and `fix` (what to write instead)."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem
        self.fix = fix


# ---------------------------------------------------------------- GPU archs

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


# ---------------------------------------------------------------- git commits

# A commit named by hex: 7 (git's short form) to 40 characters, lower case as git prints it.
# docker/fetch-apex.sh's is_commit_sha says the same (tests/unit/test_values.py feeds both one case list).
_COMMIT_SHA = re.compile(r"[0-9a-f]{7,40}")
SHORT_SHA_LEN = 7
FULL_SHA_LEN = 40  # a full commit: what --apex-commit records (docker/Dockerfile's apex-build stage)


def is_commit_sha(text: str | None) -> bool:
    """'6424da3' or a full sha: True; a tag, a branch, upper case or non-ASCII: False."""
    return isinstance(text, str) and _COMMIT_SHA.fullmatch(text) is not None


def short_ref(ref: str) -> str:
    """The form a tag or version names an Apex ref by: a commit's first 7 hex digits, else the ref as is."""
    return ref[:SHORT_SHA_LEN] if is_commit_sha(ref) else ref


# ---------------------------------------------------------------- the Apex source tree


def check_apex_tree(src: Path) -> None:
    """ValueProblem unless `src` is the root of an NVIDIA/apex checkout (a directory with setup.py and
    apex/__init__.py): the one check of `build.py image/matrix/wheel --apex-src` and the builder;
    docker/fetch-apex.sh's is_apex_tree says the same for the build context."""
    if not src.is_dir():
        raise ValueProblem("no such directory", "clone https://github.com/NVIDIA/apex and pass its path")
    if not (src / "setup.py").is_file() or not (src / "apex" / "__init__.py").is_file():
        raise ValueProblem(
            "not an Apex source tree (needs setup.py and apex/__init__.py)",
            "pass the root of an NVIDIA/apex checkout",
        )


# ---------------------------------------------------------------- paths on a command line


def path_value(text: str) -> Path:
    """Every path option's one check (argparse `type=`, build.py's and the builder's): '' would be the
    current folder, NUL is no path at all, a `~user` with no such user raises deep inside pathlib when the
    path is used (a RuntimeError traceback)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty path (it would mean the current folder); name a file or folder"
        )
    if "\x00" in text:
        raise argparse.ArgumentTypeError("a path with a NUL character; name a file or folder")
    try:
        Path(text).expanduser()  # checked here; the request keeps the path as written (its manifest says so)
    except RuntimeError:  # "Could not determine home directory."
        raise argparse.ArgumentTypeError(
            f"{text}: {text.split('/')[0]} names no user's home on this machine; write the path without ~"
        ) from None
    return Path(text)


def expanded_path_value(text: str) -> Path:
    """build.py's path options: the same check, and a `~` that reached it quoted expanded as the shell would
    have (`zipapp --out '~/x'` had made a folder named `~`). The builder keeps its paths as written."""
    return path_value(text).expanduser()


# ---------------------------------------------------------------- contrib extras


def extra_flag(name: str, names: Mapping[str, str]) -> str:
    """One `extras` entry -> its APEX_* flag, by the table of names (verify.module_map.extra_names): a
    name ('xentropy', 'all', a module name, any case) or the flag itself ('APEX_XENTROPY'). The one
    grammar of matrix.toml's extras, `build.py plan --extras` and `build.py wheel --extras`."""
    text = name.strip()
    key = text.lower()
    if key in names:
        return names[key]
    flags = set(names.values())
    upper = text.upper()
    flag = upper if upper.startswith("APEX_") else "APEX_" + upper
    if flag in flags:
        return flag
    near = closest(key.removeprefix("apex_"), names)
    if near:
        raise ValueProblem(
            f"unknown contrib extension {shown(text)}",
            f"{did_you_mean(key.removeprefix('apex_'), names)} (the flag {names[near[0]]})",
        )
    short = [n for n in names if not n.endswith(("_cuda", "_lib"))]
    raise ValueProblem(f"unknown contrib extension {shown(text)}", f"use some of {', '.join(short)}")


def extra_name(flag: str, names: Mapping[str, str]) -> str:
    """The canonical name of an extra's flag: the first name the table gives it ('xentropy')."""
    return next(n for n, f in names.items() if f == flag)


# ---------------------------------------------------------------- the image layout

MANIFEST_NAME = "build-manifest.json"
LOG_NAME = "apex-build.log"
STATIC_REPORT_NAME = "verify-static.json"
STATIC_MARKDOWN_NAME = "verify-static.md"
STATIC_SLIM_REPORT_NAME = "verify-static-slim.json"  # runtime-slim's second gate
STATIC_SLIM_MARKDOWN_NAME = "verify-static-slim.md"
INPUTS_NAME = "inputs"
WHEEL_HASHES_NAME = "wheels.sha256"  # under inputs/: the torch wheels installed (docker/install-torch.sh)


@dataclasses.dataclass(frozen=True)
class ApexLayout:
    """What one build leaves in its folder: the builder's --out, and /opt/apex in an image (IMAGE)."""

    root: PurePosixPath

    @property
    def manifest(self) -> PurePosixPath:
        return self.root / MANIFEST_NAME

    @property
    def log(self) -> PurePosixPath:
        return self.root / LOG_NAME

    @property
    def static_report(self) -> PurePosixPath:
        return self.root / STATIC_REPORT_NAME

    @property
    def static_markdown(self) -> PurePosixPath:
        return self.root / STATIC_MARKDOWN_NAME

    @property
    def static_slim_report(self) -> PurePosixPath:
        return self.root / STATIC_SLIM_REPORT_NAME

    @property
    def static_slim_markdown(self) -> PurePosixPath:
        return self.root / STATIC_SLIM_MARKDOWN_NAME

    @property
    def inputs(self) -> PurePosixPath:
        return self.root / INPUTS_NAME

    @property
    def wheel_hashes(self) -> PurePosixPath:
        return self.inputs / WHEEL_HASHES_NAME

    @property
    def wheels(self) -> PurePosixPath:
        """The glob of the wheel(s) the build left there."""
        return self.root / "*.whl"

    def paths(self) -> dict[str, PurePosixPath]:
        """Every path by its name (the Dockerfile test checks them against docker/)."""
        names = (
            "manifest",
            "log",
            "static_report",
            "static_markdown",
            "static_slim_report",
            "static_slim_markdown",
            "inputs",
            "wheel_hashes",
            "wheels",
        )
        return {"root": self.root, **{name: getattr(self, name) for name in names}}


IMAGE = ApexLayout(PurePosixPath("/opt/apex"))
