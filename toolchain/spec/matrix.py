"""matrix.toml -> validated, frozen Cells.

Values are layered: compatibility facts -> [defaults] -> [cells.NAME] -> command-line overrides.
Values you write in a cell or on the command line are checked strictly against the facts; values you
leave out are chosen to fit (newest torch for the CUDA, the CUDA's default OS, the newest GCC that the
OS ships and nvcc accepts, the default archs that the toolkit can compile). Every cell is validated
before anything is built, and every problem is reported at once (MatrixError, exit 2).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from toolchain.errors import CellProblem, MatrixError, UsageError
from toolchain.spec import compat as compat_mod
from toolchain.spec.compat import Compat, parse_arch, version_key
from toolchain.spec.toml_loader import load_toml
from verify.messages import closest, did_you_mean, shown

FORMAT_VERSION = 1
TOP_KEYS = ("format_version", "defaults", "cells")
# key -> expected TOML type; archs/extras/apex_flags also accept one string ("8.0;9.0", "xentropy,bnp").
CELL_KEYS: dict[str, type] = {
    "cuda": str,
    "torch": str,
    "python": str,
    "os": str,
    "gcc": str,
    "archs": list,
    "apex_repo": str,
    "apex_ref": str,
    "apex_flags": list,
    "extras": list,
    "base_devel": str,
    "base_runtime": str,
    "torch_index_url": str,
    "tag": str,
    "platform": str,
}
# Docker's tag grammar: https://docs.docker.com/reference/cli/docker/image/tag/
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
TAG_MAX = 128
# ASCII digits only: Python's \d also matches '１' and '٣', which no tool downstream reads as digits
_MAJOR_MINOR = re.compile(r"^[0-9]+\.[0-9]+$")
_TORCH_VERSION = re.compile(r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")
_CUDA_WHEEL_TAG = re.compile(r"^cu([0-9]{1,2})([0-9])$")  # PyTorch's spelling: cu124 is CUDA 12.4
_HEX_SHA = re.compile(r"^[0-9a-f]{7,40}$")
# What git accepts as a ref name, minus the corner cases nobody writes (see git-check-ref-format).
_GIT_REF = re.compile(r"^(?!.*\.\.)(?!.*//)[A-Za-z0-9_][A-Za-z0-9_./+-]*(?<![./])$")
_CLI = "command line"
# An image repository (what --registry names): [registry[:port]/]name, lower-case path components.
REPOSITORY = r"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._/]|__|-+)[a-z0-9]+)*"
REPOSITORY_RE = re.compile(f"^{REPOSITORY}$")
# An image reference: [registry[:port]/]name[:tag][@sha256:<64 hex>] (lower-case name; the digest is a pin).
_IMAGE_REF = re.compile(f"^{REPOSITORY}" r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
# Where git may fetch Apex from: a URL, scp-like user@host:path, or an absolute path. Never a word that
# starts with '-' (git would read it as an option, e.g. --upload-pack=CMD), no whitespace or quotes.
_GIT_URL = re.compile(r"^(?:(?:https?|ssh|git|file)://[^\s'\"\\]+"
                      r"|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s'\"\\-][^\s'\"\\]*|/[^\s'\"\\]*)$")
_INDEX_URL = re.compile(r"^(?:https?|file)://[^\s'\"\\]+$")
# [cells.NAME]: NAME becomes a label, a bake target and a --cell value.
_CELL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
# A cell field is a version, a name, a ref or a URL: anything longer is refused before it is parsed.
FIELD_MAX = 1024
# APEX_X=<one of these> in apex_flags means "off", which a list of flags to build cannot say.
_FLAG_OFF = frozenset({"0", "false", "no", "off", ""})


@dataclasses.dataclass(frozen=True)
class Cell:
    """One fully resolved build: what the Dockerfile ARGs receive and what the image is tagged."""

    id: str  # == image tag == report cell id
    name: str  # the [cells.NAME] table, or "cli" for a cell made from command-line values
    cuda: str  # "12.4"
    torch: str  # "2.6.0"
    python: str  # "3.12"
    os: str  # "ubuntu22.04"
    gcc: str  # "11"
    archs: tuple[str, ...]  # ("8.0", "9.0")
    apex_repo: str
    apex_ref: str
    apex_flags: dict[str, str]  # {"APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1", ...}
    extras: tuple[str, ...]  # contrib extension names, e.g. ("xentropy",)
    base_devel: str
    base_runtime: str
    torch_index_url: str
    variant: str = ""  # the id's suffix when archs/extras/flags/gcc differ from the defaults
    platform: str = compat_mod.DEFAULT_PLATFORM  # docker --platform: "linux/amd64" or "linux/arm64"

    @property
    def arch_list(self) -> str:
        """TORCH_CUDA_ARCH_LIST form: '8.0;9.0'."""
        return ";".join(self.archs)

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
        }

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["archs"] = list(self.archs)
        data["extras"] = list(self.extras)
        return data


@dataclasses.dataclass(frozen=True)
class Matrix:
    path: Path
    defaults: dict[str, Any]
    cells: tuple[Cell, ...]

    def select(
        self, *, names: Iterable[str] = (), cuda: Iterable[str] = (), torch: Iterable[str] = ()
    ) -> list[Cell]:
        """Cells matching every given filter (a filter with several values matches any of them)."""
        names, cuda, torch = set(names), {compat_mod.minor_of(c) for c in cuda}, set(torch)
        unknown = sorted(names - {c.name for c in self.cells} - {c.id for c in self.cells})
        if unknown:
            known = [c.name for c in self.cells]
            hint = did_you_mean(unknown[0], known)
            raise UsageError(
                f"--cell {', '.join(shown(u, quote=False) for u in unknown)}: no such cell in {self.path}; "
                + (f"{hint} (cells: {', '.join(known)})" if hint else f"use one of {', '.join(known)}")
            )
        return [
            c
            for c in self.cells
            if (not names or c.name in names or c.id in names)
            and (not cuda or c.cuda in cuda)
            and (not torch or any(c.torch == t or compat_mod.minor_of(c.torch) == t for t in torch))
        ]


# --- public entry points ----------------------------------------------------------------------


def load_matrix(
    path: str | Path, *, facts: Compat | None = None, overrides: Mapping[str, Any] | None = None
) -> Matrix:
    """Load and validate every cell; raise MatrixError naming each bad cell and its fix."""
    path = Path(path)
    raw = load_toml(path)
    facts = facts or compat_mod.load()
    problems: list[CellProblem] = []
    problems += _check_keys(raw, TOP_KEYS, "top level", "a table at the top of the file")
    version = raw.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        problems.append(
            CellProblem("top level", f"format_version = {shown(version)} is not supported",
                        f"write format_version = {FORMAT_VERSION}")
        )
    defaults = raw.get("defaults", {})
    cells_raw = raw.get("cells", {})
    if not isinstance(defaults, dict):
        problems.append(CellProblem("[defaults]", "must be a table", "write [defaults] with key = value lines"))
        defaults = {}
    if not isinstance(cells_raw, dict) or not cells_raw:
        problems.append(CellProblem("[cells]", "no cells defined", 'add at least one [cells.NAME] table with cuda = "12.4"'))
        cells_raw = {}
    problems += _check_layer(defaults, "[defaults]", "defaults")
    cells: list[Cell] = []
    for name, table in cells_raw.items():
        label = f"cell {name}"
        if not _CELL_NAME.match(name):  # the name is a label, a bake target, a --cell value: keep it plain
            label = f"cell {shown(name)}"
            problems.append(CellProblem(label, "the cell name has characters other than letters, digits, '_', '.', "
                                        "'-' (or is longer than 64)", "rename the table, e.g. [cells.cu124]"))
        if not isinstance(table, dict):
            problems.append(CellProblem(label, "must be a table", f'write [cells.{name}] with cuda = "12.4" under it'))
            continue
        layers = [("defaults", defaults), ("cell", table)]
        if overrides:
            layers.append(("cli", dict(overrides)))
        cell, cell_problems = resolve(name, layers, facts, label=label, check_defaults=False)
        problems += cell_problems
        if cell is not None:
            cells.append(cell)
    problems += _check_unique(cells)
    if problems:
        raise MatrixError(problems, source=str(path))
    return Matrix(path=path, defaults=defaults, cells=tuple(cells))


def cli_cell(
    overrides: Mapping[str, Any],
    *,
    matrix_path: str | Path | None = None,
    base_cell: str | None = None,
    facts: Compat | None = None,
) -> Cell:
    """One cell from the command line: [defaults] (+ the named cell) + overrides, validated."""
    facts = facts or compat_mod.load()
    defaults: dict[str, Any] = {}
    table: dict[str, Any] = {}
    if matrix_path is not None:
        matrix = load_matrix(matrix_path, facts=facts)  # the file must be valid on its own too
        defaults = matrix.defaults
        if base_cell is not None:
            raw = load_toml(matrix.path)
            found = matrix.select(names=[base_cell])
            table = raw["cells"][found[0].name]
    name = base_cell or "cli"
    layers = [("defaults", defaults), ("cell", table), ("cli", dict(overrides))]
    label = f"cell {base_cell} with command-line overrides" if base_cell else _CLI
    cell, problems = resolve(name, layers, facts, label=label, check_defaults=matrix_path is None)
    if problems:
        raise MatrixError(problems, source="")
    assert cell is not None
    return cell


# --- resolution -------------------------------------------------------------------------------


@dataclasses.dataclass
class _Value:
    value: Any
    origin: str  # "defaults" | "cell" | "cli"


class _Resolver:
    """Resolve one cell's layers; collect problems instead of stopping at the first."""

    def __init__(self, name: str, label: str, layers: list[tuple[str, dict[str, Any]]], facts: Compat) -> None:
        self.name = name
        self.label = label
        self.facts = facts
        self.problems: list[CellProblem] = []
        self.values: dict[str, _Value] = {}
        # keys whose value has the wrong type or characters (reported by _check_layer): key -> origin.
        # They are neither used nor replaced by a lower layer's value, and never reported as missing.
        self.invalid: dict[str, str] = {}
        self.defaults_archs: list[str] = []
        for origin, layer in layers:
            for key, value in layer.items():
                if key not in CELL_KEYS or value is None or value == "":
                    continue
                if _field_problems(key, value, origin):
                    self.values.pop(key, None)
                    self.invalid[key] = origin
                    continue
                self.values[key] = _Value(value, origin)
                self.invalid.pop(key, None)
                if origin == "defaults" and key == "archs":
                    self.defaults_archs = self.as_list("archs") or []

    # how to write a fix where this value came from
    def how(self, key: str, value: str, like: str | None = None) -> str:
        """`--key value` or `key = "value" in [cells.X]`, matching where `key` (or `like`) was written."""
        source = key if key in self.values else like
        origin = self.values[source].origin if source in self.values else self.invalid.get(key, "cell")
        if origin == "cli":
            return f"--{key.replace('_', '-')} {value}"
        where = "[defaults]" if origin == "defaults" else f"[cells.{self.name}]"
        return f'{key} = "{value}" in {where}'

    def problem(self, problem: str, fix: str) -> None:
        self.problems.append(CellProblem(self.label, problem, fix))

    def get(self, key: str) -> _Value | None:
        return self.values.get(key)

    def missing(self, key: str) -> bool:
        """Not given at all (an invalid value was given: its problem is already reported)."""
        return key not in self.values and key not in self.invalid

    def text(self, key: str) -> str | None:
        entry = self.values.get(key)
        return None if entry is None else str(entry.value).strip()

    def explicit(self, key: str) -> bool:
        entry = self.values.get(key)
        return entry is not None and entry.origin != "defaults"

    def as_list(self, key: str) -> list[str] | None:
        entry = self.values.get(key)
        if entry is None:
            return None
        if isinstance(entry.value, str):
            return [p for p in re.split(r"[;,\s]+", entry.value) if p]
        return [str(v).strip() for v in entry.value]


def resolve(
    name: str,
    layers: list[tuple[str, dict[str, Any]]],
    facts: Compat,
    *,
    label: str | None = None,
    check_defaults: bool = True,
) -> tuple[Cell | None, list[CellProblem]]:
    """Layer and validate one cell. Returns (cell, []) or (None, problems).

    Each axis is checked on its own wherever it can be, so that one bad value (a CUDA without
    wheels, say) does not hide the other problems of the same cell.
    """
    r = _Resolver(name, label or f"cell {name}", layers, facts)
    for origin, layer in layers:
        if origin == "defaults" and not check_defaults:
            continue  # [defaults] is checked once, by load_matrix
        where = {"defaults": "[defaults]", "cell": r.label, "cli": _CLI}[origin]
        r.problems += _check_layer(layer, where, origin)

    cuda = _resolve_cuda(r)
    platform = _resolve_platform(r)
    release = _resolve_torch(r, cuda, platform)
    toolkit = facts.toolkit(cuda) if cuda else None
    if cuda and toolkit is None:
        r.problem(f"CUDA {cuda}: nvcc's limits (host GCC, GPU archs) are not in the compatibility facts",
                  f"add a [[toolkit]] row for {cuda} to toolchain/data/compat.toml, or use CUDA "
                  f"{_nearest(cuda, [v for t in facts.toolkits for v in t.nvcc])}")
    os_name = _resolve_os(r, cuda)
    python = _resolve_python(r, release, os_name)
    gcc = _resolve_gcc(r, cuda, toolkit, os_name)
    archs, default_archs = _resolve_archs(r, cuda, toolkit)
    flags, extras = _resolve_flags(r)
    apex_repo = _resolve_repo(r)
    apex_ref = _resolve_ref(r)
    index_url = _resolve_index_url(r)
    for key in ("base_devel", "base_runtime"):  # written ones are checked now; derived ones below
        _check_image_ref(r, key, r.text(key))
    explicit_tag = _check_tag(r)
    if explicit_tag is None and apex_ref is not None:
        _check_ref_fits_tag(r, apex_ref)
    if apex_ref and cuda and release:
        _check_apex_ref(r, apex_ref, r.text("torch") or release.version, cuda, flags, release)
    if r.problems or cuda is None or release is None:
        return None, r.problems

    torch_text = r.text("torch")
    torch_version = torch_text if torch_text and torch_text.count(".") >= 2 else release.version
    base_devel, base_runtime = ("", "")
    if cuda in facts.cuda and os_name:
        base_devel, base_runtime = facts.base_images(cuda, os_name)
    base_devel = r.text("base_devel") or base_devel
    base_runtime = r.text("base_runtime") or base_runtime
    if not base_devel or not base_runtime:
        r.problem(f"no base images known for CUDA {cuda} on {os_name}",
                  "set base_devel and base_runtime, or add the CUDA to [cuda] in toolchain/data/compat.toml")
        return None, r.problems
    for key, ref in (("base_devel", base_devel), ("base_runtime", base_runtime)):
        _check_image_ref(r, key, ref)
    if r.problems:
        return None, r.problems

    variant = _variant(r, archs, default_archs, extras, flags, gcc, os_name)
    os_part = "-".join(p for p in (os_name or "", facts.platform(platform or "").id_suffix) if p)
    cell_id = _cell_id(r, explicit_tag, apex_ref, torch_version, cuda, python, os_part, variant)
    if cell_id is None:
        return None, r.problems
    cell = Cell(
        id=cell_id,
        name=name,
        cuda=cuda,
        torch=torch_version,
        python=python or "",
        os=os_name or "",
        gcc=gcc or "",
        archs=tuple(archs),
        apex_repo=apex_repo or facts.apex_repo,
        apex_ref=apex_ref or "",
        apex_flags={flag: "1" for flag in flags},
        extras=tuple(extras),
        base_devel=base_devel,
        base_runtime=base_runtime,
        torch_index_url=index_url or facts.index_url(cuda),
        variant=variant,
        platform=platform or facts.default_platform,
    )
    return cell, r.problems


def _resolve_cuda(r: _Resolver) -> str | None:
    text = r.text("cuda")
    known = r.facts.all_cuda_versions()
    if text is None:
        if r.missing("cuda"):
            r.problem("no CUDA version", f'set cuda = "{known[-1]}" (one of {", ".join(known)})')
        return None
    wheel_tag = _CUDA_WHEEL_TAG.match(text)
    if wheel_tag:  # cu124: PyTorch's index name, not a version; say which version it means
        meant = f"{int(wheel_tag[1])}.{wheel_tag[2]}"
        best = meant if meant in known else _nearest(meant, known)
        r.problem(f"CUDA {shown(text)} is a PyTorch wheel tag, not a CUDA version",
                  f"use {r.how('cuda', best)}" + ("" if best == meant else f" (CUDA {meant} has no PyTorch wheels)"))
        return None
    cuda = text.removeprefix("cu")
    if re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", cuda):
        cuda = compat_mod.minor_of(cuda)  # 12.4.1 -> 12.4: wheels and toolkits are per minor
    if not _MAJOR_MINOR.match(cuda) or cuda not in known:
        r.problem(f"CUDA {shown(text)} has no PyTorch wheels in the compatibility facts",
                  f"use {r.how('cuda', _nearest(cuda, known))} (known: {', '.join(known)})")
        return None
    return cuda


def _resolve_platform(r: _Resolver) -> str | None:
    text = r.text("platform")
    known = list(r.facts.platforms) or [compat_mod.DEFAULT_PLATFORM]
    if text is None:
        return known[0]
    if text not in known:
        hint = did_you_mean(text, known)
        r.problem(f"platform {shown(text)} is not one the facts know",
                  (f"{hint} " if hint else "") + f"use {r.how('platform', known[0])} (one of {', '.join(known)})")
        return None
    return text


def _resolve_torch(r: _Resolver, cuda: str | None, platform: str | None) -> compat_mod.TorchRelease | None:
    """The torch release; checked on its own (known minor, known patch) even when the CUDA is bad."""
    text = r.text("torch")
    machine = r.facts.platform(platform or "")
    on = "" if platform in (None, r.facts.default_platform) else f" {machine.machine}"
    shipping = r.facts.torch_for_cuda(cuda, platform) if cuda and platform else []
    if text is None:
        if cuda is None:
            return None
        if not shipping:
            with_wheels = sorted({c for t in r.facts.torch.values() for c in t.cuda_for(machine)}, key=version_key)
            r.problem(f"no torch release ships{on} wheels for CUDA {cuda} in the compatibility facts",
                      f"use {r.how('cuda', _nearest(cuda, with_wheels))} (CUDA with{on} torch wheels: "
                      f"{', '.join(with_wheels)})" if with_wheels else "pick another CUDA version")
            return None
        return shipping[0]  # newest torch that ships this CUDA
    release = r.facts.torch_release(text) if _TORCH_VERSION.match(text) else None
    if release is None:
        known = sorted(r.facts.torch, key=version_key)
        best = shipping[0].minor if shipping else _nearest(compat_mod.minor_of(text), known)
        r.problem(f"torch {shown(text)} is not in the compatibility facts",
                  f"use {r.how('torch', best)} (known: {', '.join(known)})")
        return None
    if text.count(".") >= 2 and text not in release.patches:
        r.problem(f"torch {text} is not a release in the compatibility facts (torch {release.minor}: "
                  f"{', '.join(release.patches)})",
                  f"use {r.how('torch', release.version)}, or {r.how('torch', release.minor)} for the pinned "
                  f"patch; a newer patch goes into patches of [torch.\"{release.minor}\"] in toolchain/data/compat.toml")
        return None
    if cuda is None or platform is None:
        return release
    builds = release.cuda_for(machine)
    if cuda not in builds:
        if not builds:  # e.g. torch 2.6 on aarch64: PyPI had CPU-only wheels, no CUDA build recorded
            r.problem(f"torch {text} has no{on} CUDA wheels in the compatibility facts",
                      f"use {r.how('torch', shipping[0].minor)} (newest with{on} CUDA {cuda} wheels)" if shipping
                      else f"use {r.how('platform', r.facts.default_platform)}")
            return None
        cu = ", ".join("cu" + c.replace(".", "") for c in builds)
        other_cuda = f"a CUDA it ships ({', '.join(builds)})"
        r.problem(f"torch {text} has no{on} wheel for CUDA {cuda} (it ships {cu})",
                  (f"use {r.how('torch', shipping[0].minor)} (newest for CUDA {cuda}), or " if shipping else "use ")
                  + other_cuda)
        return None
    return release


def _resolve_python(r: _Resolver, release: compat_mod.TorchRelease | None, os_name: str | None) -> str | None:
    text = r.text("python")
    os_facts = r.facts.os.get(os_name or "")
    # what this cell could use: the OS's Pythons (when known) inside torch's range
    shipped = os_facts.python if os_facts else ()
    usable = [p for p in shipped if release is None or release.supports_python(p)]
    suggestion = max(usable, key=version_key) if usable else (release.python_max if release else "3.12")
    if text is None:
        if release is not None and r.missing("python"):
            r.problem("no Python version", f'set python = "{suggestion}" in [defaults] or the cell')
        return None
    if not _MAJOR_MINOR.match(text):
        r.problem(f"Python {shown(text)} is not a MAJOR.MINOR version", f"use {r.how('python', suggestion)}")
        return None
    if release is None:  # torch unknown: what the OS ships can still be checked
        if r.explicit("python") and os_facts is not None and text not in os_facts.python:
            r.problem(f"{os_name} has no python{text} package (it has {', '.join(os_facts.python)})",
                      f"use {r.how('python', max(os_facts.python, key=version_key))} or another os")
        return text
    fitting = usable if os_facts else [text] if release.supports_python(text) else []
    if not r.explicit("python"):
        # [defaults] python is a preference: where the OS or torch cannot have it, take the newest that fits
        if text in fitting:
            return text
        if fitting:
            return max(fitting, key=version_key)
    if not release.supports_python(text):
        nearest = release.python_min if version_key(text) < version_key(release.python_min) else release.python_max
        if usable:  # a version the OS also ships, so the fix works on the first try
            nearest = min(usable, key=lambda p: abs(version_key(p)[1] - version_key(text)[1]))
        r.problem(f"Python {text} is outside torch {release.minor}'s range {release.python_min}-{release.python_max}",
                  f"use {r.how('python', nearest)}")
        return None
    if os_facts is not None and text not in os_facts.python:
        other_os = [o.name for o in r.facts.os.values() if text in o.python]
        alternative = f", or an os that has it ({', '.join(other_os)})" if other_os else ""
        best = max(fitting, key=version_key) if fitting else None
        r.problem(f"{os_name} has no python{text} package (it has {', '.join(os_facts.python)})",
                  (f"use {r.how('python', best)}" if best else "use another os") + alternative)
        return None
    return text


def _resolve_os(r: _Resolver, cuda: str | None) -> str | None:
    text = r.text("os")
    custom_bases = r.text("base_devel") and r.text("base_runtime")
    if text is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", text):
        r.problem(f"os {shown(text)} cannot be part of an image tag", f"use {r.how('os', 'ubuntu22.04')}")
        return None
    if cuda is None:
        return text
    published = r.facts.cuda[cuda].os if cuda in r.facts.cuda else ()
    if text is None:
        return published[0] if published else None
    if custom_bases or text in published:
        return text
    if not r.explicit("os") and published:
        return published[0]  # [defaults] os that this CUDA lacks: use the CUDA's default OS
    r.problem(f"NVIDIA publishes no CUDA {cuda} images for {text}",
              f"use {r.how('os', published[0]) if published else 'another CUDA'}"
              + (f" (one of {', '.join(published)}), or set base_devel/base_runtime" if published else ""))
    return None


def _resolve_gcc(r: _Resolver, cuda: str | None, toolkit: compat_mod.Toolkit | None, os_name: str | None) -> str | None:
    text = r.text("gcc")
    os_facts = r.facts.os.get(os_name or "")
    limit = toolkit.gcc_max if toolkit else 99
    if text is not None and r.explicit("gcc"):
        if not re.fullmatch(r"[0-9]+", text):
            fit = _gcc_fit(os_facts, limit) or (str(toolkit.gcc_max) if toolkit else "13")
            r.problem(f"GCC {shown(text)} is not a major version", f"use {r.how('gcc', fit)}")
            return None
        if toolkit is not None and int(text) > toolkit.gcc_max:
            newer = [t for t in r.facts.toolkits if t.gcc_max >= int(text)]
            hint = f", or CUDA {newer[0].nvcc[0]}+" if newer else ""
            # suggest a GCC the OS packages too, so the fix works on the first try
            packaged = [g for g in os_facts.gcc if int(g) <= toolkit.gcc_max] if os_facts else [str(toolkit.gcc_max)]
            fix = f"use {r.how('gcc', max(packaged, key=int))}" if packaged else f"use another os than {os_name}"
            r.problem(f"GCC {text} is newer than nvcc {cuda} allows (newest: {toolkit.gcc_max})", fix + hint)
            return None
        if os_facts is not None and text not in os_facts.gcc:
            fit = _gcc_fit(os_facts, limit)  # one the OS packages AND nvcc accepts
            r.problem(f"{os_name} has no gcc-{text} package (it has {', '.join(os_facts.gcc)})",
                      f"use {r.how('gcc', fit)} or another os" if fit else "use another os")
            return None
        return text
    if os_facts is None:
        return text  # custom base image: the image's own compiler unless one is named
    fit = _gcc_fit(os_facts, limit)
    if fit is None:
        r.problem(f"{os_name} has no GCC that nvcc {cuda} accepts (newest: {limit})", "use another os")
    return fit


def _gcc_fit(os_facts: compat_mod.OsRelease | None, limit: int) -> str | None:
    """The GCC a cell gets when it names none: the OS's default, else its newest one nvcc accepts."""
    if os_facts is None:
        return None
    if int(os_facts.gcc_default) <= limit:
        return os_facts.gcc_default
    fitting = [g for g in os_facts.gcc if int(g) <= limit]
    return max(fitting, key=int) if fitting else None


def _resolve_archs(r: _Resolver, cuda: str | None, toolkit: compat_mod.Toolkit | None) -> tuple[list[str], list[str]]:
    """(archs to build, the defaults' archs for this toolkit) — the second decides the tag variant."""
    entry = r.get("archs")
    from_defaults = entry is not None and entry.origin == "defaults"
    requested = r.as_list("archs")
    if requested is None:
        if r.missing("archs"):
            r.problem("no GPU archs", 'set archs = ["8.0", "9.0"] in [defaults] or the cell')
        return [], []
    if not requested:  # archs = [] or --archs ';': the build would fail after the devel stage
        r.problem("archs is empty", f"list at least one compute capability: {r.how('archs', '9.0')} (H100/H200)")
        return [], []
    parsed: list[tuple[str, tuple[str, str, bool]]] = []
    for arch in requested:
        got = parse_arch(arch)
        if got is None:
            digits = re.sub(r"[^0-9]", "", arch)[:4]
            guess = f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 else "9.0"
            r.problem(f"arch {shown(arch)} is not a compute capability", f"write it as {guess} (e.g. 9.0 for H100/H200)")
            continue
        parsed.append((arch.strip(), got))
    if toolkit is None:
        return [a for a, _ in parsed], [a for a, _ in parsed]
    fits = [(a, p) for a, p in parsed if p[0] in toolkit.archs]
    if from_defaults:  # archs from [defaults]: keep those this toolkit compiles
        kept = _with_ptx(_sort_archs([a for a, _ in fits]), toolkit)
        if not kept and parsed:
            r.problem(f"none of the default archs {', '.join(requested)} can be compiled by nvcc {cuda}",
                      f"set archs in [cells.{r.name}] to some of {', '.join(toolkit.archs)}")
        return kept, kept
    for arch, (num, _suffix, _ptx) in parsed:
        if num not in toolkit.archs:
            able = [t.nvcc for t in r.facts.toolkits if num in t.archs]
            where = f"CUDA {able[0][0]}-{able[-1][-1]}" if able else "no CUDA in the facts"
            r.problem(f"arch {arch} cannot be compiled by nvcc {cuda} "
                      f"(it compiles {toolkit.archs[0]}-{toolkit.archs[-1]})",
                      f"drop {arch} from archs, or build it with {where}")
    defaults_for_toolkit = _sort_archs([a for a in r.defaults_archs if (parse_arch(a) or ("",))[0] in toolkit.archs])
    return _sort_archs([a for a, _ in fits]), _with_ptx(defaults_for_toolkit, toolkit)


def _with_ptx(archs: list[str], toolkit: compat_mod.Toolkit) -> list[str]:
    """Default archs for a toolkit whose row says so end in PTX for the highest one (as PyTorch's
    CUDA 13 wheels: "...;12.0+PTX"), so a newer GPU JIT-compiles it instead of failing."""
    if not toolkit.ptx_on_highest or not archs or any((parse_arch(a) or ("", "", False))[2] for a in archs):
        return archs
    return [*archs[:-1], archs[-1] + "+PTX"]


def _sort_archs(archs: list[str]) -> list[str]:
    unique = list(dict.fromkeys(archs))
    return sorted(unique, key=lambda a: (version_key((parse_arch(a) or ("0.0",))[0]), a))


def extra_flag_names() -> dict[str, str]:
    """Contrib/deprecated extension names users write in EXTRAS -> their APEX_* flag."""
    from verify import module_map  # the module map is the one source of flags

    names: dict[str, str] = {}
    core = set(compat_mod.load().apex_core_flags)
    for flag in module_map.known_flags():
        if flag in core:
            continue
        names[flag.removeprefix("APEX_").lower()] = flag
    names["all"] = names.pop("all_contrib_ext", "APEX_ALL_CONTRIB_EXT")
    for module in module_map.modules():
        if module.flag not in core:
            names.setdefault(module.name, module.flag)
    return names


def _resolve_flags(r: _Resolver) -> tuple[list[str], list[str]]:
    from verify import module_map

    known = module_map.known_flags()
    written = r.as_list("apex_flags")
    flags: list[str] = []
    if written is None:
        flags = list(r.facts.apex_core_flags)
    for item in written or []:
        flag, is_set, value = (part.strip() for part in item.partition("="))
        flag = flag.upper()
        if is_set and value.lower() in _FLAG_OFF:
            # the list says what is built: APEX_CPP_EXT=0 in it would be read as "build it"
            r.problem(f"apex_flags: {shown(item)} turns a flag off, but apex_flags lists the flags to build",
                      f"drop {flag} from apex_flags (a flag not listed is off)")
            continue
        if is_set and value != "1":
            r.problem(f"apex_flags: {shown(item)} is not a flag to turn on", f"write {flag} (or {flag}=1)")
            continue
        if flag not in known:
            r.problem(f"apex_flags: unknown flag {shown(flag, quote=False)}",
                      did_you_mean(flag, known) or f"use one of {', '.join(known)}")
            continue
        flags.append(flag)
    extras_text = r.as_list("extras") or []
    by_name = extra_flag_names()
    extras: list[str] = []
    for extra in extras_text:
        key = extra.lower()
        if key in by_name:
            canonical = next(n for n, f in by_name.items() if f == by_name[key])
            extras.append(canonical)
        elif extra.upper() in by_name.values():
            extras.append(next(n for n, f in by_name.items() if f == extra.upper()))
        else:
            short = [n for n in by_name if not n.endswith(("_cuda", "_lib"))]
            r.problem(f"extras: unknown contrib extension {shown(extra)}",
                      did_you_mean(key, by_name) or f"use some of {', '.join(short)}")
    extras = list(dict.fromkeys(extras))
    for extra in extras:
        flag = by_name[extra]
        if flag not in flags:
            flags.append(flag)
    return list(dict.fromkeys(flags)), extras


def _resolve_ref(r: _Resolver) -> str | None:
    if "apex_ref" in r.invalid:
        return None
    ref = r.text("apex_ref") or r.facts.apex_default_ref
    if not _GIT_REF.match(ref):
        r.problem(f"apex_ref {shown(ref)} is not a git commit, tag or branch name",
                  f"use {r.how('apex_ref', r.facts.apex_default_ref[:12])} (a commit sha) or a tag like 24.04.01")
        return None
    return ref


def _resolve_repo(r: _Resolver) -> str | None:
    """apex_repo: what git clones. A URL or a path, never something git could read as an option."""
    repo = r.text("apex_repo")
    if repo is not None and not _GIT_URL.match(repo):
        r.problem(f"apex_repo {shown(repo)} is not a git URL or an absolute path",
                  f"use {r.how('apex_repo', r.facts.apex_repo)} (https://, ssh://, git://, file://, "
                  "user@host:path or /path)")
        return None
    return repo


def _resolve_index_url(r: _Resolver) -> str | None:
    url = r.text("torch_index_url")
    if url is not None and not _INDEX_URL.match(url):
        r.problem(f"torch_index_url {shown(url)} is not an http(s):// or file:// URL",
                  f"use {r.how('torch_index_url', 'https://download.pytorch.org/whl/cu124')} (a pip index)")
        return None
    return url


def _check_image_ref(r: _Resolver, key: str, ref: str | None) -> None:
    if ref and not _IMAGE_REF.match(ref):
        r.problem(f"{key} {shown(ref)} is not an image reference docker accepts",
                  f"use {r.how(key, 'nvidia/cuda:12.4.1-devel-ubuntu22.04')} or pin a digest: "
                  "name@sha256:<64 hex digits>")


def _check_tag(r: _Resolver) -> str | None:
    """An explicit tag, if it is one docker accepts (else a problem and None)."""
    explicit = r.text("tag")
    if explicit is None or TAG_RE.match(explicit):
        return explicit
    bad = sorted({ch for ch in explicit if not re.match(r"[A-Za-z0-9_.-]", ch)})
    why = f"has characters {''.join(bad)!r} a docker tag cannot hold" if bad else "is not a valid docker tag"
    if len(explicit) > TAG_MAX:
        why = f"is {len(explicit)} characters long (docker allows {TAG_MAX})"
    r.problem(f"tag {shown(explicit)} {why}",
              f"use only letters, digits, '_', '.', '-', at most {TAG_MAX} characters, not starting with '.' or '-'")
    return None


def _check_ref_fits_tag(r: _Resolver, ref: str) -> None:
    """Without an explicit tag, the ref (or its short sha) becomes part of the image tag."""
    short = ref[:7] if _HEX_SHA.match(ref) else ref
    if r.missing("tag") and not re.fullmatch(r"[A-Za-z0-9_.-]+", short):
        r.problem(f"apex_ref {shown(ref)} cannot be part of an image tag (only letters, digits, '_', '.', '-')",
                  f"use the commit sha as apex_ref, or set {r.how('tag', 'my-tag', like='apex_ref')}")


def _check_apex_ref(r: _Resolver, ref: str, torch: str, cuda: str, flags: list[str],
                    release: compat_mod.TorchRelease) -> None:
    """An Apex ref x torch x CUDA known not to compile, or extras the ref does not have (toolchain.spec.apex_refs)."""
    from toolchain.spec import apex_refs

    row = apex_refs.known_failure(ref, torch, cuda, flags)
    if row is not None:
        fine = [c for c in release.cuda if not row.holds(ref, torch, c, flags)]
        fixes = [f"use {r.how('cuda', max(fine, key=version_key))} (torch {release.minor} ships it)"] if fine else []
        if row.fix_ref:
            fixes.append(f"use {r.how('apex_ref', row.fix_ref[:12])}")
        r.problem(f"Apex {ref} does not compile against CUDA {cuda} ({row.error}): {row.cause}",
                  " or ".join(fixes or ["use an Apex ref or CUDA outside this known failure"])
                  + f" [evidence: {row.evidence.split(' ', 1)[0].rstrip(':;,')}]")
    for flag, why in apex_refs.absent_modules(ref, flags, r.facts.apex_default_ref):
        r.problem(f"apex_ref {ref} has no module for {flag} ({why})",
                  "drop it from extras/apex_flags, or use an apex_ref that has it")


def _variant(r: _Resolver, archs: list[str], default_archs: list[str], extras: list[str],
             flags: list[str], gcc: str | None, os_name: str | None) -> str:
    parts: list[str] = []
    if archs != default_archs:
        parts.append("sm" + "_".join(_arch_token(a) for a in archs))
    if extras:
        parts.append("ext." + ".".join(sorted(extras)))
    core = list(r.facts.apex_core_flags)
    base_flags = [f for f in flags if f not in {extra_flag_names()[e] for e in extras}]
    if sorted(base_flags) != sorted(core):
        parts.append("flags." + ".".join(f.removeprefix("APEX_").lower() for f in sorted(base_flags)))
    os_facts = r.facts.os.get(os_name or "")
    if r.explicit("gcc") and gcc and os_facts is not None and gcc != os_facts.gcc_default:
        parts.append(f"gcc{gcc}")
    return "-".join(parts)


def _arch_token(arch: str) -> str:
    num, suffix, ptx = parse_arch(arch) or (arch, "", False)
    return num.replace(".", "") + suffix + ("ptx" if ptx else "")


def _cell_id(r: _Resolver, explicit: str | None, apex_ref: str | None, torch: str, cuda: str,
             python: str | None, os_name: str | None, variant: str) -> str | None:
    """The explicit tag (already checked), else the id made from the cell's values."""
    if explicit is not None:
        return explicit
    ref = apex_ref or ""
    short = ref[:7] if _HEX_SHA.match(ref) else ref
    cell_id = f"apex-{short}-torch{torch}-cu{cuda}-py{python}-{os_name}"
    if variant:
        candidate = f"{cell_id}-{variant}"
        if len(candidate) > TAG_MAX:  # keep the tag legal; the full variant is in the labels/plan
            candidate = f"{cell_id}-v{hashlib.sha256(variant.encode()).hexdigest()[:10]}"
        cell_id = candidate
    if not TAG_RE.match(cell_id):
        r.problem(f"the image tag {shown(cell_id)} would be invalid",
                  f"set {r.how('tag', 'a-short-tag')} with letters, digits, '_', '.', '-'")
        return None
    return cell_id


# --- structural checks ------------------------------------------------------------------------


def _check_keys(table: Mapping[str, Any], allowed: Iterable[str], where: str, what: str) -> list[CellProblem]:
    allowed = list(allowed)
    return [
        CellProblem(where, f"unknown key {shown(key)}", did_you_mean(key, allowed) or f"use one of {', '.join(allowed)}")
        for key in table
        if key not in allowed
    ]


def _check_layer(layer: Mapping[str, Any], where: str, origin: str = "cell") -> list[CellProblem]:
    problems = _check_keys(layer, CELL_KEYS, where, "a cell key")
    for key, value in layer.items():
        if key in CELL_KEYS and value is not None and value != "":
            problems += [CellProblem(where, p.problem, p.fix) for p in _field_problems(key, value, origin)]
    return problems


# --- field types and characters ---------------------------------------------------------------
# The shape of each cell field, checked before what it means. Kept here, as data plus one function,
# so that it can later hand the type part to a shared field checker with dotted paths.

LIST_MAX = 64  # entries of one list field (archs, extras, apex_flags)
_TOML_TYPES = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
               (list, "an array"), (dict, "a table"))
# ASCII control characters other than tab, LF and CR (those are whitespace the field grammars refuse)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclasses.dataclass(frozen=True)
class FieldProblem:
    path: str  # the field, dotted like the shared checker's: "archs", "archs[1]"
    problem: str
    fix: str


def _toml_type(value: Any) -> str:
    return next((name for kind, name in _TOML_TYPES if isinstance(value, kind)), "a date/time")


def _field_problems(key: str, value: Any, origin: str) -> list[FieldProblem]:
    """What is wrong with the type or the characters of one field (empty: the resolver may read it)."""
    want = CELL_KEYS[key]
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    literal = value if len(shown(value)) <= 40 else "..."
    if isinstance(value, str):
        return _text_problems(key, key, value, origin)
    if want is str:
        if is_number:  # cuda = 12.4 (a TOML float) is a classic slip: 12.10 would read as 12.1
            return [FieldProblem(key, f"{key} = {shown(value)} is a number", f'quote it: {key} = "{literal}"')]
        return [FieldProblem(key, f"{key} must be a string, not {_toml_type(value)}", f'write {key} = "..."')]
    if is_number:  # archs = 9.0: one number where a list of strings is expected
        return [FieldProblem(key, f"{key} = {shown(value)} is a number, not a list", f'write {key} = ["{literal}"]')]
    if not isinstance(value, list):
        return [FieldProblem(key, f"{key} must be an array of strings, not {_toml_type(value)}",
                             f'write {key} = ["..."]')]
    if len(value) > LIST_MAX:
        return [FieldProblem(key, f"{key} has {len(value)} entries (at most {LIST_MAX})", "list fewer")]
    problems: list[FieldProblem] = []
    for index, item in enumerate(value):
        path = f"{key}[{index}]"
        if isinstance(item, str):
            problems += _text_problems(path, key, item, origin)
        elif isinstance(item, bool) or not isinstance(item, (int, float)):  # numbers: 9.0 reads as "9.0"
            problems.append(FieldProblem(path, f"{path} must be a string, not {_toml_type(item)}",
                                         f'write it in quotes: {key} = ["...", "..."]'))
    return problems


def _text_problems(path: str, key: str, text: str, origin: str) -> list[FieldProblem]:
    if len(text) > FIELD_MAX:
        return [FieldProblem(path, f"{path} is {len(text)} characters long (at most {FIELD_MAX})",
                             "write the version, name, ref or URL it should be")]
    if not text.isascii():
        odd = list(dict.fromkeys(ch for ch in text if not ch.isascii()))
        named = ", ".join(f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')}" for ch in odd[:3])
        ascii_text = _ascii_form(text)
        if ascii_text is None:
            fix = "use ASCII letters, digits and punctuation only"
        elif origin == "cli" and path == key:
            fix = f"write it in ASCII: --{key.replace('_', '-')} {shown(ascii_text, quote=False)}"
        else:
            fix = f"write it in ASCII: {shown(ascii_text).replace(chr(39), chr(34))}"
        return [FieldProblem(path, f"{path} {shown(text)} has non-ASCII characters ({named})", fix)]
    control = _CONTROL.search(text)
    if control:
        return [FieldProblem(path, f"{path} {shown(text)} holds a control character (U+{ord(control[0]):04X})",
                             "remove it")]
    return []  # tab, LF, CR: separators in "8.0 9.0"-style lists; the other fields' grammars refuse them


def _ascii_form(text: str) -> str | None:
    """'１２.4' -> '12.4', '٣.١١' -> '3.11' (any script's decimal digits, full-width forms); None if no such form."""
    out: list[str] = []
    for ch in text:
        if ch.isascii():
            out.append(ch)
        elif unicodedata.decimal(ch, None) is not None:
            out.append(str(unicodedata.decimal(ch)))
        elif unicodedata.category(ch) == "Cf":  # zero-width and direction marks: invisible, dropped
            continue
        else:
            folded = unicodedata.normalize("NFKC", ch)
            if not folded.isascii():
                return None
            out.append(folded)
    return "".join(out)


def _check_unique(cells: list[Cell]) -> list[CellProblem]:
    seen: dict[str, str] = {}
    problems = []
    for cell in cells:
        if cell.id in seen:
            problems.append(CellProblem(f"cell {cell.name}",
                                        f"resolves to the same image tag as cell {seen[cell.id]} ({cell.id})",
                                        "change its python/archs/extras, or remove one of the two"))
        seen.setdefault(cell.id, cell.name)
    return problems


def _nearest(value: str, choices: list[str]) -> str:
    """The choice closest to value (numerically for versions); the newest when none is close."""
    return next(iter(closest(value, choices)), max(choices, key=version_key))
