"""build.py: validate the matrix, plan and build images, verify and inspect them, report on the matrix.

    build.py plan     [--cuda 12.4 ...]   resolved build args and the build command; nothing built
    build.py validate                     check every cell of matrix.toml against the compatibility facts
    build.py image    --cuda 12.4 [...]   build one image (validated first)
    build.py matrix   [--cuda ...]        build (and verify) every selected cell; a failure does not stop the rest
    build.py verify   IMAGE               run verify inside IMAGE (GPU when the daemon has one, else --static)
    build.py inspect  IMAGE               labels and embedded reports, no container run
    build.py report                       all cells -> out/matrix-report.md + .html
    build.py wheel    --apex-src DIR ...  the Apex wheel builder (bare metal, no Docker)
    build.py gh-matrix | bake | pull      CI generators and pulling a prebuilt image (by digest: --by-digest)
    build.py facts check                  compare the compatibility facts with what PyPI publishes
    build.py publish  --cell X --registry R   push a built cell, record its digest (out/cells/<id>/published.json)
    build.py zipapp   --out verify.pyz    verify as one file: `python verify.pyz` audits any Python + torch
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

from toolchain.console import Console
from toolchain.errors import EnvironmentUnavailable, ToolchainError, UsageError, report
from toolchain.spec import ci_matrix
from toolchain.spec import matrix as matrix_mod
from verify import atomic, entry_point, exit_codes, input_files
from verify.messages import bounded, did_you_mean, shown
from verify.out_dirs import OutputDirs

REPO_ROOT = Path(__file__).resolve().parents[1]
# Command-line options that override a cell's keys (option dest == matrix key).
OVERRIDE_KEYS = ("cuda", "torch", "python", "os", "gcc", "archs", "apex_repo", "apex_ref", "extras",
                 "apex_flags", "base_devel", "base_runtime", "torch_index_url", "tag", "platform")


def default_matrix_path() -> Path:
    local = Path("matrix.toml")
    return local if local.exists() else REPO_ROOT / "matrix.toml"


# --- argument parsing -------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that raises a UsageError (one line, exit 2) instead of printing usage and exiting."""

    commands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {bounded(message)}; see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
    group.add_argument("--base-devel", default=os.environ.get("BASE_DEVEL_IMAGE"),
                       help="devel base image (e.g. a local mirror, a digest pin, or any Debian/Ubuntu image: CUDA then "
                       "comes from the package index); default $BASE_DEVEL_IMAGE")
    group.add_argument("--base-runtime", default=os.environ.get("BASE_RUNTIME_IMAGE"),
                       help="runtime base image; default $BASE_RUNTIME_IMAGE")
    group.add_argument("--torch-index-url", help="pip index for torch (default: the PyTorch index for the CUDA)")
    group.add_argument("--tag", help="image tag instead of the cell id")
    group.add_argument("--platform", help="docker platform: linux/amd64 (default) or linux/arm64 (GH200, GB200)")

    build = argparse.ArgumentParser(add_help=False)
    bgroup = build.add_argument_group("build")
    bgroup.add_argument("--target", default="runtime", help="Dockerfile stage: runtime (default), runtime-devel (with nvcc), runtime-slim (no CUDA base: "
                        "torch's CUDA wheels), verify-runtime")
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

    engine_opt = argparse.ArgumentParser(add_help=False)
    engine_opt.add_argument("--engine", choices=("docker", "podman"), default=None,
                            help="container engine (default: $APEX_CONTAINER_ENGINE, else docker)")

    p = sub.add_parser("verify", parents=[common, cell, engine_opt], help="run verify inside an image (any image)")
    p.add_argument("image", nargs="?", help="image tag, id or REPO@sha256:DIGEST (default: the cell's tag)")
    p.add_argument("--gpu", choices=("auto", "require", "none"), default="auto")
    p.add_argument("--verify-from", choices=("auto", "image", "zipapp"), default="auto",
                   help="auto (default): the image's own verify if this toolchain built it, else the zipapp")
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

    p = sub.add_parser("pull", parents=[common, cell, registry, engine_opt],
                       help="pull a cell's published image and verify it on this node's GPU")
    p.add_argument("--gpu", choices=("require", "auto", "none"), default="require",
                   help="require (default): no GPU runtime is exit 3; auto: static verify without one")
    p.add_argument("--no-pull", action="store_true", help="verify the local image, do not pull")
    p.add_argument("--digest", help="pull REGISTRY@DIGEST (default: the digest build.py publish recorded, if any)")
    p.add_argument("--by-digest", action="store_true", help="refuse to pull by tag: a digest must be recorded or given")
    p.set_defaults(func=cmd_pull)

    p = sub.add_parser("publish", parents=[common, cell, registry],
                       help="push a built cell's image and record its digest (out/cells/<id>/published.json)")
    p.add_argument("--image", help="local image to push (default: the cell's tag)")
    p.add_argument("--bake-metadata", type=Path,
                   help="record what `buildx bake --push --metadata-file FILE` pushed instead of pushing here")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("zipapp", help="write verify as a self-contained zipapp (python verify.pyz [flags])")
    p.add_argument("--out", type=Path, default=Path("out") / "verify.pyz",
                   help="file to write, or a directory to write verify.pyz into (default: out/verify.pyz)")
    p.set_defaults(func=cmd_zipapp)

    sub.add_parser("wheel", help="build the Apex wheel on bare metal (see build.py wheel --help)")

    p = sub.add_parser("facts", help="the compatibility facts: `facts check` compares them with PyPI")
    facts_sub = p.add_subparsers(dest="facts_command", metavar="ACTION")
    check = facts_sub.add_parser("check", help="exit 1 when PyPI publishes torch releases or CUDA toolkits the "
                                 "facts lack or contradict; 3 when the index cannot be read")
    check.add_argument("--index", default="https://pypi.org",
                       help="PyPI, or a mirror of its JSON API (https:// or file://; default https://pypi.org)")
    check.add_argument("--facts", type=Path, default=None, help="facts file (default: toolchain/data/compat.toml)")
    check.set_defaults(func=cmd_facts_check)
    p.set_defaults(func=lambda args, console: _usage("facts: name an action: build.py facts check"))
    parser.commands = sub.choices  # for "did you mean" on a mistyped command or option
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


def for_target(cells: list[matrix_mod.Cell], args: argparse.Namespace) -> list[matrix_mod.Cell]:
    """Each cell as its --target builds it (an image without Apex is not tagged as if it held Apex), and
    the --wheelhouse checked against it: bad input is exit 2 before any build."""
    from toolchain.spec import targets

    wheelhouse = load_part("image.wheelhouse")
    built = [targets.for_target(cell, args.target, args.wheelhouse) for cell in cells]
    for cell in built:
        wheelhouse.check(cell, args.wheelhouse)
    return built


def cmd_plan(args: argparse.Namespace, console: Console) -> int:
    from toolchain.runs.run_loop import check_inputs

    cells = resolve_cells(args, all_when_empty=True)
    check_inputs(args)
    cells = for_target(cells, args)
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
    engine = load_part("image.engine")
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
    from toolchain.runs import run_loop

    cell = resolve_cells(args, all_when_empty=False)[0]
    run_loop.check_inputs(args)
    cell = for_target([cell], args)[0]
    _preflight(args.verify)
    return run_loop.build_one(cell, args, console)


def cmd_matrix(args: argparse.Namespace, console: Console) -> int:
    from toolchain.runs import run_loop

    path = args.matrix or default_matrix_path()
    cells = _selected(args)  # every cell of the matrix is validated before any build
    run_loop.check_inputs(args)
    cells = for_target(cells, args)
    _preflight(args.verify)
    return run_loop.run_matrix(cells, args, console, matrix_path=path)


def failing_checks(report_path: Path | str | None, limit: int = 20) -> list[str]:
    """`FAIL id  summary` for each FAIL/WARN check of a verify report (bounded read); [] when none is readable."""
    from verify import input_files

    try:
        report = input_files.read_json(Path(report_path), input_files.VERIFY_REPORT) if report_path else None
    except input_files.InputFileError:
        return []
    checks = report.get("checks") if isinstance(report, dict) else None
    lines = [f"{c.get('status')}  {c.get('id')}  {c.get('summary')}" for c in checks or []
             if isinstance(c, dict) and c.get("status") in ("FAIL", "WARN")]
    return lines[:limit] + ([f"... {len(lines) - limit} more in the report"] if len(lines) > limit else [])


def cmd_verify(args: argparse.Namespace, console: Console) -> int:
    if not args.image:
        args.image = resolve_cells(args, all_when_empty=False)[0].id
    container_verify = load_part("image.container_verify")
    require_engine(args.engine)

    out_dir = args.out / "verify" / _safe_name(args.image)
    with console.group(f"verify {args.image}"):
        code, report_path = container_verify.verify_image(args.image, out_dir=out_dir, gpu=args.gpu,
                                                          verify_from=args.verify_from, engine=args.engine)
    word, kind = ("PASS", "ok") if code == exit_codes.OK else ("FAIL", "fail")
    console.status(word, kind, f"{args.image}: verify exit {code}; report {report_path}")
    for line in failing_checks(report_path) if code != exit_codes.OK else ():
        console.line(f"  {line}")
    audit = _audit_of(out_dir)
    if audit:
        console.line(f"  audited {audit['image']} (image id {audit['image_id']}, digest {audit['digest'] or 'none: local'})"
                     f" with {audit['engine']}, verify from {audit['verify_from']}")
    return code


def _audit_of(out_dir: Path) -> dict[str, Any] | None:
    try:
        run = input_files.read_json(out_dir / "container-run.json", input_files.CELL_RESULT)
    except input_files.InputFileError:
        return None
    audit = run.get("audit") if isinstance(run, dict) else None
    return audit if isinstance(audit, dict) else None


def cmd_inspect(args: argparse.Namespace, console: Console) -> int:
    inspect_image = load_part("image.inspect_image")
    require_docker()

    print(atomic.json_dumps(inspect_image.inspect(args.image), indent=2, default=str))
    return exit_codes.OK


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from toolchain.runs import matrix_report

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


def _check_registry(args: argparse.Namespace) -> None:
    from_env = args.registry is not None and args.registry == os.environ.get("APEX_IMAGE_REGISTRY")
    ci_matrix.check_repository(args.registry, "$APEX_IMAGE_REGISTRY" if from_env else "--registry")
    ci_matrix.check_repository(getattr(args, "cache_ref", None), "--cache-ref")


def cmd_gh_matrix(args: argparse.Namespace, console: Console) -> int:
    _check_registry(args)
    print(atomic.json_dumps(ci_matrix.gh_matrix(_selected(args), args.registry), indent=2 if args.pretty else None))
    return exit_codes.OK


def cmd_bake(args: argparse.Namespace, console: Console) -> int:
    _check_registry(args)
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
    from toolchain.image import pull
    from toolchain.runs import run_loop
    from toolchain.runs.cell_result import CellResult, CellStatus

    _check_registry(args)
    cell = resolve_cells(args, all_when_empty=False)[0]
    if not args.registry and not args.no_pull and not args.by_digest and not args.digest:
        from toolchain.image import publish

        if publish.read_record(args.out, cell.id) is None:
            raise UsageError("pull: no registry; pass --registry ghcr.io/OWNER/apex (or set APEX_IMAGE_REGISTRY), "
                             "or --no-pull to verify a local image")
    if args.no_pull:
        ref, digest, record = ci_matrix.image_ref(cell, args.registry), None, None
    else:
        ref, digest, record = pull.resolve(cell.id, args.registry, digest=args.digest, by_digest=args.by_digest,
                                           out=args.out)
    load_part("image.container_verify")
    require_engine(args.engine)
    out_dir = args.out / "cells" / cell.id / "verify"
    started = run_loop.now()
    expected_id = (record or {}).get("image_id") if record and digest == record.get("digest") else None
    with console.group(f"{'verify' if args.no_pull else 'pull and verify'} {ref}"):
        code, report_path, image_id = pull.pull_and_verify(ref, out_dir=out_dir, gpu=args.gpu,
                                                           pull_first=not args.no_pull, engine=args.engine,
                                                           expected_image_id=expected_id)
    # recorded like a matrix cell, so `build.py report` shows what this node verified
    status = CellStatus.VERIFIED if code == exit_codes.OK else CellStatus.VERIFY_FAILED
    verify = {"exit_code": code, "report_path": str(report_path), "mode_requested": args.gpu, "status": status.value}
    verify.update(run_loop.report_summary(report_path))
    run_loop.save_result(CellResult(
        id=cell.id, name=cell.name, run_id="pull", cell=cell.to_json(), status=status, started_at=started,
        finished_at=run_loop.now(), verify=verify,
        build={"ok": True, "tag": ref, "digest": digest, "pulled": not args.no_pull, "image_id": image_id},
    ), args.out)
    if code == exit_codes.OK:
        console.status("READY", "ok", f"{ref} (report {report_path})")
    else:
        console.error(f"{ref} is not ready: verify exit {code}; report {report_path}", title=f"pull {cell.id}")
    return code


def cmd_facts_check(args: argparse.Namespace, console: Console) -> int:
    from toolchain.spec import compat, facts_check

    path = args.facts or compat.DATA
    if not path.is_file():
        raise UsageError(f"--facts {path}: no such file; pass a compat.toml (default toolchain/data/compat.toml)")
    try:
        facts = compat.load(path)
    except (KeyError, TypeError, IndexError) as err:
        raise UsageError(f"--facts {path}: not a compatibility facts file ({type(err).__name__}: {err}); "
                         "start from toolchain/data/compat.toml") from None
    console.line(f"facts check: {path} against {args.index}")
    result = facts_check.run(facts, facts_check.urllib_fetcher(), args.index)
    for finding in result.findings:
        console.status("DRIFT", "fail", f"{finding.kind}: {finding.subject}: {finding.problem}; {finding.fix}")
        if console.github:
            console.error(f"{finding.subject}: {finding.problem}; {finding.fix}", title="facts drift")
    if result.not_visible:
        console.status("INFO", "info", f"PyPI's JSON shows no Requires-Dist (the wheels' CUDA) for torch "
                       f"{', '.join(result.not_visible)}: their pypi_cuda not compared")
    for lead in facts.leads:
        console.status("LEAD", "warn", f"{lead.where}: {lead.text} (unconfirmed: not used as a fact)")
    if result.findings:
        kinds = {k: sum(f.kind == k for f in result.findings) for k in ("missing", "wrong")}
        console.line(f"facts check: {len(result.findings)} problems ({kinds['missing']} missing, {kinds['wrong']} wrong) "
                     f"- update {path} - exit 1")
        return exit_codes.FAILED
    console.line(f"facts check: current ({'; '.join(result.checked)}) - exit 0")
    return exit_codes.OK


def _usage(message: str) -> int:
    raise UsageError(message)


def cmd_publish(args: argparse.Namespace, console: Console) -> int:
    from toolchain.image import publish

    cell = resolve_cells(args, all_when_empty=False)[0]
    if not args.registry:
        raise UsageError("publish: no registry; pass --registry ghcr.io/OWNER/apex (or set APEX_IMAGE_REGISTRY)")
    repository = args.registry.rstrip("/")
    if args.bake_metadata:
        record = publish.from_bake_metadata(cell.id, ci_matrix.bake_target_name(cell), repository, args.bake_metadata,
                                            out=args.out)
    else:
        with console.group(f"publish {cell.id} to {repository}"):
            record = publish.push(cell.id, repository, out=args.out, local=args.image)
    console.status("PUSHED", "ok", f"{record['ref']} (recorded in {publish.record_path(args.out, cell.id)})")
    return exit_codes.OK


def cmd_zipapp(args: argparse.Namespace, console: Console) -> int:
    from toolchain.image import verify_zipapp

    if args.out.exists() and not args.out.is_dir() and not args.out.is_file():
        raise UsageError(f"--out {args.out}: not a regular file or directory; pass a path like DIR/verify.pyz")
    app = verify_zipapp.build(args.out)
    console.line(f"{app.path}: verify zipapp, {len(app.files)} files, {app.size_bytes} bytes, sha256 {app.sha256}")
    console.line(f"  run it with any Python >= 3.10 that has torch: python {app.path} --static")
    return exit_codes.OK


# --- environment ------------------------------------------------------------------------------


def load_part(name: str) -> types.ModuleType:
    """A toolchain module (`image.engine`) another part provides, imported when a command needs it."""
    import importlib

    try:
        return importlib.import_module(f"toolchain.{name}")
    except ImportError as err:
        if getattr(err, "name", None) == "docker":
            raise EnvironmentUnavailable("the Docker SDK is not installed; pip install -e '.[build]'") from None
        raise EnvironmentUnavailable(f"toolchain.{name} is not available in this checkout ({err})") from None


def _preflight(verify_mode: str) -> None:
    """Before the first cell: the parts a build needs are here and a daemon answers (else exit 3)."""
    load_part("image.engine")
    if verify_mode != "none":
        load_part("image.container_verify")
    require_docker()


def require_docker() -> None:
    """Fail fast (exit 3) when no Docker daemon answers, before any cell starts."""
    load_part("image.engine").ping()


def require_engine(name: str | None) -> None:
    """The engine verify/pull use: Docker needs its daemon (exit 3 without); podman needs only its CLI."""
    from toolchain.image import container_engine

    if container_engine.choose(name) == "docker":
        require_docker()
    else:
        container_engine.PodmanEngine()  # exit 3 when podman is not installed


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



def _parse(parser: _Parser, argv: list[str]) -> argparse.Namespace:
    """parse_args, with "did you mean" for a mistyped command or option."""
    if argv and not argv[0].startswith("-") and argv[0] not in parser.commands:
        hint = did_you_mean(argv[0], parser.commands)
        raise UsageError(f"unknown command {shown(argv[0])}; " + (f"{hint} " if hint else "")
                         + f"(commands: {', '.join(parser.commands)})")
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = parser.commands.get(args.command or "", parser)
        options = [o for action in command._actions for o in action.option_strings if o.startswith("--")]
        word = extra[0].split("=", 1)[0]
        hint = did_you_mean(word, options) if word.startswith("-") else None
        what = "unknown option" if word.startswith("-") else "unexpected argument"
        raise UsageError(f"{command.prog}: {what} {shown(word)}; " + (f"{hint} " if hint else "")
                         + f"see `{command.prog} --help`")
    return args


def _run(args: argparse.Namespace, console: Console) -> int:
    """Run the command; if it fails, remove the output directories it created and left empty."""
    output = getattr(args, "output", None)
    made = OutputDirs([getattr(args, "out", None), getattr(args, "logs", None),
                       output.parent if output is not None else None])
    return made.run(lambda: args.func(args, console))


def main(argv: list[str] | None = None) -> int:
    """build.py: signals, stdout and child processes as every CLI of the project (verify.entry_point)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return entry_point.run("build.py", lambda: _main(argv))


def _main(argv: list[str]) -> int:
    console = Console()
    try:
        if argv[:1] == ["wheel"]:  # the builder parses its own options (it also runs inside images)
            from toolchain.builder import apex_builder

            return apex_builder.main(argv[1:])
        parser = build_parser()
        args = _parse(parser, argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return exit_codes.USAGE
        return _run(args, console)
    except ToolchainError as err:
        if console.github:
            console.error(str(err).splitlines()[0])
        return report(err)
    except OSError as err:
        return report(_os_error(err))
    except ModuleNotFoundError as err:
        if err.name != "docker":  # only the optional SDK is an environment problem; anything else is a bug
            raise
        return report(EnvironmentUnavailable(f"{err}; install the build extras: pip install -e '.[build]'"))
