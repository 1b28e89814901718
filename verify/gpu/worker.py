"""Run one group of GPU checks in this (fresh) process and stream the results as JSON lines.

    python -m verify.gpu.worker GROUP --seed N [--cases NAME,NAME...] [--no-compile]

The parent (verify.gpu.runner) starts one of these per group with a per-check timeout, so a kernel
that kills the process (illegal address, segfault, abort), poisons the CUDA context, or hangs costs
that one check, not the report. Protocol on stdout, one JSON object a line:
    {"event": "ready", "group", "device", "setup_s"}
        with --hold, the worker then waits for one line on stdin (or its end) before the first case
    {"event": "start", "case"}
    {"event": "result", "check": Check.to_json(), "timings": [...]}
    {"event": "poisoned", "error"}   the CUDA context is broken: the parent restarts the rest elsewhere
    {"event": "done"}
Anything else a library prints to stdout (C or Python) is diverted to stderr, so the protocol stays
parseable. Exit codes: 0 done, 1 context poisoned, 2 usage error, 3 no CUDA device for a GPU group.

Test hook: VERIFY_FAULT_INJECT="TARGET:MODE[,TARGET:MODE]" makes the worker misbehave on purpose so
tests can show the isolation. TARGET is a case name, a group name (its first case) or GROUP.setup;
MODE is crash (abort, SIGABRT), hang (sleep forever), raise (an exception), exit (exit code 7),
oom (ask the device for 4 PiB: a real out-of-memory error) or poison (an exception after which the
worker treats its CUDA context as broken, as after an illegal memory access).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
import traceback
from typing import Any, TextIO

from verify.checks import Check, Status
from verify.gpu import cases as case_table
from verify.gpu.errors import NoDevice
from verify.runtime import exit_codes

FAULT_ENV = "VERIFY_FAULT_INJECT"
FAULT_MODES = ("crash", "hang", "raise", "exit", "oom", "poison")


class InjectedFault(RuntimeError):
    def __init__(self, message: str, poison: bool = False) -> None:
        super().__init__(message)
        self.poison = poison


def parse_faults(spec: str) -> dict[str, str]:
    """'target:mode,target:mode' -> {target: mode}; unknown modes are a usage error."""
    faults: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        target, _, mode = item.rpartition(":")
        if not target or mode not in FAULT_MODES:
            raise ValueError(
                f"{FAULT_ENV}={spec!r}: {item!r} is not TARGET:MODE with MODE one of {', '.join(FAULT_MODES)}"
            )
        faults[target] = mode
    return faults


def inject(mode: str, where: str) -> None:
    print(
        f"verify.gpu.worker: injecting fault {mode!r} at {where} ({FAULT_ENV})", file=sys.stderr, flush=True
    )
    if mode == "crash":
        os.abort()
    if mode == "hang":
        while True:
            time.sleep(60)
    if mode == "exit":
        os._exit(7)
    if mode == "oom":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        torch.empty(2**50, dtype=torch.float32, device=device)  # 4 PiB: the allocator refuses at once
    raise InjectedFault(f"injected fault at {where} ({FAULT_ENV})", poison=mode == "poison")


def _fault_for(faults: dict[str, str], case: case_table.Case) -> str | None:
    if case.name in faults:
        return faults[case.name]
    first = case_table.cases_of(case.group)[0]
    return faults.get(case.group) if case.name == first.name else None


class Protocol:
    """The results channel: the real stdout, kept aside before fd 1 is pointed at stderr."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self._out: TextIO = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)  # C printf and Python print now land in stderr

    def emit(self, event: str, **data: Any) -> None:
        self._out.write(json.dumps({"event": event, **data}, allow_nan=False, default=str) + "\n")
        self._out.flush()


def _context_broken() -> str | None:
    """After a failed case: is the CUDA context still usable? (illegal-address errors are sticky)"""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    except Exception as err:  # noqa: BLE001 - any failure here means the context is gone
        return f"{type(err).__name__}: {err}".strip()
    return None


def _failed_check(case: case_table.Case, err: BaseException, duration_s: float, seed: int) -> Check:
    first_line = (str(err).strip().splitlines() or [""])[0][:300]
    tb = traceback.format_exception(type(err), err, err.__traceback__)
    return Check(
        case.layer,
        case.name,
        Status.FAIL,
        f"{case.name} raised {type(err).__name__}: {first_line}",
        {
            "error": f"{type(err).__name__}: {str(err)[:2000]}",
            "traceback_tail": "".join(tb)[-3000:],
            "seed": seed,
        },
        duration_s,
    )


def _finite(value: Any) -> Any:
    """JSON has no NaN/Inf: a stray one in details is named instead of breaking the protocol line."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def run(
    group: str,
    seed: int,
    names: list[str] | None,
    proto: Protocol,
    hold: bool = False,
    compile_natives: bool = True,
) -> int:
    faults = parse_faults(os.environ.get(FAULT_ENV, ""))
    group_cases = case_table.cases_of(group)
    if names:
        by_name = {c.name: c for c in group_cases}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise KeyError(f"--cases {','.join(unknown)}: not in group {group}; it has {', '.join(by_name)}")
        todo = [by_name[n] for n in names]
    else:
        todo = group_cases

    t0 = time.perf_counter()
    if f"{group}.setup" in faults:
        inject(faults[f"{group}.setup"], f"{group}.setup")
    module = importlib.import_module(case_table.GROUP_MODULES[group])
    if hasattr(module, "configure"):  # a group with options (timing: --no-compile leaves compiled torch out)
        module.configure(compile_natives=compile_natives)
    device = module.setup()
    proto.emit("ready", group=group, device=device, setup_s=round(time.perf_counter() - t0, 3))
    if hold:  # set up beside other groups; measure only once the parent says they are done
        sys.stdin.readline()

    for case in todo:
        proto.emit("start", case=case.name)
        started = time.perf_counter()
        try:
            mode = _fault_for(faults, case)
            if mode:
                inject(mode, case.name)
            check, timings = module.run_case(case, seed)
            check.duration_s = time.perf_counter() - started
        except Exception as err:  # noqa: BLE001 - a failing case is a FAIL check, not a dead worker
            check, timings = _failed_check(case, err, time.perf_counter() - started, seed), []
            broken = _context_broken() or (
                f"{err} (simulated broken context)" if isinstance(err, InjectedFault) and err.poison else None
            )
            if broken:
                check.details["cuda_context"] = f"broken after this case: {broken}"
                proto.emit("result", check=_finite(check.to_json()), timings=[])
                proto.emit("poisoned", error=broken)
                return 1
        proto.emit("result", check=_finite(check.to_json()), timings=_finite(timings))
    proto.emit("done")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verify.gpu.worker", description=__doc__.splitlines()[0])
    parser.add_argument(
        "group", help="check group: " + ", ".join(case_table.GPU_GROUPS + case_table.SELFTEST_GROUPS)
    )
    parser.add_argument("--seed", type=int, required=True, help="seed of this run (recorded in every check)")
    parser.add_argument(
        "--cases", default="", help="comma-separated case names to run (default: the whole group)"
    )
    parser.add_argument(
        "--hold", action="store_true", help="after setup, wait for a line on stdin before the cases"
    )
    parser.add_argument(
        "--no-compile", action="store_true", help="time no torch.compile'd alternative (verify --no-compile)"
    )
    args = parser.parse_args(argv)
    if args.group not in case_table.GROUP_MODULES:
        print(
            f"verify.gpu.worker: unknown group {args.group!r}: use one of "
            f"{', '.join(case_table.GROUP_MODULES)}",
            file=sys.stderr,
        )
        return exit_codes.USAGE
    try:
        parse_faults(os.environ.get(FAULT_ENV, ""))
    except ValueError as err:
        print(f"verify.gpu.worker: {err}", file=sys.stderr)
        return exit_codes.USAGE
    names = [n for n in args.cases.split(",") if n]
    proto = Protocol()
    try:
        return run(
            args.group, args.seed, names or None, proto, hold=args.hold, compile_natives=not args.no_compile
        )
    except KeyError as err:
        print(f"verify.gpu.worker: {err.args[0]}", file=sys.stderr)
        return exit_codes.USAGE
    except NoDevice as err:
        print(f"verify.gpu.worker: {err}", file=sys.stderr)
        return exit_codes.ENVIRONMENT


if __name__ == "__main__":
    raise SystemExit(main())
