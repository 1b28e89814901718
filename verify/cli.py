"""`python -m verify` / `verify`: check the options, run the layers (verify.pipeline), write the reports,
print the summary, exit 0/1/2/3. User input is validated first: no torch import for a typo.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import sys
from pathlib import Path
from typing import NoReturn

from verify import distributed, pipeline
from verify.install import command as install_command
from verify.layers import expectations, manifest, module_map
from verify.report import junit, render
from verify.runtime import atomic, entry_point, exit_codes, interrupts, workflow_commands
from verify.runtime.messages import bounded, did_you_mean, printable, shown
from verify.runtime.out_dirs import OutputDirs

DEFAULT_CHECK_TIMEOUT_S = 120.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # one line naming the flag, not the whole usage block
        self.exit(exit_codes.USAGE, f"{self.prog}: {bounded(message)}; see `{self.prog} --help`\n")


def _parser(prog: str = "verify") -> argparse.ArgumentParser:
    features = ", ".join(module_map.feature_names())
    parser = _Parser(
        prog=prog,
        description="Does this Apex install really work on this GPU, and if not, why not. Layers: environment,"
        " identity, extensions, arch, expectations (--static stops here), then parity, compile and timing on a GPU."
        " `verify bench ...` runs the benchmarks; `verify install --index URL` installs this torch's Apex wheel"
        " and verifies it.",
        epilog=f"Features for --require: {features}; extension module names (amp_C, ...) work too. Exit codes: "
        + "; ".join(f"{k} {v}" for k, v in exit_codes.MEANINGS.items()),
    )
    parser.add_argument(
        "--static", action="store_true", help="layers 1-5 only: no GPU needed (the image build gate)"
    )
    parser.add_argument(
        "--json", metavar="PATH", help="write the report as JSON (schema verify/schema/report.schema.json)"
    )
    parser.add_argument("--markdown", metavar="PATH", help="write the report as Markdown")
    parser.add_argument(
        "--require",
        metavar="FEATURES",
        action="append",
        help="comma-separated features/modules that must work (repeatable; default:"
        f" {','.join(module_map.default_required_features())}; '' for none)",
    )
    parser.add_argument(
        "--manifest",
        metavar="PATH",
        help=f"build manifest (default: ${manifest.ENV_VAR}, else {manifest.DEFAULT_PATH})",
    )
    parser.add_argument("--require-gpu", action="store_true", help="exit 3 when no CUDA device is visible")
    parser.add_argument(
        "--seed", type=int, help="seed for the GPU layers' random inputs (default: a fresh one)"
    )
    parser.add_argument(
        "--check-timeout",
        metavar="S",
        type=float,
        default=DEFAULT_CHECK_TIMEOUT_S,
        help=f"seconds one import or GPU check group may take (default {DEFAULT_CHECK_TIMEOUT_S:g}; "
        "the probe's own start and torch import are not counted)",
    )
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument("--quiet", action="store_true", help="print only FAIL/WARN lines and the verdict")
    loudness.add_argument(
        "--verbose",
        action="store_true",
        help="print every check, layer by layer (default: the module table, then what is not PASS)",
    )
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Apex under torch.compile, and compiled torch among the timings' alternatives (default: on;"
        " SKIP where torch has no Inductor, Triton or C compiler)",
    )
    parser.add_argument(
        "--large",
        action="store_true",
        help="also run FusedLayerNorm and FusedAdam on tensors past 2^31 elements (about 20 and 36 GiB of"
        " GPU memory; SKIP where the GPU has less)",
    )
    parser.add_argument(
        "--junit",
        metavar="PATH",
        help="write every check as a JUnit XML test case (FAIL: failure, SKIP: skipped) for CI test reporters",
    )
    parser.add_argument(
        "--distributed",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="cross-GPU checks, one process per GPU (default: on when 2+ GPUs are visible)",
    )
    return parser


def _usage_error(message: str) -> int:
    print(f"verify: {workflow_commands.one_line(bounded(message))}", file=sys.stderr)
    return exit_codes.USAGE


def _bench(argv: list[str]) -> int:
    try:
        from verify.bench.cli import main as bench_main
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("verify.bench"):
            print(
                printable(
                    f"verify bench: the benchmark part of verify is not installed here ({exc.name} is missing)"
                ),
                file=sys.stderr,
            )
            return exit_codes.ENVIRONMENT
        raise
    return int(bench_main(argv) or 0)


def main(argv: list[str] | None = None, *, prog: str = "verify") -> int:
    """`prog`: the name the user typed (`apex-verify`, the apex-verify wheel's console script)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    bench = argv[:1] == ["bench"]
    return entry_point.run(
        f"{prog} bench" if bench else prog,
        lambda: _main(argv, prog),
        on_interrupt=entry_point.BENCH_ON_INTERRUPT if bench else ON_INTERRUPT,
    )


ON_INTERRUPT = "child processes stopped; no report written or left half-written"


def _conflict(args: argparse.Namespace) -> str | None:
    """Options that cannot go together: the message naming both, or None."""
    for flag, asked, what in (
        ("--large", args.large, "the large-tensor checks run on the GPU"),
        ("--distributed", args.distributed, "the cross-GPU checks run processes on the GPUs"),
    ):
        if asked and args.static:
            return f"{flag} with --static: {what}, --static stops after layer 5; drop one of the two"
    return None


def _main(argv: list[str], prog: str = "verify") -> int:
    if argv and argv[0] == "bench":
        return _bench(argv[1:])
    if argv and argv[0] == "install":  # verify itself is what checks the install: it runs in this process
        return install_command.run(argv[1:], prog, lambda verify_argv: _main(verify_argv, prog))
    parser = _parser(prog)
    if argv and not argv[0].startswith("-"):  # verify takes options; its one command is bench
        options = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
        hint = did_you_mean(argv[0], ["bench", "install", *options])
        return _usage_error(
            f"unknown command {shown(argv[0])}; "
            + (f"{hint} " if hint else "")
            + "(verify takes options, see `verify --help`; `verify bench` runs the benchmarks,"
            " `verify install --index URL` installs Apex and verifies it)"
        )
    args = parser.parse_args(argv)
    if not (math.isfinite(args.check_timeout) and args.check_timeout > 0):  # nan/inf would reach the report
        return _usage_error(f"--check-timeout {args.check_timeout:g}: must be a positive number of seconds")
    conflict = _conflict(args)
    if conflict:
        return _usage_error(conflict)
    hook_problem = distributed.hook_problem()
    if hook_problem:
        return _usage_error(hook_problem)
    try:
        required = expectations.parse_required(args.require)
    except expectations.RequireError as exc:
        return _usage_error(str(exc))
    manifest_path, manifest_origin = manifest.locate(args.manifest)
    loaded = None
    if manifest_path is not None:
        try:
            loaded = pipeline.LoadedManifest(
                manifest_path, manifest_origin, manifest.load(manifest_path, manifest_origin)
            )
        except manifest.ManifestError as exc:
            return _usage_error(str(exc))
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    return _run(
        args,
        pipeline.VerifyRequest(
            static=args.static,
            required=required,
            manifest=loaded,
            seed=seed,
            check_timeout_s=args.check_timeout,
            require_gpu=args.require_gpu,
            distributed=args.distributed,
            compile=args.compile,
            large=args.large,
        ),
    )


def _report_path_problem(args: argparse.Namespace) -> str | None:
    """Why a report path cannot be written, checked before the run, not after it (minutes of checks are not
    thrown away for a path that is a folder); the write itself still handles what only it can know."""
    paths = (("--json", args.json), ("--markdown", args.markdown), ("--junit", getattr(args, "junit", None)))
    for option, path in paths:
        problem = atomic.writable_problem(path) if path else None
        if problem:
            return f"{option}: cannot write report to {printable(path)}: {problem} (checked before the run)"
    return None


def _run(args: argparse.Namespace, request: pipeline.VerifyRequest) -> int:
    unwritable = _report_path_problem(args)
    if unwritable:
        return _usage_error(unwritable)
    try:
        report = pipeline.run(request)
        interrupts.raise_if_received()  # the last checkpoint before any report is written
    except pipeline.ManifestMismatch as exc:
        return _usage_error(str(exc))
    made = OutputDirs([Path(p).parent for p in (args.json, args.markdown, args.junit) if p])
    for path, writer in (
        (args.json, lambda p: atomic.write_json(p, report)),
        (args.markdown, lambda p: atomic.write_text(p, render.markdown(report))),
        (args.junit, lambda p: junit.write(p, report, report_path=args.json or args.markdown)),
    ):
        if path:
            try:
                writer(path)
            except OSError as exc:
                made.remove_empty()  # directories this run created for a report it could not write
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # the environment, not the user's input: exit 3
                    print(
                        printable(
                            f"verify: cannot write report to {path}: the disk is full ({exc.strerror}); free space"
                            " or write the report to another filesystem"
                        ),
                        file=sys.stderr,
                    )
                    return exit_codes.ENVIRONMENT
                if isinstance(exc, atomic.UnwritableTarget):  # its text says what the path is and the fix
                    return _usage_error(f"cannot write report to {path}: {exc.strerror}")
                return _usage_error(
                    f"cannot write report to {path}: {exc.strerror or exc}; choose a writable path"
                )
    sys.stdout.write(
        render.terminal(report, color=render.use_color(sys.stdout), quiet=args.quiet, verbose=args.verbose)
    )
    sys.stdout.flush()
    return report["exit_code"]
