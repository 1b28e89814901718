"""`apex-verify install --index URL [--full] [--dry-run] [--require FEATURES]`: read this environment's
stack, pick its wheel from the index, install it with the installed torch pinned, then run verify and
print one verdict line. Every refusal comes before the installer starts. Exit codes: verify's own after
an install (0 pass, 1 verification failed); 2 bad usage (a flag, an --index that is no URL); 3 the
environment (no torch, no wheel for this stack, an index that cannot be read, an installer that failed).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from verify.install import choice, index_stacks, installer, local_stack
from verify.install.problem import InstallProblem
from verify.runtime import exit_codes, input_files
from verify.runtime.messages import bounded, printable

# runs verify with these arguments in this process and returns its exit code (verify.cli passes its own)
VerifyRun = Callable[[list[str]], int]


class _InstallParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(exit_codes.USAGE, f"{self.prog}: {bounded(message)}; see `{self.prog} --help`\n")


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = _InstallParser(
        prog=f"{prog} install",
        description="Install the Apex wheel of this environment's torch stack from an index `build.py index`"
        " wrote, with the installed torch pinned exactly, then verify it (--static unless --full). Refuses"
        " before installing anything when the index has no wheel for this torch, CUDA build and Python.",
        epilog="Exit codes: 0 verified; 1 verification failed; 2 usage; 3 environment (no torch, no wheel for"
        " this stack, index unreadable, installer failed).",
    )
    parser.add_argument("--index", required=True, metavar="URL", help="the index root (holds stacks.json)")
    parser.add_argument("--full", action="store_true", help="verify's full run (the GPU checks too)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="pick the wheel and let the installer resolve it; install nothing",
    )
    parser.add_argument(
        "--require", metavar="FEATURES", action="append", help="passed to verify (see its --help)"
    )
    return parser


def run(argv: list[str], prog: str, verify_run: VerifyRun) -> int:
    args = _parser(prog).parse_args(argv)
    try:
        return _install(args, prog, verify_run)
    except InstallProblem as exc:
        print(printable(f"{prog} install: {bounded(str(exc))}"), file=sys.stderr)
        return exc.exit_code


def _install(args: argparse.Namespace, prog: str, verify_run: VerifyRun) -> int:
    root = index_stacks.root_url(args.index)  # a bad URL is exit 2 before torch is even imported
    local = local_stack.read()
    picked = choice.choose(local, index_stacks.read(args.index), root)
    plan = installer.plan(picked.stack.simple_url, local.torch_pin, dry_run=args.dry_run)
    print(
        printable(
            f"{prog} install: {local.describe()} -> {picked.stack.name} ({', '.join(picked.wheels)}); {plan.tool}:"
            f" {plan.shown()}"
        ),
        flush=True,
    )
    torch_before = _installed("torch")
    code = installer.run(plan)
    if code != 0:
        raise InstallProblem(
            f"{plan.tool} exited {code} installing apex from {plan.index_url} (its error is above); nothing"
            " was verified. Fix what it names and run this again"
        )
    if args.dry_run:
        print(
            printable(
                f"{prog} install: dry run: {plan.tool} resolved apex from {picked.stack.name}; nothing installed"
            )
        )
        return exit_codes.OK
    torch_after = _installed("torch")
    if torch_after != torch_before:  # the constraint should make this impossible: say so if it happened
        print(
            printable(
                f"{prog} install: FAIL — torch changed from {torch_before} to {torch_after} during the install;"
                f" reinstall torch {torch_before}"
            ),
            file=sys.stderr,
        )
        return exit_codes.FAILED
    importlib.invalidate_caches()  # apex was installed while this process ran
    mode = "full" if args.full else "static"
    require = args.require if args.require is not None else gate_require()
    verified = verify_run([*([] if args.full else ["--static"]), *[f"--require={r}" for r in require or []]])
    verdict = "PASS" if verified == exit_codes.OK else "FAIL"
    print(
        printable(
            f"{prog} install: {verdict} — apex {_installed('apex')} from {picked.stack.name} installed by"
            f" {plan.tool}, torch {torch_after} unchanged; verify {mode}: exit {verified}"
            f" ({exit_codes.MEANINGS.get(verified, 'see verify --help')})"
        ),
        flush=True,
    )
    return verified


GATE_REPORT = (
    "verify-static.json"  # the build gate's report, in the wheel's .dist-info (the builder puts it there)
)


def gate_require() -> list[str] | None:
    """The features the installed wheel's own build gate required (its report's `options.require`): with no
    --require, apex-verify install checks what that build promised, so a wheel built without CUDA modules
    is not failed for lacking FusedAdam. None (verify's own defaults) when the wheel carries no report."""
    try:
        dist = importlib.metadata.distribution("apex")
    except importlib.metadata.PackageNotFoundError:
        return None
    found = [f for f in dist.files or () if f.name == GATE_REPORT and f.parent.name.endswith(".dist-info")]
    if not found:
        return None
    path = Path(str(dist.locate_file(found[0])))
    try:
        report = input_files.decode_json(
            input_files.read_bytes(path, input_files.VERIFY_REPORT), path, input_files.VERIFY_REPORT
        )
    except input_files.InputFileError:
        return None
    options = report.get("options") if isinstance(report, dict) else None
    require = options.get("require") if isinstance(options, dict) else None
    if not isinstance(require, list) or not all(isinstance(r, str) for r in require):
        return None
    return [",".join(require)]  # one --require value; an empty one requires nothing


def _installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
