"""The commands over matrix cells: plan, validate, image, matrix, and report (the table of every cell
the runs left)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from toolchain.commands.parts import load_part, preflight
from toolchain.console import Console
from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.runs.run_request import RunRequest
from toolchain.spec import cell_fields
from toolchain.spec import matrix as matrix_mod
from verify.runtime import atomic, exit_codes
from verify.runtime.messages import printable

REPO_ROOT = Path(__file__).resolve().parents[2]


def default_matrix_path() -> Path:
    local = Path("matrix.toml")
    return local if local.exists() else REPO_ROOT / "matrix.toml"


def overrides_from(args: argparse.Namespace) -> dict[str, str]:
    """The cell fields given on the command line (each option's dest is its matrix key)."""
    return {
        f.name: value for f in cell_fields.FIELDS if (value := getattr(args, f.name, None)) not in (None, "")
    }


def resolve_cells(args: argparse.Namespace, *, all_when_empty: bool) -> list[matrix_mod.Cell]:
    """The cell(s) a command acts on. Every matrix cell is validated first, whatever is selected."""
    path = args.matrix or default_matrix_path()
    overrides = overrides_from(args)
    if overrides or args.cell or not all_when_empty:
        if not overrides and not args.cell:
            what = "IMAGE, or a cell" if args.command == "verify" else "a cell"
            raise UsageError(
                f"{args.command}: no {what} given; pass --cuda 12.4 (or --cell NAME from {path})"
            )
        return [matrix_mod.cli_cell(overrides, matrix_path=path, base_cell=args.cell)]
    return list(matrix_mod.load_matrix(path).cells)


def for_target(cells: list[matrix_mod.Cell], request: RunRequest) -> list[matrix_mod.Cell]:
    """Each cell as its --target builds it (an image without Apex is not tagged as if it held Apex), and
    the --wheelhouse checked against it: bad input is exit 2 before any build."""
    from toolchain.spec import targets

    wheelhouse = load_part("image.wheelhouse")
    built = [targets.for_target(cell, request.target, request.wheelhouse) for cell in cells]
    for cell in built:
        wheelhouse.check(cell, request.wheelhouse)
    return built


def _reresolver(args: argparse.Namespace) -> Any:
    """Resolve a cell again with some fields changed (the local base's OS): its own layers, then the change."""
    path = args.matrix or default_matrix_path()

    def again(cell: matrix_mod.Cell, changes: dict[str, str]) -> matrix_mod.Cell:
        given = overrides_from(args) if args.command in ("image", "plan", "verify") else {}
        base = None if cell.name == "cli" else cell.name
        return matrix_mod.cli_cell({**given, **changes}, matrix_path=path, base_cell=base)

    return again


def route(
    cells: list[matrix_mod.Cell],
    request: RunRequest,
    args: argparse.Namespace,
    console: Console,
    *,
    ask_engine: bool = True,
    unavailable: dict[str, str] | None = None,
) -> list[matrix_mod.Cell]:
    """Each cell on the bases --base picks (toolchain/image/base_route.py); the one line when a cell moves.
    With `unavailable` (matrix), a cell that has no base is recorded there ({name: why}) instead of
    stopping the run; without it (image) that is exit 3."""
    base_route = load_part("image.base_route")
    if (
        not ask_engine
    ):  # plan builds nothing: it names the image `image` built (NVIDIA's, unless only the local one is here)
        return [built_cell(cell, request.base, args, console, request.target) for cell in cells]
    needs_engine = request.base == "auto" and any(c.base_route == "nvidia" for c in cells)
    if needs_engine:
        preflight("none")
    available = base_route.engine_availability() if needs_engine else (lambda ref: None)
    routed = []
    for cell in cells:
        try:
            moved, note = base_route.choose(cell, request.base, _reresolver(args), available)
        except EnvironmentUnavailable as error:
            if unavailable is None:
                raise
            console.error(str(error), title=f"base {cell.name}")
            unavailable[cell.name] = str(error)
            moved, note = cell, None
        if note:
            console.status("BASE", "warn", note)
        routed.append(moved)
    return routed


def built_cell(
    cell: matrix_mod.Cell, base: str, args: argparse.Namespace, console: Console, target: str = "runtime"
) -> matrix_mod.Cell:
    """The cell whose image `build.py image` with these options made (plan and verify name it): the one
    rule in toolchain/image/base_route.py, asking the engine's store for the target's tag when a daemon answers."""
    from toolchain.spec import targets

    base_route = load_part("image.base_route")
    has = base_route.engine_has_image()
    found, note = base_route.built_cell(
        cell, base, _reresolver(args), lambda c: has(targets.for_target(c, target, None).id)
    )
    if note:
        console.status("BASE", "ok", note)
    return found


def make_local_bases(cells: list[matrix_mod.Cell], console: Console) -> None:
    base_route = load_part("image.base_route")
    for cell in cells:
        done = base_route.ensure_local_base(cell)
        if done:
            console.status("BASE", "ok", done)


def cmd_plan(args: argparse.Namespace, console: Console) -> int:
    from toolchain.runs.run_loop import check_inputs

    cells = resolve_cells(args, all_when_empty=True)
    request = RunRequest.from_args(args)
    check_inputs(request)
    notes = Console(sys.stderr) if args.json or args.markdown else console  # stdout stays the document
    cells = route(cells, request, args, notes, ask_engine=False)
    cells = for_target(cells, request)
    if args.markdown:
        from toolchain.commands import matrix_table

        for line in matrix_table.render(cells).split("\n"):
            console.line(printable(line))
        return exit_codes.OK
    plans = [plan_for(cell, request) for cell in cells]
    if args.json:
        print(atomic.json_dumps(plans if len(plans) > 1 else plans[0], indent=2))
        return exit_codes.OK
    for number, (cell, plan) in enumerate(zip(cells, plans, strict=True)):
        if number:
            console.line()
        console.line(printable(f"cell {cell.name}: {cell.id}"))
        width = max(len(k) for k in plan["build_args"])
        for key, value in plan["build_args"].items():
            console.line(printable(f"  {key:<{width}}  {value}"))
        console.line("  build command:")
        env = " ".join(f"{k}={v}" for k, v in plan["env"].items())
        # the command as a shell takes it, one part a line, each escaped: no part can start a line of its own
        parts = _wrap_command(plan["command"])
        for number, part in enumerate(parts):
            console.line(
                (f"    {printable(env)} " if number == 0 else "      ")
                + printable(part)
                + (" \\" if number < len(parts) - 1 else "")
            )
        if "--label" in plan["command"]:  # provenance is looked up at build time, not by plan
            console.line("  (`build.py image` fills in the build date, git revision and base digests)")
    return exit_codes.OK


def plan_for(cell: matrix_mod.Cell, request: RunRequest) -> dict[str, Any]:
    log_path = request.logs / cell.id / "build.log"
    return {
        "cell": cell.name,
        "id": cell.id,
        "tag": cell.id,
        "target": request.target,
        "build_args": cell.build_args(),
        "env": {"DOCKER_BUILDKIT": "1"},  # the engine always sets it (the daemon's BuildKit without buildx)
        "command": build_command(cell, request, log_path),
        "log": str(log_path),
    }


def build_command(cell: matrix_mod.Cell, request: RunRequest, log_path: Path) -> list[str]:
    """The exact command the engine runs for this cell (the engine owns it)."""
    buildkit_build = load_part("image.buildkit_build")
    return list(
        buildkit_build.build_command(
            cell,
            target=request.target,
            apex_src=request.apex_src,
            wheelhouse=request.wheelhouse,
            extra_ca=request.extra_ca,
            progress=request.progress,
        )
    )


def _wrap_command(command: list[str]) -> list[str]:
    """One line per option and its value, for reading."""
    lines: list[str] = []
    for word in command:
        quoted = shlex.quote(word)
        if word.startswith("-") or not lines:
            lines.append(quoted)
        else:
            lines[-1] += " " + quoted
    return lines


def cmd_validate(args: argparse.Namespace, console: Console) -> int:
    path = args.matrix or default_matrix_path()
    matrix = matrix_mod.load_matrix(path)
    for cell in matrix.cells:
        console.status("OK", "ok", f"{cell.name:<12} {cell.id}")
    overrides = overrides_from(args)
    if overrides or args.cell:
        cell = matrix_mod.cli_cell(overrides, matrix_path=path, base_cell=args.cell)
        console.status("OK", "ok", f"{'(cli)':<12} {cell.id}")
    console.line(printable(f"{path}: {len(matrix.cells)} cells valid"))
    return exit_codes.OK


def cmd_image(args: argparse.Namespace, console: Console) -> int:
    from toolchain.runs import run_loop

    cell = resolve_cells(args, all_when_empty=False)[0]
    request = RunRequest.from_args(args)
    run_loop.check_inputs(request)
    run_loop.check_logs(request, [cell])
    if request.apex_index and request.apex_src:
        raise UsageError(
            "build.py image: --apex-index takes a built wheel, --apex-src compiles one; pass one"
        )
    if request.apex_index:  # the refusal (exit 3) before the engine is asked anything or a stage runs
        load_part("image.apex_index").find(cell, request.apex_index)
    cell = route([cell], request, args, console)[0]
    cell = for_target([cell], request)[0]
    preflight(run_loop.verify_mode_for(request))
    if args.network_check:  # after route(): the base fallback has already been taken
        check_remote_inputs(cell, request)

    make_local_bases([cell], console)
    return run_loop.build_one(cell, request, console)


def check_remote_inputs(cell: matrix_mod.Cell, request: RunRequest) -> None:
    """Every remote input the routed cell's build of --target fetches answers from here, before any stage runs
    (exit 3 naming each one that does not, and its fix): toolchain/image/remote_inputs.py."""
    import functools

    from toolchain.image import remote_inputs

    inputs = remote_inputs.needed(
        cell,
        target=request.target,
        apex_src=request.apex_src,
        wheelhouse=request.wheelhouse,
        apex_index=bool(request.apex_index),
    )
    images = any(i.kind == "image" for i in inputs)
    remote_inputs.check(
        inputs,
        probe=functools.partial(remote_inputs.probe_url, extra_ca=request.extra_ca),
        available=load_part("image.base_route").engine_availability() if images else None,
    )


def cmd_matrix(args: argparse.Namespace, console: Console) -> int:
    from toolchain.runs import run_loop

    path = args.matrix or default_matrix_path()
    cells = selected(args)  # every cell of the matrix is validated before any build
    request = RunRequest.from_args(args)
    run_loop.check_inputs(request)
    run_loop.check_logs(request, cells)
    unavailable: dict[str, str] = {}
    cells = route(cells, request, args, console, unavailable=unavailable)
    cells = for_target(cells, request)
    preflight(run_loop.verify_mode_for(request, every_target=True))
    make_local_bases([c for c in cells if c.name not in unavailable], console)
    return run_loop.run_matrix(cells, request, console, matrix_path=path, unavailable=unavailable)


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from toolchain.runs import report_tables

    problems: list[str] = []
    md_path, html_path, rows = report_tables.write(args.out, problems)
    console.line(f"{len(rows)} cells -> {printable(md_path)} and {printable(html_path)}")
    for problem in problems:  # each names its file (escaped: a cell folder's name may hold a line break)
        print(f"error: {printable(problem)}", file=sys.stderr)
    if problems:
        raise UsageError(
            f"{len(problems)} input file(s) under {printable(args.out)} could not be used (listed above); "
            "the report shows every cell that could be read"
        )
    return exit_codes.OK


def selected(args: argparse.Namespace) -> list[matrix_mod.Cell]:
    path = args.matrix or default_matrix_path()
    cells = matrix_mod.load_matrix(path).select(names=args.cell, cuda=args.cuda, torch=args.torch)
    if not cells:
        raise UsageError(f"no cell of {path} matches --cell/--cuda/--torch; `build.py plan` lists them")
    return cells
