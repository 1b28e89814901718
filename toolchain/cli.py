"""build.py: validate the matrix, plan and build images, verify and inspect them, report on the matrix.

    build.py plan     [--cuda 12.4 ...]   resolved build args and the build command; nothing built
    build.py validate                     check every cell of matrix.toml against the compatibility facts
    build.py image    --cuda 12.4 [...]   build one image (validated first)
    build.py matrix   [--cuda ...]        build (and verify) every selected cell; a failure does not stop the rest
    build.py verify   IMAGE               run verify inside IMAGE (GPU when the daemon has one, else --static)
    build.py inspect  IMAGE               labels and embedded reports, no container run
    build.py report                       all cells -> out/matrix-report.md + .html
    build.py wheel    --apex-src DIR ...  the Apex wheel builder (bare metal, no Docker)
    build.py gh-matrix | bake | pull      CI generators and pulling a prebuilt image
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import shlex
import sys
import types
from pathlib import Path
from typing import Any

from toolchain import ci_matrix
from toolchain import matrix as matrix_mod
from toolchain.console import Console
from toolchain.errors import EnvironmentUnavailable, ToolchainError, UsageError, report
from verify import atomic, exit_codes

REPO_ROOT = Path(__file__).resolve().parents[1]
# Command-line options that override a cell's keys (option dest == matrix key).
OVERRIDE_KEYS = ("cuda", "torch", "python", "os", "gcc", "archs", "apex_repo", "apex_ref", "extras",
                 "apex_flags", "base_devel", "base_runtime", "torch_index_url", "tag")


def default_matrix_path() -> Path:
    local = Path("matrix.toml")
    return local if local.exists() else REPO_ROOT / "matrix.toml"


# --- argument parsing -------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="build.py",
        description="Build NVIDIA Apex into training images, one per validated matrix cell, and verify them.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 ok, 1 a build or verification failed, 2 bad input (nothing built), "
        "3 environment unavailable (no Docker daemon, no GPU when required).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--matrix", type=Path, default=None, help="matrix file (default: ./matrix.toml)")
    common.add_argument("--out", type=Path, default=Path("out"), help="reports directory (default: out)")
    common.add_argument("--logs", type=Path, default=Path("logs"), help="per-cell logs (default: logs)")

    cell = argparse.ArgumentParser(add_help=False)
    group = cell.add_argument_group("cell (layered over [defaults] and --cell)")
    group.add_argument("--cell", help="start from this [cells.NAME] of the matrix")
    group.add_argument("--cuda", help="CUDA version, e.g. 12.4 (torch defaults to the newest that ships it)")
    group.add_argument("--torch", help="torch version, e.g. 2.6 or 2.6.0")
    group.add_argument("--python", help="Python version, e.g. 3.12")
    group.add_argument("--os", help="base OS, e.g. ubuntu22.04")
    group.add_argument("--gcc", help="host GCC major version")
    group.add_argument("--archs", help="GPU archs, e.g. '8.0;9.0' or 9.0+PTX")
    group.add_argument("--apex-repo", help="Apex git URL")
    group.add_argument("--apex-ref", help="Apex commit, tag or branch")
    group.add_argument("--extras", help="contrib extensions, e.g. xentropy,fast_layer_norm")
    group.add_argument("--apex-flags", help="APEX_* flags instead of the core set, e.g. APEX_CPP_EXT")
    group.add_argument("--base-devel", help="devel base image (e.g. a local mirror or a digest pin)")
    group.add_argument("--base-runtime", help="runtime base image")
    group.add_argument("--torch-index-url", help="pip index for torch (default: the PyTorch index for the CUDA)")
    group.add_argument("--tag", help="image tag instead of the cell id")

    build = argparse.ArgumentParser(add_help=False)
    bgroup = build.add_argument_group("build")
    bgroup.add_argument("--target", default="runtime", help="Dockerfile stage: runtime (default), runtime-devel (with nvcc), verify-runtime")
    bgroup.add_argument("--apex-src", type=Path, help="local Apex source instead of git (offline builds)")
    bgroup.add_argument("--wheelhouse", type=Path, help="directory of wheels to install torch from (offline)")
    bgroup.add_argument("--extra-ca", type=Path, help="CA bundle for a TLS-intercepting proxy (BuildKit secret)")
    bgroup.add_argument("--progress", default="auto", choices=("auto", "plain", "tty"), help="BuildKit progress")

    p = sub.add_parser("plan", parents=[common, cell, build], help="resolved build args and command; nothing built")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("validate", parents=[common, cell], help="check every cell against the compatibility facts")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("image", parents=[common, cell, build], help="build one image")
    p.add_argument("--verify", choices=("none", "auto", "require"), default="none",
                   help="run verify in the built image (auto: GPU if the daemon has one)")
    p.set_defaults(func=cmd_image)

    p = sub.add_parser("matrix", parents=[common, build], help="build every selected cell")
    p.add_argument("--cell", action="append", default=[], help="only this cell (name or id); repeatable")
    p.add_argument("--cuda", action="append", default=[], help="only cells with this CUDA; repeatable")
    p.add_argument("--torch", action="append", default=[], help="only cells with this torch; repeatable")
    p.add_argument("--verify", choices=("none", "auto", "require"), default="auto",
                   help="verify each built image (default auto: GPU if the daemon has one, else static)")
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("verify", parents=[common, cell], help="run verify inside an image")
    p.add_argument("image", nargs="?", help="image tag or id (default: the tag of the cell given by --cuda ...)")
    p.add_argument("--gpu", choices=("auto", "require", "none"), default="auto")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("inspect", parents=[common], help="labels and embedded reports of an image")
    p.add_argument("image", help="image tag or id")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("report", parents=[common], help="matrix results -> Markdown + HTML table")
    p.set_defaults(func=cmd_report)

    select = argparse.ArgumentParser(add_help=False)
    sgroup = select.add_argument_group("select cells (default: all)")
    sgroup.add_argument("--cell", action="append", default=[], help="cell name or id; repeatable")
    sgroup.add_argument("--cuda", action="append", default=[], help="CUDA version; repeatable")
    sgroup.add_argument("--torch", action="append", default=[], help="torch version; repeatable")
    registry = argparse.ArgumentParser(add_help=False)
    registry.add_argument("--registry", default=os.environ.get("APEX_IMAGE_REGISTRY"),
                          help="image repository, e.g. ghcr.io/OWNER/apex (default: $APEX_IMAGE_REGISTRY)")

    p = sub.add_parser("gh-matrix", parents=[common, select, registry],
                       help="JSON for a GitHub Actions matrix (fromJson)")
    p.add_argument("--pretty", action="store_true", help="indented JSON")
    p.set_defaults(func=cmd_gh_matrix)

    p = sub.add_parser("bake", parents=[common, select, registry], help="docker-bake.json of the matrix")
    p.add_argument("--target", default="runtime", help="Dockerfile stage for every target")
    p.add_argument("--cache", choices=ci_matrix.CACHE_KINDS, default="none",
                   help="BuildKit cache per cell: gha (GitHub Actions), registry, none")
    p.add_argument("--cache-ref", help="registry cache repository (default: <registry>-cache)")
    p.add_argument("--output", "-o", type=Path, help="write here instead of stdout (e.g. docker-bake.json)")
    p.set_defaults(func=cmd_bake)

    p = sub.add_parser("pull", parents=[common, cell, registry],
                       help="pull a cell's published image and verify it on this node's GPU")
    p.add_argument("--gpu", choices=("require", "auto", "none"), default="require",
                   help="require (default): no GPU runtime is exit 3; auto: static verify without one")
    p.add_argument("--no-pull", action="store_true", help="verify the local image, do not pull")
    p.set_defaults(func=cmd_pull)

    sub.add_parser("wheel", help="build the Apex wheel on bare metal (see build.py wheel --help)")
    return parser


# --- commands ---------------------------------------------------------------------------------


def overrides_from(args: argparse.Namespace) -> dict[str, str]:
    return {key: value for key in OVERRIDE_KEYS if (value := getattr(args, key, None)) not in (None, "")}


def resolve_cells(args: argparse.Namespace, *, all_when_empty: bool) -> list[matrix_mod.Cell]:
    """The cell(s) a command acts on. Every matrix cell is validated first, whatever is selected."""
    path = args.matrix or default_matrix_path()
    overrides = overrides_from(args)
    if overrides or args.cell or not all_when_empty:
        if not overrides and not args.cell:
            what = "IMAGE, or a cell" if args.command == "verify" else "a cell"
            raise UsageError(f"{args.command}: no {what} given; pass --cuda 12.4 (or --cell NAME from {path})")
        return [matrix_mod.cli_cell(overrides, matrix_path=path, base_cell=args.cell)]
    return list(matrix_mod.load_matrix(path).cells)


def cmd_plan(args: argparse.Namespace, console: Console) -> int:
    from toolchain.matrix_run import check_inputs

    cells = resolve_cells(args, all_when_empty=True)
    check_inputs(args)
    plans = [plan_for(cell, args) for cell in cells]
    if args.json:
        print(atomic.json_dumps(plans if len(plans) > 1 else plans[0], indent=2))
        return exit_codes.OK
    for number, (cell, plan) in enumerate(zip(cells, plans, strict=True)):
        if number:
            console.line()
        console.line(f"cell {cell.name}: {cell.id}")
        width = max(len(k) for k in plan["build_args"])
        for key, value in plan["build_args"].items():
            console.line(f"  {key:<{width}}  {value}")
        console.line("  build command:")
        env = " ".join(f"{k}={v}" for k, v in plan["env"].items())
        console.line(f"    {env} " + " \\\n      ".join(_wrap_command(plan["command"])))
    return exit_codes.OK


def plan_for(cell: matrix_mod.Cell, args: argparse.Namespace) -> dict[str, Any]:
    log_path = args.logs / cell.id / "build.log"
    return {
        "cell": cell.name,
        "id": cell.id,
        "tag": cell.id,
        "target": args.target,
        "build_args": cell.build_args(),
        "env": {"DOCKER_BUILDKIT": "1"},  # the engine always sets it (the daemon's BuildKit without buildx)
        "command": build_command(cell, args, log_path),
        "log": str(log_path),
    }


def build_command(cell: matrix_mod.Cell, args: argparse.Namespace, log_path: Path) -> list[str]:
    """The exact command the engine runs for this cell (the engine owns it)."""
    engine = load_part("engine")
    return list(engine.build_command(cell, target=args.target, apex_src=args.apex_src,
                                     wheelhouse=args.wheelhouse, extra_ca=args.extra_ca,
                                     progress=args.progress))


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
    console.line(f"{path}: {len(matrix.cells)} cells valid")
    return exit_codes.OK


def cmd_image(args: argparse.Namespace, console: Console) -> int:
    from toolchain import matrix_run

    cell = resolve_cells(args, all_when_empty=False)[0]
    matrix_run.check_inputs(args)
    _preflight(args.verify)
    return matrix_run.build_one(cell, args, console)


def cmd_matrix(args: argparse.Namespace, console: Console) -> int:
    from toolchain import matrix_run

    path = args.matrix or default_matrix_path()
    cells = _selected(args)  # every cell of the matrix is validated before any build
    matrix_run.check_inputs(args)
    _preflight(args.verify)
    return matrix_run.run_matrix(cells, args, console, matrix_path=path)


def cmd_verify(args: argparse.Namespace, console: Console) -> int:
    if not args.image:
        args.image = resolve_cells(args, all_when_empty=False)[0].id
    container_verify = load_part("container_verify")
    require_docker()

    out_dir = args.out / "verify" / _safe_name(args.image)
    with console.group(f"verify {args.image}"):
        code, report_path = container_verify.verify_image(args.image, out_dir=out_dir, gpu=args.gpu)
    word, kind = ("PASS", "ok") if code == exit_codes.OK else ("FAIL", "fail")
    console.status(word, kind, f"{args.image}: verify exit {code}; report {report_path}")
    return code


def cmd_inspect(args: argparse.Namespace, console: Console) -> int:
    inspect_image = load_part("inspect_image")
    require_docker()

    print(atomic.json_dumps(inspect_image.inspect(args.image), indent=2, default=str))
    return exit_codes.OK


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from toolchain import matrix_report

    problems: list[str] = []
    md_path, html_path, rows = matrix_report.write(args.out, problems)
    console.line(f"{len(rows)} cells -> {md_path} and {html_path}")
    for problem in problems:  # each names its file; the table above still has every readable cell
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        raise UsageError(f"{len(problems)} input file(s) under {args.out} could not be used (listed above); "
                         "the report shows every cell that could be read")
    return exit_codes.OK


def _selected(args: argparse.Namespace) -> list[matrix_mod.Cell]:
    path = args.matrix or default_matrix_path()
    cells = matrix_mod.load_matrix(path).select(names=args.cell, cuda=args.cuda, torch=args.torch)
    if not cells:
        raise UsageError(f"no cell of {path} matches --cell/--cuda/--torch; `build.py plan` lists them")
    return cells


def cmd_gh_matrix(args: argparse.Namespace, console: Console) -> int:
    print(atomic.json_dumps(ci_matrix.gh_matrix(_selected(args), args.registry), indent=2 if args.pretty else None))
    return exit_codes.OK


def cmd_bake(args: argparse.Namespace, console: Console) -> int:
    if args.cache == "registry" and not (args.cache_ref or args.registry):
        raise UsageError("--cache registry needs --registry or --cache-ref (where the cache images go)")
    definition = ci_matrix.bake(_selected(args), registry=args.registry, target=args.target, cache=args.cache,
                                cache_ref=args.cache_ref)
    text = atomic.json_dumps(definition, indent=2) + "\n"
    if args.output:
        atomic.write_text(args.output, text)
        console.line(f"{len(definition['target'])} targets -> {args.output}")
    else:
        sys.stdout.write(text)
    return exit_codes.OK


def cmd_pull(args: argparse.Namespace, console: Console) -> int:
    from toolchain import matrix_run, pull

    cell = resolve_cells(args, all_when_empty=False)[0]
    if not args.registry and not args.no_pull:
        raise UsageError("pull: no registry; pass --registry ghcr.io/OWNER/apex (or set APEX_IMAGE_REGISTRY), "
                         "or --no-pull to verify a local image")
    ref = ci_matrix.image_ref(cell, args.registry)
    load_part("container_verify")
    require_docker()
    out_dir = args.out / "cells" / cell.id / "verify"
    started = matrix_run.now()
    with console.group(f"{'verify' if args.no_pull else 'pull and verify'} {ref}"):
        code, report_path, image_id = pull.pull_and_verify(ref, out_dir=out_dir, gpu=args.gpu,
                                                           pull_first=not args.no_pull)
    # recorded like a matrix cell, so `build.py report` shows what this node verified
    verify = {"exit_code": code, "report_path": str(report_path), "mode_requested": args.gpu,
              "status": "verified" if code == exit_codes.OK else "verify_failed"}
    verify.update(matrix_run.report_summary(report_path))
    matrix_run.save_result({
        "result_version": matrix_run.RESULT_VERSION, "id": cell.id, "name": cell.name, "run_id": "pull",
        "cell": cell.to_json(), "status": verify["status"], "started_at": started, "finished_at": matrix_run.now(),
        "build": {"ok": True, "tag": ref, "pulled": not args.no_pull, "image_id": image_id}, "verify": verify,
    }, args.out)
    if code == exit_codes.OK:
        console.status("READY", "ok", f"{ref} (report {report_path})")
    else:
        console.error(f"{ref} is not ready: verify exit {code}; report {report_path}", title=f"pull {cell.id}")
    return code


# --- environment ------------------------------------------------------------------------------


def load_part(name: str) -> types.ModuleType:
    """A toolchain module another part provides, imported when a command needs it."""
    import importlib

    try:
        return importlib.import_module(f"toolchain.{name}")
    except ImportError as err:
        if getattr(err, "name", None) == "docker":
            raise EnvironmentUnavailable("the Docker SDK is not installed; pip install -e '.[build]'") from None
        raise EnvironmentUnavailable(f"toolchain.{name} is not available in this checkout ({err})") from None


def _preflight(verify_mode: str) -> None:
    """Before the first cell: the parts a build needs are here and a daemon answers (else exit 3)."""
    load_part("engine")
    if verify_mode != "none":
        load_part("container_verify")
    require_docker()


def require_docker() -> None:
    """Fail fast (exit 3) when no Docker daemon answers, before any cell starts."""
    load_part("engine").ping()


def _safe_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in text)


# --- entry point ------------------------------------------------------------------------------


# atomic writes go through a temp file `.NAME.XXXXXXXX.tmp` beside the target: name the target instead
_ATOMIC_TEMP = re.compile(r"^\.(?P<name>.+)\.[^.]+\.tmp$")


def _os_error(err: OSError) -> ToolchainError:
    """An OSError that reached the top, as one line: a full disk is the environment (exit 3); a path
    the user gave (--matrix, --out, --logs, --output) that cannot be read or written is usage (exit 2)."""
    path = err.filename
    if path is not None:
        path = Path(os.fsdecode(path))
        if match := _ATOMIC_TEMP.match(path.name):
            path = path.with_name(match["name"])
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        # a report or log could not be written: atomic writes leave the previous file whole
        where = f" writing {path}" if path else ""
        return EnvironmentUnavailable(f"the disk is full (no space left on device){where}; free space, or point "
                                      "--out/--logs at another filesystem")
    if isinstance(err, atomic.UnwritableTarget):  # its text already says what the path is and what to do
        return UsageError(f"{path}: {err.strerror}")
    if path is None:  # no path to blame: a socket or device, not an input (requests' errors land here)
        return EnvironmentUnavailable(f"{err.strerror or err}; check the Docker daemon and the network, then retry")
    return UsageError(f"{path}: {err.strerror or err}; pass a path that exists and this user can read and write "
                      "(check --matrix, --out, --logs and --output)")



def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    console = Console()
    try:
        if argv[:1] == ["wheel"]:  # the builder parses its own options (it also runs inside images)
            from toolchain import apex_builder

            return apex_builder.main(argv[1:])
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return exit_codes.USAGE
        return args.func(args, console)
    except ToolchainError as err:
        if console.github:
            console.error(str(err).splitlines()[0])
        return report(err)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return exit_codes.FAILED
    except BrokenPipeError:  # `build.py plan | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exit_codes.OK
    except OSError as err:
        return report(_os_error(err))
    except ModuleNotFoundError as err:
        if err.name != "docker":  # only the optional SDK is an environment problem; anything else is a bug
            raise
        return report(EnvironmentUnavailable(f"{err}; install the build extras: pip install -e '.[build]'"))
