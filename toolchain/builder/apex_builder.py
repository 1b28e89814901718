"""The one code path that turns an Apex source tree into a wheel and a build manifest.

The Dockerfile's apex-build stage runs it, and so does a bare-metal host without Docker:

    python -m toolchain.builder.apex_builder --apex-src ~/apex --out dist --archs 9.0 [--install]
    python build.py wheel ...            (the same `main`, behind the project's CLI)

The options become one BuildRequest (request.py); then, step by step:
  1. check the inputs (build_inputs.py): the source tree, how SRC/setup.py takes its switches
     (apex_setup.py: APEX_* variables from tag 25.09, argv switches before), the flags, the arch list;
  2. check the toolchain (build_tools.py): nvcc == torch's CUDA (else one from the package index), the
     archs nvcc can compile, the packages --no-build-isolation needs;
  3. size parallelism from cores and memory (parallelism.py);
  4. `pip wheel --no-build-isolation` with the flags passed the way setup.py reads them (pip_wheel.py),
     through ccache (ccache.py);
  5. list the extensions really in the wheel (build_outputs.py) and write OUT/build-manifest.json
     (verify.layers.manifest.BuildManifest, with build_timing.py's timing and provenance.py's identity);
  6. gate: an expected module missing fails (exit 1) instead of shipping Apex's silent Python-only
     fallback; with --install, `verify --static` is the gate (static_gate.py).
Standard library only (plus torch, which the build needs anyway): it runs inside the build image.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import errno
import fcntl
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from toolchain.builder import (
    apex_setup,
    build_inputs,
    build_outputs,
    build_progress,
    build_timing,
    build_tools,
    ccache,
    command_clock,
    parallelism,
    unit_schedule,
    wheel_identity,
)
from toolchain.builder import request as build_request
from toolchain.builder.build_env import BuildEnv, EnvStep, path_first
from toolchain.builder.build_inputs import BuildInputs
from toolchain.builder.build_outputs import LOG_NAME, MANIFEST_NAME
from toolchain.builder.build_tools import BuildTools
from toolchain.builder.command_clock import CommandClock
from toolchain.builder.pip_wheel import build_wheel
from toolchain.builder.provenance import apex_identity, sha256_of, wheel_hashes
from toolchain.builder.request import BuildRequest
from toolchain.builder.static_gate import gate_required, install_and_verify, install_wheel
from toolchain.errors import ToolchainError, UsageError
from verify.domain.arch import arch_list_text
from verify.layers import module_map
from verify.layers.manifest import BuildManifest, BuildStats, Parallelism, Versions
from verify.runtime import atomic, entry_point, exit_codes, input_files
from verify.runtime.messages import bounded, printable
from verify.runtime.out_dirs import OutputDirs

__all__ = [
    "build",
    "build_and_gate",
    "gate_required",
    "main",
]  # gate_required: the Dockerfile's runtime stage


def _say(message: str) -> None:
    # paths, wheel names and pip's words in it came from outside: one line, no control character
    print(f"[apex-builder] {printable(message)}", flush=True)


# ---------------------------------------------------------------- entry point


def main(argv: list[str] | None = None, default_flags: str | None = None) -> int:
    """`default_flags`: --flags when none is given (build.py wheel hands in compat.toml's core flags; the
    Dockerfile always passes --flags from the cell)."""
    clock = command_clock.of_this_process()  # the wall printed and recorded is the whole command's
    request = build_request.parse(argv, default_flags)
    # --out is removed again if the build fails before writing to it
    return OutputDirs([request.out.expanduser()]).run(lambda: _main_reporting(request, clock))


def _main_reporting(request: BuildRequest, clock: CommandClock | None = None) -> int:
    try:
        return build(request, clock)
    except ToolchainError as err:
        print(f"[apex-builder] error: {printable(bounded(str(err)))}", file=sys.stderr, flush=True)
        return err.exit_code
    except atomic.LinkInOwnedTree as err:  # a link or special file met while writing into --out
        where = f"--out {request.out}: {err.filename}: {err.strerror}"
        print(f"[apex-builder] error: {printable(where)}", file=sys.stderr, flush=True)
        return exit_codes.USAGE
    except OSError as err:  # writing OUT (or reading a file it names) failed: one line, not a traceback
        message = _os_error_message(err, request.out)
        print(f"[apex-builder] error: {printable(message)}", file=sys.stderr, flush=True)
        return exit_codes.ENVIRONMENT if err.errno in (errno.ENOSPC, errno.EDQUOT) else exit_codes.USAGE
    except KeyboardInterrupt:
        print("[apex-builder] interrupted; no manifest written", file=sys.stderr)
        return exit_codes.FAILED


def _os_error_message(err: OSError, out: Path) -> str:
    path = err.filename or out
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on device writing {path}; free space, or pass --out on another filesystem"
    name, given = (
        os.path.abspath(str(err.filename or "")),
        os.path.abspath(out),
    )  # a relative --out is OUT too
    if err.filename and not (name.startswith(given) or given.startswith(name)):  # not OUT, inside or above it
        return f"{path}: {err.strerror or err}; check that it exists and this user can read and write it"
    if err.errno in (errno.EEXIST, errno.ENOTDIR):  # OUT, or a folder above it, is a file, a FIFO, a device
        which = f"{path} exists and is not" if err.errno == errno.EEXIST else f"a part of {path} is not"
        return f"--out {out}: {which} a directory; pass a directory (it is created when missing), e.g. --out ./dist"
    return (
        f"--out {out}: cannot write {path} ({err.strerror or err}); pass a directory you can create "
        "and write, e.g. --out ./dist"
    )


def build(request: BuildRequest, clock: CommandClock | None = None) -> int:
    """Every check first (steps 1-2), then build_and_gate. `clock`: when the command started (main's)."""
    clock = clock or command_clock.started_now()
    started = dt.datetime.fromtimestamp(clock.started_epoch_s, dt.timezone.utc)
    inputs = build_inputs.resolve(request)
    request.out_dir.mkdir(parents=True, exist_ok=True)  # an unwritable --out fails now, not after the checks
    lock = _lock_out(request.out_dir)  # one builder per --out, until this build ends
    try:
        _refuse_links_in_out(request.out_dir)
        # the venv's bin (ninja from pip) must be on PATH even when the venv is not activated
        env = BuildEnv.of(os.environ)
        env = env.plus(EnvStep.of("venv", {"PATH": path_first(env.vars(), str(Path(sys.executable).parent))}))
        tools = build_tools.check(request, inputs, env.vars(), _say)
        return build_and_gate(request, inputs, tools, env.plus(tools.env).vars(), started, clock)
    finally:
        os.close(lock)


def _refuse_links_in_out(out: Path) -> None:
    """The files a build writes into --out (its log, manifest, unit times, gate reports and wheel) are never
    written through a link planted there (atomic's owned-tree rule): a link at a name known now (a wheel's
    is known only after pip ran: any *.whl here) is refused before anything runs, exit 2, naming it; every
    write checks again at its own time."""
    wheels = sorted(entry.name for entry in os.scandir(out) if entry.name.endswith(".whl"))
    names = (LOG_NAME, MANIFEST_NAME, build_timing.TIMES_NAME, *wheel_identity.VERIFY_FILES, *wheels)
    try:
        atomic.refuse_links_in_tree(out, only=names)
    except atomic.LinkInOwnedTree as error:
        raise UsageError(f"--out {out}: {error.filename}: {error.strerror}") from None


def _lock_out(out: Path) -> int:
    """An exclusive lock on the OUT folder itself (flock on its descriptor: no file is added, so a failed
    build's empty folders still go): two builders on one --out would write one log, one wheel name and
    one manifest at once; the second is refused at once, exit 2."""
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(
            f"--out {out}: another build.py wheel is writing there now (it holds a lock on the folder); "
            "wait for it to end, or pass another --out"
        ) from None
    return fd


# ---------------------------------------------------------------- after the checks


def _write_manifest(out: Path, data: Mapping[str, object]) -> Path:
    atomic.write_in_tree(out, MANIFEST_NAME, (atomic.json_dumps(data) + "\n").encode("utf-8"))
    return out / MANIFEST_NAME


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What steps 3-4 did: the parallelism used, how the flags were passed, the wheel and its figures."""

    parallelism: dict
    pip_options: list[str]
    passed: str  # how the flags reached setup.py, in words
    wheel: Path
    stats: dict  # pip_wall_s, started_epoch_s (pip's), cpu_s, peak_rss_mb, peak_rss_single_process_mb
    ccache: dict
    env: dict[str, str]  # the environment pip ran in (the install after the gate runs in it too)


def build_and_gate(
    request: BuildRequest,
    inputs: BuildInputs,
    tools: BuildTools,
    env: Mapping[str, str],
    started: dt.datetime,
    clock: CommandClock | None = None,
) -> int:
    """After the checks: size, build, list, write the manifest, gate (and install + verify). `env`: the
    environment after the checks' steps (build_env.py); the flags' step and the compile's go on it here.
    `clock`: when the command started (a direct caller without one: now)."""
    clock = clock or command_clock.started_now()
    request.out_dir.mkdir(parents=True, exist_ok=True)
    # pip's wheel, its stamped copy and the gate's reports are made here, then put into OUT by the rule
    with tempfile.TemporaryDirectory(prefix="apex-builder-out-") as private:
        return _build_and_gate(request, inputs, tools, env, started, clock, Path(private))


def _build_and_gate(
    request: BuildRequest,
    inputs: BuildInputs,
    tools: BuildTools,
    env: Mapping[str, str],
    started: dt.datetime,
    clock: CommandClock,
    private: Path,
) -> int:
    out = request.out_dir
    log_path = out / LOG_NAME
    atomic.write_in_tree(out, LOG_NAME, b"")  # a fresh log; never through a link (checked, and not followed)
    compiled = _compile(
        request, inputs, tools, BuildEnv.of(env).plus(_flag_env(inputs)), log_path, clock, private
    )
    env = compiled.env
    log_lines = input_files.read_text_lenient(log_path, input_files.LOG).splitlines()
    built = build_outputs.extension_modules(compiled.wheel)
    manifest = _manifest(request, inputs, tools, compiled, built, log_lines, started, clock)
    wheel, manifest = _with_identity(compiled.wheel, manifest, out)
    # the manifest beside the wheel keeps the build record of the copy inside it (`build.py index` compares
    # the two); what is printed is the whole command's wall up to now: renaming the wheel took seconds too
    manifest_path = _write_manifest(out, manifest.to_json())
    stats = _with_wall(manifest, clock).build.to_json()
    _say(
        f"wheel {wheel} (wall {stats['wall_s']} s, of which pip wheel {stats['pip_wall_s']} s; peak "
        f"{stats['peak_rss_mb']:.0f} MiB); manifest {manifest_path}"
    )
    _say(f"built modules: {', '.join(built) or 'none'}")
    _say(build_timing.timing_line(stats))

    missing = build_outputs.missing_modules(inputs.expected, built, log_lines)
    if missing:
        setup = inputs.setup
        cause = build_outputs.nothing_built_cause(
            setup.style, setup.evidence, compiled.passed, log_lines, log_path
        )
        level = "warning" if request.no_gate else "error"
        for line in build_outputs.gate_report(missing, inputs.expected, cause, log_path, level):
            print(printable(line), file=sys.stderr, flush=True)
    if missing and not request.no_gate:
        return exit_codes.FAILED
    if request.install:
        code = install_and_verify(
            wheel, manifest_path, list(manifest.expected_modules), out, env, _say, private
        )
        if manifest.wheel_identity:
            _carry_gate_report(wheel, manifest, out, env, private)
        return code
    return exit_codes.OK


def _with_wall(manifest: BuildManifest, clock: CommandClock) -> BuildManifest:
    """The whole command's wall so far in build.wall_s and the timing's wall / bound: what is printed. The
    manifests (beside and inside the wheel) keep the wall at their writing, identical in both."""
    wall = round(clock.elapsed_s(), 1)
    timing = manifest.build.timing
    return dataclasses.replace(
        manifest,
        build=manifest.build.updated(
            wall_s=wall, timing=build_timing.with_wall(dict(timing), wall) if timing else timing
        ),
    )


def _into_out(wheel: Path, out: Path) -> Path:
    """The wheel, made in the private temp folder, moved into OUT under the owned-tree rule: a link or a
    special file where it lands is refused (exit 2, naming it), never followed."""
    atomic.move_in_tree(out, wheel.name, wheel)
    return out / wheel.name


def _with_identity(raw: Path, manifest: BuildManifest, out: Path) -> tuple[Path, BuildManifest]:
    """Step 5b: the wheel (`raw`: pip's, in the private temp folder) renamed for its stack
    (wheel_identity.py), the manifest inside its dist-info, moved into OUT; the manifest beside it records
    the final name and sha256 (the copy inside cannot hold its own wheel's hash). A build whose torch
    version says no MAJOR.MINOR keeps setup.py's name, and `build.py index` refuses it."""
    versions = manifest.versions
    try:
        ident = wheel_identity.identity(
            manifest.apex.get("version") or "0.1",
            manifest.commit,
            manifest.apex.get("ref"),
            str(versions.torch or ""),
            versions.torch_cuda,
        )
    except ValueError as error:
        _say(f"WARNING: the wheel keeps setup.py's name {raw.name} (no stack identity: {error})")
        return _into_out(raw, out), manifest
    target = raw.parent / "stamped" / wheel_identity.final_name(raw.name, ident)
    inside = dataclasses.replace(
        manifest,
        wheel_identity=ident.to_json(),
        build=manifest.build.updated(wheel=target.name, wheel_sha256=None, wheel_as_built=raw.name),
    )
    wheel_identity.stamp(
        raw,
        target,
        ident.version,
        ident.torch_requirement,
        {wheel_identity.MANIFEST_FILE: _json_bytes(inside)},
    )
    raw.unlink()
    sha256 = sha256_of(target)
    _say(f"wheel identity: {ident.version} (requires {ident.torch_requirement}; index stack {ident.stack})")
    return _into_out(target, out), dataclasses.replace(
        inside, build=inside.build.updated(wheel_sha256=sha256)
    )


def _carry_gate_report(
    wheel: Path, manifest: BuildManifest, out: Path, env: Mapping[str, str], private: Path
) -> None:
    """After the gate: its report goes into the wheel's dist-info (whatever its verdict: `build.py index`
    reads it and refuses a failed one), the manifest beside it gets the new sha256, and the venv gets the
    wheel as published."""
    reports = {
        name: input_files.read_bytes(out / name, input_files.VERIFY_REPORT)
        for name in wheel_identity.VERIFY_FILES
        if (out / name).is_file()
    }
    if not reports:
        return
    inside = wheel_identity.read_dist_info(wheel, (wheel_identity.MANIFEST_FILE,))
    assert manifest.wheel_identity is not None  # _with_identity named the wheel before the gate ran
    restamped = wheel_identity.stamp(
        wheel,
        private / "restamped" / wheel.name,
        str(manifest.wheel_identity["version"]),
        str(manifest.wheel_identity["torch_requirement"]),
        {**inside, **reports},
    )
    _into_out(restamped, out)
    _write_manifest(
        out,
        dataclasses.replace(manifest, build=manifest.build.updated(wheel_sha256=sha256_of(wheel))).to_json(),
    )
    install_wheel(wheel, env, out / LOG_NAME)


def _json_bytes(manifest: BuildManifest) -> bytes:
    from verify.runtime.atomic import json_dumps

    return (json_dumps(manifest.to_json(), indent=2) + "\n").encode("utf-8")


def _flag_env(inputs: BuildInputs) -> EnvStep:
    """Only the flags asked for, and only where setup.py reads them: a stray APEX_* in the shell must not
    leak in; the arch list exactly as checked."""
    sets = dict(inputs.flags) if inputs.setup.style == apex_setup.ENV else {}
    if inputs.archs:
        sets["TORCH_CUDA_ARCH_LIST"] = arch_list_text(inputs.archs)
    return EnvStep.of("flags", sets, unsets=[*module_map.known_flags(), "TORCH_CUDA_ARCH_LIST"])


def _size(
    request: BuildRequest, inputs: BuildInputs, env: Mapping[str, str]
) -> tuple[dict, unit_schedule.Schedule | None, bool, EnvStep]:
    """Step 3: the parallelism (MAX_JOBS, nvcc --threads, extensions at once); its record, the unit schedule
    (slowest units first, unit_schedule.py), whether the user chose nvcc --threads, and its env step."""
    setup = inputs.setup
    if request.naive:
        step = EnvStep.of(
            "parallelism", {"MAX_JOBS": "4"}, unsets=("APEX_PARALLEL_BUILD", "NVCC_APPEND_FLAGS")
        )
        return (
            {
                "max_jobs": 4,
                "nvcc_threads": 1,
                "apex_parallel_build": 1,
                "reason": "--naive: the published guides' MAX_JOBS=4, one extension at a time, no nvcc --threads, "
                "no unit schedule; the arch list from --archs, else setup.py's",
            },
            None,
            False,
            step,
        )
    resources = parallelism.host_resources()
    if request.memory_gib is not None and request.memory_gib <= resources.mem_available_gib:
        resources = dataclasses.replace(
            resources, mem_available_gib=request.memory_gib, mem_source="--memory-gib"
        )
    gib_per_thread, gib_from = build_timing.measured_gib_per_thread(request.out_dir / MANIFEST_NAME)
    n_ext = len(inputs.expected) if setup.parallel != "none" else 1
    n_archs = len(inputs.archs or [1])
    first = unit_schedule.for_build(inputs.expected, n_archs, resources.cores) if n_ext > 1 else None
    try:
        plan = parallelism.plan(
            resources,
            n_archs=n_archs,
            # a setup.py without --parallel / APEX_PARALLEL_BUILD builds one extension at a time
            n_extensions=n_ext,
            jobs=request.jobs,
            nvcc_threads=request.nvcc_threads,
            env=env,
            gib_per_thread=gib_per_thread,
            gib_from=gib_from,
            scheduled_extra_threads=first.extra_threads if first else None,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    user_threads = request.nvcc_threads is not None or parallelism.env_nvcc_threads(env) is not None
    schedule = (
        unit_schedule.for_build(inputs.expected, n_archs, resources.cores, plan.nvcc_threads, plan.scheduled)
        if first
        else None
    )
    step = EnvStep.of("parallelism", plan.env(dict(env)))
    par = plan.to_json()
    par["unit_schedule"] = schedule.to_json() if schedule else None
    if setup.parallel == "none":
        par["reason"] += "; setup.py at this ref has no --parallel: one extension at a time"
    elif setup.parallel == apex_setup.ARGV and int(par["apex_parallel_build"]) > 1:
        par["reason"] += f"; extensions at once passed as setup.py's --parallel {par['apex_parallel_build']}"
    return par, schedule, user_threads, step


def _passed(inputs: BuildInputs) -> str:
    """How the flags reach setup.py, in words (the manifest's flag_style.passed)."""
    switches = inputs.switches
    if inputs.setup.style == apex_setup.ARGV:
        return (
            f"{' '.join(switches) or 'no switch'} as pip --config-settings=--build-option=..., one setting per "
            "switch"
            if switches
            else "no switch (Python-only)"
        )
    return f"{' '.join(f'{f}=1' for f in inputs.flags) or 'no APEX_* variable'} in pip's environment"


def _progress(
    inputs: BuildInputs,
    par: dict,
    schedule: unit_schedule.Schedule | None,
    clock: CommandClock,
) -> build_progress.Reporter | contextlib.nullcontext:
    """A progress line every 30 s while Apex compiles (build_progress.py), from ninja's [n/N] lines and the
    units' predicted costs; none for a build without CUDA units the cost table knows."""
    n_archs = max(1, len(inputs.archs or ()))
    costs = unit_schedule.load_costs()
    plan = build_progress.UnitPlan.of(
        costs,
        list(inputs.expected),
        n_archs,
        schedule,
        bulk_threads=int(par["nvcc_threads"]),
        at_once=int(par["max_jobs"]),
        extensions_at_once=int(par["apex_parallel_build"]),
        cores=int(schedule.cores if schedule else parallelism.host_resources().cores),
    )
    if plan is None:
        return contextlib.nullcontext()
    return build_progress.Reporter(plan, _say, started_monotonic_s=clock.started_monotonic_s)


def _compile(
    request: BuildRequest,
    inputs: BuildInputs,
    tools: BuildTools,
    build_env: BuildEnv,
    log_path: Path,
    clock: CommandClock,
    private: Path,
) -> Compiled:
    """Steps 3-4: size, then `pip wheel` through ccache into the private temp folder."""
    src, setup = inputs.src, inputs.setup
    par, schedule, user_threads, sized = _size(request, inputs, build_env.vars())
    build_env = build_env.plus(sized)
    _say(f"parallelism: {par['reason']}")
    options = apex_setup.pip_options(
        setup, inputs.switches, int(par["apex_parallel_build"]), request.wheel_compression
    )
    passed = _passed(inputs)
    if not shutil.which("ninja", path=build_env.vars()["PATH"]):
        _say("WARNING: ninja not found: torch compiles one file at a time without it (pip install ninja)")
    with tempfile.TemporaryDirectory(prefix="apex-builder-") as work:
        cc_env, cache = ccache.ccache_env(request.ccache, build_env.vars(), src, tools.nvcc_path, Path(work))
        build_env = build_env.plus(EnvStep.of("ccache", cc_env))
        if schedule:  # every nvcc unit through the unit runner: its niceness, threads and CPU seconds
            nvcc = unit_schedule.route_nvcc(
                schedule,
                build_env.vars(),
                tools.nvcc_path,
                cache.get("binary"),
                Path(work),
                request.out_dir / build_timing.TIMES_NAME,
                user_threads,
            )
            build_env = build_env.plus(EnvStep.of("unit schedule", {"PYTORCH_NVCC": nvcc}))
        env = build_env.vars()
        before = ccache.ccache_stats(env) if cache["used"] else {}
        if not request.keep_build_dir:
            shutil.rmtree(
                src / "build", ignore_errors=True
            )  # a clean build: no stale objects from another config
        _say(
            f"building {src} flags={' '.join(inputs.flags) or 'none (Python-only)'} "
            f"TORCH_CUDA_ARCH_LIST={arch_list_text(inputs.archs) if inputs.archs else '(unset)'}"
        )
        _say(f"flag style: {setup.style} ({setup.evidence}); passing {passed}")
        with _progress(inputs, par, schedule, clock) as progress:
            feed = progress.feed if progress else None
            wheel, stats = build_wheel(src, private, env, log_path, options, setup, feed)
        if cache["used"]:
            after = ccache.ccache_stats(env)
            cache["stats"] = {k: after[k] - before.get(k, 0) for k in after}
    return Compiled(
        parallelism=par, pip_options=options, passed=passed, wheel=wheel, stats=stats, ccache=cache, env=env
    )


def _manifest(
    request: BuildRequest,
    inputs: BuildInputs,
    tools: BuildTools,
    compiled: Compiled,
    built: list[str],
    log_lines: list[str],
    started: dt.datetime,
    clock: CommandClock,
) -> BuildManifest:
    """Step 5: the record verify and the bench read (verify/layers/manifest.py)."""
    setup, given = inputs.setup, request.provenance
    # the whole command's wall so far (the interpreter's start to now), not pip wheel's (pip_wall_s)
    stats = {**compiled.stats, "wall_s": round(clock.elapsed_s(), 1), "wall_from": clock.source}
    cores = len(os.sched_getaffinity(0))
    return BuildManifest(
        apex=apex_identity(inputs.src, given.apex_ref, given.apex_source, given.apex_commit),
        flags=inputs.flags,
        expected_modules=tuple(inputs.expected),
        built_modules=tuple(built),
        # the flags' modules this ref's setup.py does not have (older tags lack some), so not expected
        absent_at_ref=tuple(inputs.absent),
        flag_style={
            "style": setup.style,
            "evidence": setup.evidence,
            "passed": compiled.passed,
            "pip_options": compiled.pip_options,
        },
        skipped_extensions=tuple(build_outputs.skipped_extensions(log_lines)),
        # a build with no CUDA module compiles for no arch, whatever the environment says
        arch_list=arch_list_text(inputs.archs)
        if inputs.archs and any(module_map.module(m).cuda for m in inputs.expected)
        else None,
        versions=Versions.from_json({k: v for k, v in tools.versions.items() if k != "nvcc_path"}),
        parallelism=Parallelism.from_json(compiled.parallelism),
        build=BuildStats.from_json(
            {
                "started_at": started.isoformat(timespec="seconds"),
                **stats,
                "peak_rss_method": "summed RSS of the pip process tree sampled from /proc every 0.5 s "
                "(peak_rss_single_process_mb: getrusage ru_maxrss of the largest child)",
                "host": socket.gethostname(),
                "cores": cores,
                "wheel": compiled.wheel.name,
                "wheel_sha256": sha256_of(compiled.wheel),
                "log": LOG_NAME,
                "ccache": compiled.ccache,
                "naive_recipe": bool(request.naive),
                "cuda_from_pypi": tools.cuda_from_pypi,
                "timing": build_timing.compile_timing(
                    inputs.src / "build",
                    stats,
                    cores,
                    int(compiled.parallelism["nvcc_threads"]),
                    request.out_dir / build_timing.TIMES_NAME,
                ),
            }
        ),
        cell=given.cell,
        inputs={
            "base_image": given.base_image,
            "base_image_digest": given.base_image_digest,
            "torch_wheel_sha256": wheel_hashes(list(given.wheel_hashes)),
        },
    )


if (
    __name__ == "__main__"
):  # the Dockerfile's apex-build stage; build.py wheel calls main() under the same rules
    raise SystemExit(entry_point.run("apex-builder", main))
