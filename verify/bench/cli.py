"""`python -m verify bench [flags]`: parse flags into a BenchConfig, run, write bench.json/.md/*.png.

Exit codes (verify/runtime/exit_codes.py): 0 everything ran or was skipped with a reason; 1 a stage or kernel
failed; 2 a bad flag (one line naming the flag, the problem and the fix); 3 no CUDA device (unless
--device cpu, the smoke mode).
"""

from __future__ import annotations

import argparse
import datetime
import math
import re
import sys
import time
from pathlib import Path
from typing import NoReturn

from verify.bench import config as bench_config
from verify.runtime import atomic, exit_codes
from verify.runtime.messages import bounded, did_you_mean, printable, shown
from verify.runtime.out_dirs import OutputDirs
from verify.timing import host as timing_host

PROG = "verify bench"
DEFAULT_OUT = "bench-results"
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGbB]?)$")
_SIZE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9}


class BenchFlagError(Exception):
    """A bad flag: one line for the user, exit 2."""


class _BenchParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print usage and exit 2 itself
        raise BenchFlagError(f"{bounded(message)}; see `{PROG} --help`")


def _positive_int(flag: str, example: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a positive integer; pass e.g. {flag} {example}"
            )
        return value

    return parse


MAX_BIG_PARAMS = 1e11  # 400 GB of fp32 weights: more than an H200 (141 GB) holds, with its optimizer state


def parse_param_count(text: str) -> int:
    """'250M', '1.5e8', '300000000', '2.5G' -> a parameter count."""
    raw = text.strip().replace("_", "")
    match = _SIZE.match(raw)
    try:
        value = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()] if match else float(raw)
    except ValueError:
        value = 0.0
    if not math.isfinite(value) or value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a parameter count; pass e.g. --big-params 250M")
    if value > MAX_BIG_PARAMS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is more than {MAX_BIG_PARAMS:.0e} parameters ({MAX_BIG_PARAMS * 4 / 1e9:.0f}"
            " GB of fp32 weights, beyond any GPU's memory); pass e.g. --big-params 250M"
        )
    return int(value)


def parse_stages(text: str) -> tuple[str, ...]:
    """'all', 'none', or a comma list of stage numbers and/or keys -> stage keys in benchmark order."""
    from verify.bench.stages import STAGES

    if text.strip().lower() == "all":
        return tuple(s.key for s in STAGES)
    if text.strip().lower() == "none":
        return ()
    by_name = {str(s.number): s.key for s in STAGES} | {s.key: s.key for s in STAGES}
    chosen = set()
    for token in (t.strip().lower() for t in text.split(",")):
        if token not in by_name:
            near = did_you_mean(token, by_name)
            hint = f"{near} " if near else ""
            valid = ", ".join(f"{s.number}={s.key}" for s in STAGES)
            raise argparse.ArgumentTypeError(
                f"unknown stage {shown(token)}; {hint}use all, none or numbers/keys: {valid}"
            )
        chosen.add(by_name[token])
    return tuple(s.key for s in STAGES if s.key in chosen)


def _device(text: str) -> str:
    if text == "cpu" or re.fullmatch(r"cuda(:\d+)?", text):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a device; use cuda, cuda:N or cpu (the CPU smoke mode)"
    )


def _parser() -> argparse.ArgumentParser:
    p = _BenchParser(
        prog=PROG,
        description="Staged training benchmark and kernel microbenchmarks: Apex vs native "
        "PyTorch on this GPU. Writes DIR/bench.json, DIR/bench.md and DIR/*.png.",
    )
    p.add_argument(
        "--device",
        type=_device,
        default="cuda",
        help="cuda (default), cuda:N, or cpu: a smoke run with tiny sizes (for tests)",
    )
    p.add_argument(
        "--out", metavar="DIR", default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})"
    )
    p.add_argument(
        "--quick", action="store_true", help="smaller model and fewer steps (about a quarter of the time)"
    )
    p.add_argument(
        "--stages",
        type=parse_stages,
        default=None,
        help="which training stages: all (default), none, or e.g. 1,2,5 or adam-fp32,native-bf16",
    )
    p.add_argument("--no-micro", dest="micro", action="store_false", help="skip the kernel microbenchmarks")
    p.add_argument("--no-plots", dest="plots", action="store_false", help="write no PNG plots")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the initial weights and token batches (default 0)"
    )
    sizes = p.add_argument_group("sizes (defaults come from the preset: default, --quick, or --device cpu)")
    for flag, example, what in (
        ("--steps", "20", "timed training steps per stage"),
        ("--warmup", "5", "untimed warm-up steps per stage (they train too)"),
        ("--batch", "8", "sequences per batch"),
        ("--seq", "1024", "tokens per sequence"),
        ("--d-model", "1024", "model width (a multiple of 64, or at most 64)"),
        ("--layers", "12", "transformer blocks"),
        ("--vocab", "8192", "vocabulary size"),
    ):
        sizes.add_argument(flag, type=_positive_int(flag, example), default=None, help=what)
    sizes.add_argument(
        "--big-params",
        type=parse_param_count,
        default=None,
        metavar="N",
        help="parameters in the big optimizer case, e.g. 250M (default 250M)",
    )
    return p


def parse_config(argv: list[str]) -> bench_config.BenchConfig:
    """Flags -> BenchConfig (preset values, then explicit flags). Raises BenchFlagError."""
    args = _parser().parse_args(argv)  # before torch is imported: a mistyped flag needs no torch
    from verify.bench.stages import STAGES

    preset = "cpu-smoke" if args.device == "cpu" else ("quick" if args.quick else "default")
    values = dict(bench_config.PRESETS[preset])
    for key in ("steps", "warmup", "batch", "seq", "d_model", "layers", "vocab", "big_params"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    d_model = values["d_model"]
    if d_model > bench_config.MAX_HEAD_DIM and d_model % bench_config.MAX_HEAD_DIM:
        raise BenchFlagError(
            f"argument --d-model: {d_model} does not split into heads of {bench_config.MAX_HEAD_DIM};"
            f" use a multiple of {bench_config.MAX_HEAD_DIM} (e.g. {d_model // 64 * 64 or 64})"
        )
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BenchFlagError(f"argument --out: {out} exists and is not a directory; pass a directory path")
    return bench_config.BenchConfig(
        preset=preset,
        device=args.device,
        seed=args.seed,
        out=out,
        plots=args.plots,
        stages=args.stages if args.stages is not None else tuple(s.key for s in STAGES),
        micro=args.micro,
        **values,
    )


def _log(line: str) -> None:
    print(printable(line), flush=True)  # paths, GPU names and messages in it came from outside


def _cuda_unavailable(device: str) -> str | None:
    """Why the asked-for CUDA device cannot be used, or None."""
    import torch

    if not torch.cuda.is_available():
        built = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return (
            f"no CUDA device is visible (torch {torch.__version__}, {built}); run it on a GPU host "
            "(docker run --gpus all ...) or pass --device cpu for a CPU smoke run"
        )
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        return f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) visible; use cuda:0"
    return None


def run(cfg: bench_config.BenchConfig) -> int:
    import torch

    from verify.bench import apex_parts, facts, micro, plots, results, stages

    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    device = torch.device(cfg.device)
    if device.type == "cuda":
        if device.index is None:  # set_device and the peak-memory counters want an index
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    _log(f"{PROG}: {cfg.preset} sizes on {device}; results go to {cfg.out}/")
    apex = apex_parts.probe(device)
    for part in apex.values():
        _log(f"  apex {part.feature}: " + ("usable" if part.usable else f"SKIP ({part.reason})"))
    environment = facts.collect(device)
    stage_data = stages.run_stages(cfg, device, apex, _log)
    copy, optimizer, norms = None, [], []
    if cfg.micro:
        copy = micro.copy_bandwidth(cfg, device)
        _log(
            f"[micro] copy bandwidth: {copy['GBps']} GB/s"
            if copy["status"] == "OK"
            else f"[micro] copy bandwidth: FAIL ({copy['reason']})"
        )
        ceiling = copy["GBps"] if copy["status"] == "OK" else None
        with timing_host.SteadyHost() as steady:  # the host conditions of verify's timing worker
            host = steady.conditions.to_json() if steady.conditions else None
            _log(f"[micro] host: {host['pinning'] if host else 'not pinned'}")
            optimizer = micro.optimizer_micro(cfg, device, apex, ceiling, _log, host)
            norms = micro.norm_micro(cfg, device, apex, ceiling, _log, host)
    timer = "cuda_events" if device.type == "cuda" else "perf_counter (CPU smoke run, not a GPU measurement)"
    doc = results.build(
        cfg_json=cfg.to_json(),
        environment=environment,
        apex={k: p.to_json() for k, p in apex.items()},
        timer=timer,
        copy=copy,
        stages=stage_data,
        optimizer=optimizer,
        norms=norms,
        started=started,
        duration_s=time.perf_counter() - t0,
    )
    if cfg.plots:
        missing = plots.matplotlib_missing()
        if missing:
            _log(missing)
            doc["plots_note"] = missing
        else:
            try:
                doc["plots"] = plots.write_plots(doc, cfg.out)
            except Exception as exc:  # a plot is a convenience: the data files must still be written
                doc["plots_note"] = f"plotting failed: {type(exc).__name__}: {exc}"
                _log(doc["plots_note"])
    doc["duration_s"] = round(time.perf_counter() - t0, 2)
    try:
        json_path, md_path = results.write(doc, cfg.out)
    except atomic.UnwritableTarget as exc:  # e.g. bench.json is a directory, or a FIFO nobody reads
        print(printable(f"{PROG}: error: cannot write {exc.filename}: {exc.strerror}"), file=sys.stderr)
        return exit_codes.USAGE
    except OSError as exc:  # disk full, directory removed mid-run
        print(
            printable(
                f"{PROG}: cannot write the results to {cfg.out} ({exc.strerror or exc}); free space or pass "
                "another --out"
            ),
            file=sys.stderr,
        )
        return exit_codes.ENVIRONMENT
    s = doc["summary"]
    _log(f"wrote {json_path}, {md_path}" + "".join(f", {cfg.out / p}" for p in doc["plots"]))
    _log(
        f"{PROG}: {s['OK']} ran, {s['SKIP']} skipped, {s['FAIL']} failed; finished in {doc['duration_s']:.1f} s"
    )
    return doc["exit_code"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = parse_config(argv)
    except BenchFlagError as exc:
        print(printable(f"{PROG}: error: {exc}"), file=sys.stderr)
        return exit_codes.USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        print(
            printable(
                f"{PROG}: torch is not installed in this Python ({sys.executable}); the benchmarks run torch: "
                "install it, or run verify bench in the environment that has it"
            ),
            file=sys.stderr,
        )
        return exit_codes.ENVIRONMENT
    if cfg.device != "cpu":
        reason = _cuda_unavailable(cfg.device)
        if reason:
            print(printable(f"{PROG}: {reason}"), file=sys.stderr)
            return exit_codes.ENVIRONMENT
    made = OutputDirs([cfg.out])  # removed again if the run fails and leaves it empty
    try:
        cfg.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(
            printable(
                f"{PROG}: error: argument --out: cannot create {cfg.out} ({exc.strerror}); pass a writable directory"
            ),
            file=sys.stderr,
        )
        return exit_codes.USAGE
    return made.run(lambda: run(cfg))
