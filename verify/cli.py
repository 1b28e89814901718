"""`python -m verify` / `verify`: run the layers, print the summary, write the reports, exit 0/1/2/3.

Order matters for speed: user input is validated first (no torch import for a typo), then the import
probe child starts in a background thread while this process imports torch and reads the environment,
so the two torch imports overlap and --static stays within its few seconds.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import errno
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from verify import (
    atomic,
    distributed,
    entry_point,
    environment,
    exit_codes,
    expectations,
    extensions,
    fatbin,
    identity,
    manifest,
    module_map,
    render,
    workflow_commands,
)
from verify import report as report_mod
from verify.checks import Check, Status
from verify.messages import bounded, did_you_mean, shown
from verify.out_dirs import OutputDirs

DEFAULT_CHECK_TIMEOUT_S = 120.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # one line naming the flag, not the whole usage block
        self.exit(exit_codes.USAGE, f"verify: {bounded(message)}; see `verify --help`\n")


def _parser() -> argparse.ArgumentParser:
    features = ", ".join(module_map.feature_names())
    parser = _Parser(
        prog="verify",
        description="Does this Apex install really work on this GPU, and if not, why not. Layers: environment,"
        " identity, extensions, arch, expectations (--static stops here), then parity and timing on a GPU."
        " `verify bench ...` runs the benchmarks.",
        epilog=f"Features for --require: {features}; extension module names (amp_C, ...) work too. Exit codes: "
        + "; ".join(f"{k} {v}" for k, v in exit_codes.MEANINGS.items()),
    )
    parser.add_argument("--static", action="store_true", help="layers 1-5 only: no GPU needed (the image build gate)")
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON (schema verify/schema/report.schema.json)")
    parser.add_argument("--markdown", metavar="PATH", help="write the report as Markdown")
    parser.add_argument("--require", metavar="FEATURES", action="append",
                        help="comma-separated features/modules that must work (repeatable; default:"
                        f" {','.join(module_map.default_required_features())}; '' for none)")
    parser.add_argument("--manifest", metavar="PATH",
                        help=f"build manifest (default: ${manifest.ENV_VAR}, else {manifest.DEFAULT_PATH})")
    parser.add_argument("--require-gpu", action="store_true", help="exit 3 when no CUDA device is visible")
    parser.add_argument("--seed", type=int, help="seed for the GPU layers' random inputs (default: a fresh one)")
    parser.add_argument("--check-timeout", metavar="S", type=float, default=DEFAULT_CHECK_TIMEOUT_S,
                        help=f"seconds one import or GPU check group may take (default {DEFAULT_CHECK_TIMEOUT_S:g})")
    parser.add_argument("--quiet", action="store_true", help="print only FAIL/WARN lines and the verdict")
    parser.add_argument("--distributed", action=argparse.BooleanOptionalAction, default=None,
                        help="cross-GPU checks, one process per GPU (default: on when 2+ GPUs are visible)")
    return parser


def _usage_error(message: str) -> int:
    print(f"verify: {workflow_commands.one_line(bounded(message))}", file=sys.stderr)
    return exit_codes.USAGE


def _bench(argv: list[str]) -> int:
    try:
        from verify.bench.cli import main as bench_main
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("verify.bench"):
            print(f"verify bench: the benchmark part of verify is not installed here ({exc.name} is missing)",
                  file=sys.stderr)
            return exit_codes.ENVIRONMENT
        raise
    return int(bench_main(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    bench = argv[:1] == ["bench"]
    return entry_point.run("verify bench" if bench else "verify", lambda: _main(argv),
                           on_interrupt=BENCH_ON_INTERRUPT if bench else ON_INTERRUPT)


ON_INTERRUPT = "child processes stopped; no report written or left half-written"
BENCH_ON_INTERRUPT = "no results written or left half-written"


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "bench":
        return _bench(argv[1:])
    parser = _parser()
    if argv and not argv[0].startswith("-"):  # verify takes options; its one command is bench
        options = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
        hint = did_you_mean(argv[0], ["bench", *options])
        return _usage_error(f"unknown command {shown(argv[0])}; " + (f"{hint} " if hint else "")
                            + "(verify takes options, see `verify --help`; `verify bench` runs the benchmarks)")
    args = parser.parse_args(argv)
    if not (math.isfinite(args.check_timeout) and args.check_timeout > 0):  # nan/inf would reach the report
        return _usage_error(f"--check-timeout {args.check_timeout:g}: must be a positive number of seconds")
    if args.distributed and args.static:
        return _usage_error("--distributed with --static: the cross-GPU checks run processes on the GPUs, --static"
                            " stops after layer 5; drop one of the two")
    hook_problem = distributed.hook_problem()
    if hook_problem:
        return _usage_error(hook_problem)
    try:
        required = expectations.parse_required(args.require)
    except expectations.RequireError as exc:
        return _usage_error(str(exc))
    manifest_path, manifest_origin = manifest.locate(args.manifest)
    manifest_data = None
    if manifest_path is not None:
        try:
            manifest_data = manifest.load(manifest_path, manifest_origin)
        except manifest.ManifestError as exc:
            return _usage_error(str(exc))
    return _run(args, required, manifest_data, manifest_path, manifest_origin)


def _probe_tasks(required: tuple[str, ...], manifest_data: dict[str, Any] | None) -> tuple[list[dict], list[str]]:
    names = [m.name for m in module_map.modules()]
    names += [m for m in (manifest_data or {}).get("expected_modules", []) if m not in names]
    tasks = [{"id": f"module:{n}", "op": "import", "target": n} for n in names]
    tasks.append({"id": "apex", "op": "import", "target": "apex"})
    tasks += [{"id": f"feature:{f}", "op": "attr", "target": path}
              for f, path in expectations.probe_targets(required).items()]
    return tasks, names


def _run(args: argparse.Namespace, required: tuple[str, ...], manifest_data: dict[str, Any] | None,
         manifest_path: Path | None, manifest_origin: str) -> int:
    t0 = time.perf_counter()
    started_at = datetime.datetime.now(datetime.timezone.utc)
    mode = "static" if args.static else "full"
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    tasks, module_names = _probe_tasks(required, manifest_data)
    cancel = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        probe_future = pool.submit(extensions.probe, tasks, timeout_s=args.check_timeout, cancel=cancel)
        try:
            env, checks = environment.collect()  # imports torch in this process, overlapping the child's
            torch_version = (env.get("torch") or {}).get("version")
            mismatch = manifest.torch_mismatch(manifest_data, torch_version) if manifest_data else None
            if mismatch:
                cancel.set()
                return _usage_error(mismatch)
            probe_results = probe_future.result()
        except BaseException:  # Ctrl-C, SIGTERM: the pool's exit must not wait out the probe's timeout
            cancel.set()
            raise

    capability = environment.capability(env)
    gpu_missing = capability is None
    old_driver = environment.driver_too_old(env)  # the node cannot run this torch's CUDA: exit 3 (environment.driver)
    if args.require_gpu and gpu_missing:
        why = ("the NVIDIA driver is too old for this torch's CUDA (see environment.driver)" if old_driver else
               "check the driver, the container's GPU access, CUDA_VISIBLE_DEVICES")
        checks.append(Check("environment", "require_gpu", Status.FAIL,
                            f"--require-gpu: no CUDA device is visible to torch ({why})"))

    ext_results = [extensions.classify(n, probe_results.get(f"module:{n}", {"status": "missing"}))
                   for n in module_names]
    apex_info = identity.locate()
    expected = expectations.modules_required(required) | set((manifest_data or {}).get("expected_modules", []))
    devices = environment.device_capabilities(env)
    arch_checks = extensions.read_arch(ext_results, capability, devices)
    checks += identity.identity_checks(apex_info, probe_results.get("apex"), manifest_data, ext_results)
    checks += extensions.extension_checks(ext_results, expected, apex_info.get("kind", "nvidia"))
    checks += arch_checks
    entry_points = {f: probe_results[f"feature:{f}"] for f in required if f"feature:{f}" in probe_results}
    arch_fix = f"rebuild with TORCH_CUDA_ARCH_LIST={fatbin.arch_list_value(capability)}" if capability else None
    checks += expectations.expectation_checks(required, ext_results, entry_points, manifest_data, arch_fix,
                                                apex_kind=apex_info["kind"])

    timings: list[dict[str, Any]] = []
    dist_block = None
    if mode == "full":
        device_usable = extensions.usable_on_devices(ext_results, max(1, len(devices)))
        gpu_checks, timings = _gpu_layers(gpu_missing, seed=seed, timeout_s=args.check_timeout,
                                          usable=device_usable[0], device_usable=device_usable)
        checks += gpu_checks
        dist = distributed.run_distributed_layer(
            requested=args.distributed, device_count=(env.get("torch") or {}).get("device_count") or 0,
            usable_modules=device_usable[0], seed=seed, check_timeout_s=args.check_timeout)
        checks += dist.checks
        dist_block = dist.block

    report = report_mod.build(
        mode=mode, started_at=started_at, duration_s=time.perf_counter() - t0, environment=env,
        apex=apex_info,
        manifest={"path": str(manifest_path), "origin": manifest_origin, "data": manifest_data} if manifest_data else None,
        extensions=[e.to_json() for e in ext_results], checks=checks, timings=timings,
        options={"require": list(required), "seed": seed, "check_timeout_s": args.check_timeout,
                 "require_gpu": args.require_gpu,
                 "distributed": {True: "on", False: "off", None: "auto"}[args.distributed]},
        environment_unavailable=(args.require_gpu and gpu_missing) or old_driver, distributed=dist_block,
    )
    made = OutputDirs([Path(p).parent for p in (args.json, args.markdown) if p])
    for path, writer in ((args.json, lambda p: atomic.write_json(p, report)),
                         (args.markdown, lambda p: atomic.write_text(p, render.markdown(report)))):
        if path:
            try:
                writer(path)
            except OSError as exc:
                made.remove_empty()  # directories this run created for a report it could not write
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # the environment, not the user's input: exit 3
                    print(f"verify: cannot write report to {path}: the disk is full ({exc.strerror}); free space"
                          " or write the report to another filesystem", file=sys.stderr)
                    return exit_codes.ENVIRONMENT
                if isinstance(exc, atomic.UnwritableTarget):  # its text says what the path is and the fix
                    return _usage_error(f"cannot write report to {path}: {exc.strerror}")
                return _usage_error(f"cannot write report to {path}: {exc.strerror or exc}; choose a writable path")
    sys.stdout.write(render.terminal(report, color=render.use_color(sys.stdout), quiet=args.quiet))
    sys.stdout.flush()
    return report["exit_code"]


def _gpu_layers(gpu_missing: bool, *, seed: int, timeout_s: float, usable: frozenset[str],
                device_usable: dict[int, frozenset[str]]) -> tuple[list[Check], list[dict[str, Any]]]:
    """Layers 6-7 (parity, timing) from verify.gpu; SKIP without a GPU, one FAIL if they cannot run."""
    if gpu_missing:
        reason = "no CUDA device visible: needs a GPU (use --static for layers 1-5 only)"
        return [Check("parity", "all", Status.SKIP, reason), Check("timing", "all", Status.SKIP, reason)], []
    try:
        from verify.gpu import run_gpu_layers
    except ImportError as exc:
        return [Check("parity", "all", Status.FAIL,
                      f"the GPU layers are not installed with this verify (import verify.gpu failed: {exc})")], []
    try:
        results = run_gpu_layers(seed=seed, check_timeout_s=timeout_s, usable_modules=usable,
                                 device_count=len(device_usable), device_usable=device_usable)
    except Exception as exc:  # one broken layer must not lose the static findings
        return [Check("parity", "all", Status.FAIL, f"GPU layers stopped: {type(exc).__name__}: {exc}")], []
    return list(results.checks), list(results.timings)
