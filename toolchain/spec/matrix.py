"""matrix.toml -> validated, frozen Cells.

Values are layered: compatibility facts -> [defaults] -> [cells.NAME] -> command-line overrides.
Values you write in a cell or on the command line are checked strictly against the facts; values you
leave out are chosen to fit (newest torch for the CUDA, the CUDA's default OS, the newest GCC that the
OS ships and nvcc accepts, the default archs that the toolkit can compile). Every cell is validated
before anything is built, and every problem is reported at once (MatrixError, exit 2).

Here: the file and the layering. The fields themselves: cell_fields.py (the table), field_shapes.py
(types, characters), stack_fields.py and apex_fields.py (meaning, against the facts), cell_naming.py
(image references, tag, cell id); cell_values.py holds one cell's layered values while they resolve.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from toolchain.errors import CellProblem, MatrixError, UsageError
from toolchain.spec import apex_fields as apex
from toolchain.spec import cell_naming as naming
from toolchain.spec import compat as compat_mod
from toolchain.spec import stack_fields as stack
from toolchain.spec.cell import Cell
from toolchain.spec.cell_id import CellId
from toolchain.spec.cell_values import CellValues, nearest
from toolchain.spec.compat import Compat
from toolchain.spec.field_shapes import check_keys, check_layer
from toolchain.spec.toml_loader import load_toml
from verify.domain.arch import Arch
from verify.runtime.messages import did_you_mean, shown

FORMAT_VERSION = 1
TOP_KEYS = ("format_version", "defaults", "cells", "published")
_CLI = "command line"
# [cells.NAME]: NAME becomes a label, a bake target and a --cell value.
_CELL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


@dataclasses.dataclass(frozen=True)
class Matrix:
    path: Path
    defaults: dict[str, object]  # [defaults] as the file wrote it
    cells: tuple[Cell, ...]
    published: tuple[str, ...] = ()  # [published] cells: the wheels the publish workflow puts on the index

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
    path: str | Path, *, facts: Compat | None = None, overrides: Mapping[str, object] | None = None
) -> Matrix:
    """Load and validate every cell; raise MatrixError naming each bad cell and its fix."""
    path = Path(path)
    raw = load_toml(path)
    facts = facts or compat_mod.load()
    problems: list[CellProblem] = []
    problems += check_keys(raw, TOP_KEYS, "top level", "a table at the top of the file")
    version = raw.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        problems.append(
            CellProblem(
                "top level",
                f"format_version = {shown(version)} is not supported",
                f"write format_version = {FORMAT_VERSION}",
            )
        )
    defaults = raw.get("defaults", {})
    cells_raw = raw.get("cells", {})
    if not isinstance(defaults, dict):
        problems.append(
            CellProblem("[defaults]", "must be a table", "write [defaults] with key = value lines")
        )
        defaults = {}
    if not isinstance(cells_raw, dict) or not cells_raw:
        problems.append(
            CellProblem(
                "[cells]", "no cells defined", 'add at least one [cells.NAME] table with cuda = "12.4"'
            )
        )
        cells_raw = {}
    problems += check_layer(defaults, "[defaults]", "defaults")
    cells: list[Cell] = []
    for name, table in cells_raw.items():
        label = f"cell {name}"
        if not _CELL_NAME.match(name):  # the name is a label, a bake target, a --cell value: keep it plain
            label = f"cell {shown(name)}"
            problems.append(
                CellProblem(
                    label,
                    "the cell name has characters other than letters, digits, '_', '.', "
                    "'-' (or is longer than 64)",
                    "rename the table, e.g. [cells.cu124]",
                )
            )
        if not isinstance(table, dict):
            problems.append(
                CellProblem(label, "must be a table", f'write [cells.{name}] with cuda = "12.4" under it')
            )
            continue
        layers = [("defaults", defaults), ("cell", table)]
        if overrides:
            layers.append(("cli", dict(overrides)))
        cell, cell_problems = resolve(name, layers, facts, label=label, check_defaults=False)
        problems += cell_problems
        if cell is not None:
            cells.append(cell)
    problems += _check_unique(cells)
    published, published_problems = _published(raw.get("published", {}), list(cells_raw))
    problems += published_problems
    if problems:
        raise MatrixError(problems, source=str(path))
    return Matrix(path=path, defaults=defaults, cells=tuple(cells), published=published)


def _published(table: object, names: list[str]) -> tuple[tuple[str, ...], list[CellProblem]]:
    """[published] cells = ["cu130", ...]: names of cells defined above, each once."""
    fix = 'write [published] with cells = ["cu130", ...], names of [cells.NAME] tables'
    if not isinstance(table, dict):
        return (), [CellProblem("[published]", "must be a table", fix)]
    problems = [
        CellProblem("[published]", f"unknown key {shown(k)}", fix) for k in sorted(set(table) - {"cells"})
    ]
    given = table.get("cells", [])
    if not isinstance(given, list) or not all(isinstance(n, str) for n in given):
        return (), [*problems, CellProblem("[published]", "cells must be a list of cell names", fix)]
    for name in given:
        if name not in names:
            hint = did_you_mean(name, names)
            problems.append(
                CellProblem(
                    "[published]",
                    f"cells names {shown(name)}, which is no cell of this file",
                    hint or f"use one of {', '.join(names)}",
                )
            )
    if len(set(given)) != len(given):
        problems.append(CellProblem("[published]", "cells names a cell twice", "name each cell once"))
    return tuple(given), problems


def cli_cell(
    overrides: Mapping[str, object],
    *,
    matrix_path: str | Path | None = None,
    base_cell: str | None = None,
    facts: Compat | None = None,
) -> Cell:
    """One cell from the command line: [defaults] (+ the named cell) + overrides, validated."""
    facts = facts or compat_mod.load()
    defaults: dict[str, object] = {}
    table: dict[str, object] = {}
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


def resolve(
    name: str,
    layers: Sequence[tuple[str, Mapping[str, object]]],
    facts: Compat,
    *,
    label: str | None = None,
    check_defaults: bool = True,
) -> tuple[Cell | None, list[CellProblem]]:
    """Layer and validate one cell. Returns (cell, []) or (None, problems).

    Each axis is checked on its own wherever it can be, so that one bad value (a CUDA without
    wheels, say) does not hide the other problems of the same cell.
    """
    r = CellValues(name, label or f"cell {name}", layers, facts)
    _check_layers(r, layers, check_defaults)
    axes = _resolve_axes(r, facts)
    explicit_tag = _cross_check(r, axes)
    cuda, release = axes.cuda, axes.release
    if r.problems or cuda is None or release is None:
        return None, r.problems
    torch_text = r.text("torch")
    torch_version = torch_text if torch_text and torch_text.count(".") >= 2 else release.version
    bases = _resolve_bases(r, facts, axes, cuda, torch_version)
    if bases is None:
        return None, r.problems
    return _make_cell(r, name, facts, axes, cuda, bases, explicit_tag, torch_version), r.problems


@dataclasses.dataclass(frozen=True)
class _Axes:
    """One cell's values, each resolved against the facts on its own (None where it could not be)."""

    cuda: str | None
    platform: str | None
    release: compat_mod.TorchRelease | None
    toolkit: compat_mod.Toolkit | None  # nvcc's limits for the CUDA, None when the facts lack it
    os_name: str | None
    python: str | None
    gcc: str | None
    archs: list[Arch]
    default_archs: list[Arch]  # the defaults' archs for this toolkit (they decide the tag variant)
    flags: list[str]
    extras: list[str]
    apex_repo: str | None
    apex_ref: str | None
    index_url: str | None


@dataclasses.dataclass(frozen=True)
class _Bases:
    """The base images a cell stands on, the route they came by, and what the route implies."""

    devel: str
    runtime: str
    route: str  # nvidia | local | given
    index_url: str | None
    os_cuda: compat_mod.OsCuda | None  # the OS's own CUDA packages (local route)


def _check_layers(
    r: CellValues, layers: Sequence[tuple[str, Mapping[str, object]]], check_defaults: bool
) -> None:
    """The keys, types and characters of each layer, named where they were written."""
    for origin, layer in layers:
        if origin == "defaults" and not check_defaults:
            continue  # [defaults] is checked once, by load_matrix
        where = {"defaults": "[defaults]", "cell": r.label, "cli": _CLI}[origin]
        r.problems += check_layer(layer, where, origin)


def _resolve_axes(r: CellValues, facts: Compat) -> _Axes:
    cuda = stack.resolve_cuda(r)
    platform = stack.resolve_platform(r)
    release = stack.resolve_torch(r, cuda, platform)
    toolkit = facts.toolkit(cuda) if cuda else None
    if cuda and toolkit is None:
        r.problem(
            f"CUDA {cuda}: nvcc's limits (host GCC, GPU archs) are not in the compatibility facts",
            f"add a [[toolkit]] row for {cuda} to toolchain/data/compat.toml, or use CUDA "
            f"{nearest(cuda, [v for t in facts.toolkits for v in t.nvcc])}",
        )
    os_name = stack.resolve_os(r, cuda)
    python = stack.resolve_python(r, release, os_name)
    gcc = stack.resolve_gcc(r, cuda, toolkit, os_name)
    archs, default_archs = stack.resolve_archs(r, cuda, toolkit)
    flags, extras = apex.resolve_flags(r)
    apex_repo = apex.resolve_repo(r)
    apex_ref = apex.resolve_ref(r)
    index_url = stack.resolve_index_url(r)
    return _Axes(
        cuda,
        platform,
        release,
        toolkit,
        os_name,
        python,
        gcc,
        archs,
        default_archs,
        flags,
        extras,
        apex_repo,
        apex_ref,
        index_url,
    )


def _cross_check(r: CellValues, axes: _Axes) -> str | None:
    """The checks that span fields (written base images, the tag, the Apex ref against torch and CUDA, the
    host's glibc against nvcc); returns the explicit tag, or None."""
    for key in ("base_devel", "base_runtime"):  # written ones are checked now; derived ones below
        naming.check_image_ref(r, key, r.text(key))
    explicit_tag = naming.check_tag(r)
    if explicit_tag is None and axes.apex_ref is not None:
        naming.check_ref_fits_tag(r, axes.apex_ref)
    if axes.apex_ref and axes.cuda and axes.release:
        apex.check_apex_ref(
            r, axes.apex_ref, r.text("torch") or axes.release.version, axes.cuda, axes.flags, axes.release
        )
    if axes.os_name and axes.cuda:
        stack.check_host_clash(r, axes.os_name, axes.cuda)
    return explicit_tag


def _route(r: CellValues, facts: Compat, cuda: str, os_name: str | None) -> tuple[str, str, str]:
    """(base devel, base runtime, route): NVIDIA's images, else the OS's local base, else the given ones."""
    base_devel, base_runtime, route = ("", "", "nvidia")
    if cuda in facts.cuda and os_name in facts.cuda[cuda].os:
        base_devel, base_runtime = facts.base_images(cuda, os_name)
    elif (
        os_name in facts.local_bases
    ):  # no NVIDIA image for this OS: its debootstrap base, CUDA from the wheels
        base_devel = base_runtime = facts.local_bases[os_name].image
        route = "local"
    if r.text("base_devel") or r.text("base_runtime"):
        route = "given"
    return r.text("base_devel") or base_devel, r.text("base_runtime") or base_runtime, route


def _resolve_bases(r: CellValues, facts: Compat, axes: _Axes, cuda: str, torch_version: str) -> _Bases | None:
    """The cell's base images and route; None (with the problem recorded) when it has none that can build."""
    os_name, index_url = axes.os_name, axes.index_url
    base_devel, base_runtime, route = _route(r, facts, cuda, os_name)
    if route == "local" and not index_url and facts.pypi_carries(torch_version, cuda):
        index_url = (
            facts.pypi_index_url
        )  # PyPI's own wheel is this CUDA build and brings every CUDA library but nvcc
    os_cuda = facts.cuda_from_os(os_name or "", cuda) if route == "local" else None
    if route == "local" and axes.toolkit is not None and not axes.toolkit.nvcc_wheel and os_cuda is None:
        carriers = [o.os for o in facts.os_cuda.values() if o.cuda == cuda]
        r.problem(
            f"CUDA {cuda} on the local base {os_name}: NVIDIA's wheels hold no nvcc {cuda} (its -cu12 wheel "
            f"ships ptxas only) and {os_name}'s archive has no CUDA {cuda}",
            (
                f"use {r.how('os', carriers[0])} (its archive has CUDA {cuda})"
                if carriers
                else "use CUDA 13.0 or newer"
            )
            + ", or base images with nvcc (base_devel/base_runtime)",
        )
        return None
    if not base_devel or not base_runtime:
        r.problem(
            f"no base images known for CUDA {cuda} on {os_name}",
            "set base_devel and base_runtime, or add the CUDA to [cuda] in toolchain/data/compat.toml",
        )
        return None
    for key, ref in (("base_devel", base_devel), ("base_runtime", base_runtime)):
        naming.check_image_ref(r, key, ref)
    if r.problems:
        return None
    return _Bases(base_devel, base_runtime, route, index_url, os_cuda)


def _make_cell(
    r: CellValues,
    name: str,
    facts: Compat,
    axes: _Axes,
    cuda: str,
    bases: _Bases,
    explicit_tag: str | None,
    torch_version: str,
) -> Cell | None:
    """The frozen Cell with its id and registry tag; None (with the problem recorded) when no id fits."""
    os_name, python, apex_ref = axes.os_name, axes.python, axes.apex_ref
    variant = naming.variant_of(r, axes.archs, axes.default_archs, axes.extras, axes.flags, axes.gcc, os_name)
    suffix = facts.platform(axes.platform or "").id_suffix
    os_part = "-".join(p for p in (os_name or "", suffix) if p)
    made = naming.make_cell_id(r, explicit_tag, apex_ref, torch_version, cuda, python, os_part, variant)
    if made is None:
        return None
    cell_id = str(made)
    # the registry tag leaves the platform out: the stack's platforms go under one tag (an OCI index)
    image_tag = (
        ""
        if explicit_tag is not None or not suffix
        else str(naming.make_cell_id(r, None, apex_ref, torch_version, cuda, python, os_name, variant) or "")
    )
    os_cuda = bases.os_cuda
    return Cell(
        id=cell_id,
        name=name,
        cuda=cuda,
        torch=torch_version,
        python=python or "",
        os=os_name or "",
        gcc=axes.gcc or "",
        archs=tuple(axes.archs),
        apex_repo=axes.apex_repo or facts.apex_repo,
        apex_ref=apex_ref or "",
        apex_flags={flag: "1" for flag in axes.flags},
        extras=tuple(axes.extras),
        base_devel=bases.devel,
        base_runtime=bases.runtime,
        torch_index_url=bases.index_url or facts.index_url(cuda),
        variant=variant,
        platform=axes.platform or facts.default_platform,
        image_tag=image_tag if image_tag != cell_id else "",
        base_route=bases.route,
        os_cuda_packages=os_cuda.packages if os_cuda else (),
        os_cuda_components=os_cuda.components if os_cuda else (),
        made_id=made if isinstance(made, CellId) else None,
    )


def _check_unique(cells: list[Cell]) -> list[CellProblem]:
    seen: dict[str, str] = {}
    problems = []
    for cell in cells:
        if cell.id in seen:
            problems.append(
                CellProblem(
                    f"cell {cell.name}",
                    f"resolves to the same image tag as cell {seen[cell.id]} ({cell.id})",
                    "change its python/archs/extras, or remove one of the two",
                )
            )
        seen.setdefault(cell.id, cell.name)
    return problems
