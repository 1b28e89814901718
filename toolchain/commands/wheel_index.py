"""`build.py index`: built wheels (files, folders such as `build.py wheel`'s --out, a matrix run's out/ whose
built cells' images hold them, images' /opt/apex) into the per-stack PEP 503/691 index (toolchain/index/). Every wheel is checked first;
the ones that pass are published even when others are refused (exit 1, each refusal named)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from toolchain.commands.parts import load_part
from toolchain.console import Console
from toolchain.errors import UsageError
from toolchain.index import dependencies, gpu_reports, publish, wheel_check
from toolchain.runs.cell_result import CellStatus
from verify.runtime import exit_codes, input_files
from verify.runtime import field_types as ft
from verify.runtime.messages import printable

# what `build.py index` takes from a cell's result.json (toolchain/runs/cell_result.py writes more)
_RESULT = ft.Record(
    {
        "status": ft.Str(max_len=64),
        "build": ft.Nullable(ft.Record({"tag": ft.Nullable(ft.Str(max_len=512))})),
    },
    required=("status",),
)


def cell_images(sources: list[Path]) -> tuple[list[str], list[str]]:
    """(image tags, notes): the images of a matrix run's built cells (OUT/cells/<id>/result.json) under the
    folders given; a cell that did not build has no image and gets a note. What is printed from here on
    (paths, cell folder names, wheel names, refusals) goes through messages.printable: a name with a line
    break cannot add a line (a `::warning::` on GitHub Actions) of its own."""
    tags, notes = [], []
    for source in sources:
        for result in sorted(source.glob("cells/*/result.json")) if source.is_dir() else ():
            try:  # the bounded reader: a FIFO or /dev/zero as result.json is named, never waited on
                data = input_files.read_json(result, input_files.CELL_RESULT)
            except input_files.InputFileError as error:
                notes.append(f"{result}: not a cell result ({error.problem}); skipped")
                continue
            problems = ft.check(data, _RESULT, "result.json")
            if problems:
                notes.append(f"{result}: not a cell result ({ft.summary(problems)}); skipped")
                continue
            status, tag = str(data["status"]), (data.get("build") or {}).get("tag")
            if status in (CellStatus.BUILT.value, CellStatus.VERIFIED.value) and tag:
                tags.append(tag)
            else:
                notes.append(f"{result.parent.name}: status {status}, no image to take a wheel from; skipped")
    return list(dict.fromkeys(tags)), notes


def wheels_in(sources: list[Path]) -> list[Path]:
    found: list[Path] = []
    for source in sources:
        if source.is_file() and source.name.endswith(".whl"):
            found.append(source)
        elif source.is_dir():
            found += sorted(
                p
                for p in source.rglob("*.whl")
                if not any(part.startswith(".") for part in p.relative_to(source).parts)
            )
        else:
            raise UsageError(
                f"build.py index: {printable(source)} is neither a .whl file nor a folder; pass built wheels, "
                "a build's --out folder or --image TAG"
            )
    return list(dict.fromkeys(found))


def _tools(folder: Path) -> dict[str, Path]:
    """verify as the apex-verify wheel and as a zipapp, from this checkout: published beside every stack's
    wheels, so `pip install apex-verify --index-url INDEX/<stack>/simple` needs nothing else."""
    from toolchain.image import verify_wheel, verify_zipapp

    return {
        "wheel": verify_wheel.build(folder).path,
        "zipapp": verify_zipapp.build(folder / "verify.pyz").path,
    }


def cmd_index(args: argparse.Namespace, console: Console) -> int:
    # exit 2 before anything is written
    address, reports = _address(args), tuple(gpu_reports.read(p) for p in args.gpu_report)
    source = _dependency_source(args)
    with tempfile.TemporaryDirectory(prefix="apex-index-images-") as work:
        sources = list(args.wheels)
        missing = [s for s in sources if not s.exists()]
        if missing:
            raise UsageError(
                f"build.py index: {printable(missing[0])} does not exist; pass built wheels, a build's --out "
                "folder, a matrix run's out/ or --image TAG"
            )
        from_cells, notes = cell_images(sources)
        for note in notes:
            print(f"build.py index: {printable(note)}", file=sys.stderr)
        for n, tag in enumerate(list(dict.fromkeys([*args.image, *from_cells]))):
            sources.append(load_part("image.image_wheels").copy_out(tag, Path(work) / str(n)))
        wheels = wheels_in(sources)
        if not wheels:
            raise UsageError(
                f"build.py index: no .whl in {', '.join(map(printable, sources)) or 'the arguments'}; pass "
                "built wheels, a build's --out folder or --image TAG"
            )
        allowed = wheel_check.allowed_libraries()
        results = [wheel_check.check(w, allowed, Path(work)) for w in wheels]
        passed = [r for r in results if isinstance(r, wheel_check.CheckedWheel)]
        refused = [r for r in results if isinstance(r, wheel_check.Refusal)]
        extras = publish.Extras(_tools(Path(work) / "tools"), address, reports, source)
        outcomes = publish.add(args.index, passed, extras) if passed else []
    return _said(args, outcomes, passed, refused)


def _said(
    args: argparse.Namespace,
    outcomes: list[publish.Outcome],
    passed: list[wheel_check.CheckedWheel],
    refused: list[wheel_check.Refusal],
) -> int:
    """What happened, one line each; the exit code: 1 when a wheel or a GPU report was refused."""
    unmatched = [o for o in outcomes if o.action == "unmatched"]
    for outcome in unmatched:
        print(
            f"build.py index: refused --gpu-report {printable(outcome.wheel)}: {printable(outcome.detail)}; pass the "
            "report of a wheel given here or already on the index",
            file=sys.stderr,
        )
    outcomes = [o for o in outcomes if o.action != "unmatched"]
    for outcome in outcomes:
        detail = f" ({outcome.detail})" if outcome.detail else ""
        print(printable(f"{outcome.action:9} {outcome.stack}/{outcome.wheel}{detail}"))
    for wheel in passed:
        if wheel.retagged_from and wheel.portability:
            print(
                printable(
                    f"retagged  {wheel.retagged_from['wheel']} -> {wheel.portability.tag}: its modules need "
                    f"glibc {wheel.portability.glibc_text} ({wheel.portability.found()})"
                )
            )
    for refusal in refused:
        print(f"build.py index: refused {printable(refusal.message())}", file=sys.stderr)
    if passed:
        print(
            f"index {printable(args.index)}: pip install apex --index-url <where it is served>/<stack>/simple "
            f"(stacks: {printable(', '.join(sorted({w.stack for w in passed})))}; see {printable(args.index / 'index.html')})"
        )
    return exit_codes.FAILED if refused or unmatched else exit_codes.OK


def _address(args: argparse.Namespace) -> str | None:
    """Where the index is served, for its pages' install lines: --address, or the GitHub Pages address of
    --repository OWNER/REPO (toolchain/data/publish.toml), or None (the pages say <INDEX>)."""
    if args.repository:
        from toolchain.spec import publishing

        return publishing.load().address(args.repository)
    if args.address and not args.address.startswith(("http://", "https://")):
        raise UsageError(
            f"build.py index: --address {printable(args.address)} is not an http(s) URL; pass where the "
            "index is served, e.g. https://OWNER.github.io/REPO/"
        )
    return args.address


def _dependency_source(args: argparse.Namespace) -> dependencies.Source:
    """--dependency-wheels DIR (each a folder) and --no-download: where what the wheels require comes from."""
    for folder in args.dependency_wheels:
        if not folder.is_dir():
            raise UsageError(
                f"build.py index: --dependency-wheels {printable(folder)} is not a folder; pass one holding "
                "py3-none-any wheels (pip download --only-binary=:all: --no-deps --dest DIR packaging)"
            )
    return dependencies.Source(tuple(args.dependency_wheels), download=not args.no_download)
