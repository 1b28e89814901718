"""The shape of compat.toml, checked before any of it is read as a fact: each field's type, each
version's form (`python = "3.9-3.13"` is refused, not read as "Python 3-."), the [[apex.builds]] rows,
and the few rules between fields (a range's low end first, the pinned patch among `patches` and of
its row's minor). Every problem is reported at once; keys not named here are allowed (comments,
`note`), within verify.runtime.field_types' limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.errors import UsageError
from verify.domain.arch import ARCH_PATTERN
from verify.runtime import field_types as ft

MINOR = ft.Str(max_len=16, pattern=r"\d+\.\d+", means="a major.minor version like 2.6")
PATCH = ft.Str(max_len=24, pattern=r"\d+\.\d+\.\d+", means="a release version like 2.6.0")
ARCH = ft.Str(max_len=16, pattern=ARCH_PATTERN, means="a GPU arch like 9.0 or 12.0+PTX")
TEXT = ft.Str(max_len=4096)
NAME = ft.Str(max_len=256)
MINORS = ft.ListOf(MINOR, max_items=64)
RANGE = ft.ListOf(MINOR, min_items=2, max_items=2)

_BUILD_ROW = ft.Record(
    {
        "status": ft.Str(pattern="compiles|fails", means='"compiles" or "fails"'),
        "refs": ft.ListOf(NAME, min_items=1, max_items=256),
        "flags": ft.ListOf(NAME, max_items=64),
        "torch_min": MINOR,
        "torch_max": MINOR,
        "cuda_min": MINOR,
        "cuda_max": MINOR,
        "evidence": TEXT,
        "error": TEXT,
        "cause": TEXT,
        "fix_ref": NAME,
    },
    required=("status", "refs", "evidence"),
)
_TORCH_ROW = ft.Record(
    {
        "version": PATCH,
        "patches": ft.ListOf(PATCH, min_items=1, max_items=64),
        "cuda": MINORS,
        "pypi_cuda": MINOR,
        "aarch64_cuda": MINORS,
        "python": RANGE,
        "source": TEXT,
        "leads": ft.ListOf(TEXT, max_items=64),
        "note": TEXT,
    },
    required=("version", "cuda", "python"),
)
_TOOLKIT_ROW = ft.Record(
    {
        "nvcc": ft.ListOf(MINOR, min_items=1, max_items=64),
        "gcc_max": ft.Int(minimum=1, maximum=99),
        "archs": ft.ListOf(ARCH, min_items=1, max_items=64),
        "ptx_on_highest": ft.BOOL,
        "source": TEXT,
        "leads": ft.ListOf(TEXT, max_items=64),
    },
    required=("nvcc", "gcc_max", "archs"),
)
_CUDA_ROW = ft.Record(
    {
        "full": PATCH,
        "os": ft.ListOf(NAME, min_items=1, max_items=64),
        "source": TEXT,
        "leads": ft.ListOf(TEXT, max_items=64),
    },
    required=("full", "os"),
)
_OS_ROW = ft.Record(
    {
        "gcc_default": ft.OneOf(ft.Int(minimum=1, maximum=99), NAME),
        "gcc": ft.ListOf(ft.OneOf(ft.Int(minimum=1, maximum=99), NAME), min_items=1, max_items=64),
        "python": MINORS,
        "source": TEXT,
    },
    required=("gcc_default", "gcc", "python"),
)
_PLATFORM_ROW = ft.Record(
    {
        "machine": NAME,
        "id_suffix": ft.Str(max_len=32),
        "torch_wheels": ft.Str(pattern="cuda|aarch64_cuda", means='"cuda" or "aarch64_cuda"'),
    },
    required=("machine", "id_suffix", "torch_wheels"),
)
FACTS = ft.Record(
    {
        "format_version": ft.Int(minimum=1, maximum=1),
        "apex": ft.Record(
            {
                "repo": NAME,
                "default_ref": NAME,
                "core_flags": ft.ListOf(NAME, min_items=1, max_items=64),
                "builds": ft.ListOf(_BUILD_ROW, max_items=1024),
            },
            required=("repo", "default_ref", "core_flags"),
        ),
        "pytorch": ft.Record({"index_url": NAME}, required=("index_url",)),
        "torch": ft.MapOf(_TORCH_ROW, max_items=256, keys=MINOR),
        "toolkit": ft.ListOf(_TOOLKIT_ROW, min_items=1, max_items=256),
        "cuda": ft.MapOf(_CUDA_ROW, max_items=256, keys=MINOR),
        "os": ft.MapOf(_OS_ROW, max_items=256),
        "images": ft.Record({"devel": NAME, "runtime": NAME}, required=("devel", "runtime")),
        "platform": ft.MapOf(_PLATFORM_ROW, max_items=16),
    },
    required=("apex", "pytorch", "torch", "toolkit", "cuda", "os", "images"),
)


def _key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _rule_problems(raw: dict[str, Any]) -> list[str]:
    """The rules between fields (run only on a file whose shape holds)."""
    found: list[str] = []
    for minor, row in raw["torch"].items():
        where = f'torch."{minor}"'
        low, high = row["python"]
        if _key(low) > _key(high):
            found.append(f'{where}.python: ["{low}", "{high}"] runs backwards; write ["{high}", "{low}"]')
        if ".".join(row["version"].split(".")[:2]) != minor:
            found.append(f"{where}.version: {row['version']} is not a {minor}.x release")
        if row["version"] not in row.get("patches", [row["version"]]):
            found.append(f"{where}.patches: lacks the pinned version {row['version']}; add it")
    for index, row in enumerate(raw.get("apex", {}).get("builds", [])):
        for low, high in (("torch_min", "torch_max"), ("cuda_min", "cuda_max")):
            if low in row and high in row and _key(row[low]) > _key(row[high]):
                found.append(f"apex.builds[{index}]: {low} {row[low]} is above {high} {row[high]}")
    return found


def check(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """raw, if it is a compatibility facts file; else UsageError (exit 2) naming every bad field."""
    problems = [str(p) for p in ft.check(raw, FACTS, "compat", words=ft.TOML)]
    if not problems:
        problems = _rule_problems(raw)
    if problems:
        shown = "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        raise UsageError(
            f"{path}: not a valid compatibility facts file: {shown}; fix those fields "
            "(toolchain/data/compat.toml shows each one's form)"
        )
    return raw
