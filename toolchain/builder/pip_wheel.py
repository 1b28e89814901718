"""`pip wheel --no-build-isolation` of the Apex tree: the command, its output streamed to stdout and the
build log, the process tree's peak memory, and one paragraph that says why a failed build failed.
Standard library only: it runs inside the build image (Python 3.10).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from toolchain.builder import apex_setup
from toolchain.builder.process_tree import PeakSampler
from toolchain.errors import BuildFailed, EnvironmentUnavailable
from verify.domain.arch import Arch
from verify.runtime import atomic, input_files, workflow_commands


def run_logged(
    cmd: list[str],
    env: Mapping[str, str],
    log_path: Path,
    cwd: Path | None = None,
    on_line: Callable[[str], None] | None = None,
) -> tuple[int, float, float, float]:
    """Run `cmd`, streaming its output to stdout and `log_path` (and each line to `on_line`: the progress
    lines read ninja's). Returns (exit code, wall seconds, peak summed RSS of the process tree in MiB,
    largest single child's RSS in MiB)."""
    start = time.monotonic()
    # the log lies in --out, a folder the builder owns: appended to without following a link there
    log_fd = atomic.open_append_in_tree(log_path.parent, log_path.name)
    with os.fdopen(log_fd, "a", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,  # own group: Ctrl-C stops the whole tree
        )
        try:
            with PeakSampler(proc.pid) as sampler:
                assert proc.stdout is not None
                for line in proc.stdout:
                    # a compiler's line is no CI command and no terminal escape; the log keeps it as it was
                    sys.stdout.write(workflow_commands.inert(workflow_commands.terminal_safe(line)))
                    log.write(line)
                    if on_line:
                        on_line(line)
                code = proc.wait()
        except BaseException:  # Ctrl-C, SIGTERM (verify.runtime.interrupts): stop the whole tree
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
            raise
    single = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    return code, time.monotonic() - start, sampler.peak_bytes / 2**20, single


def pip_wheel_command(src: Path, staging: Path, options: list[str]) -> list[str]:
    """`pip wheel --no-build-isolation --no-deps -v SRC -w STAGING` plus the flag style's options."""
    return [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-build-isolation",
        "--no-deps",
        "-v",
        *options,
        str(src),
        "-w",
        str(staging),
    ]


def build_wheel(
    src: Path,
    work: Path,
    env: dict[str, str],
    log_path: Path,
    options: list[str] | None = None,
    setup: apex_setup.SetupPy | None = None,
    on_line: Callable[[str], None] | None = None,
) -> tuple[Path, dict]:
    """`pip wheel --no-build-isolation --no-deps -v SRC` into a fresh folder under `work`, the caller's
    private temp folder, never --out: a stale wheel in OUT is never picked up, and the builder moves the
    wheel into OUT itself, under the owned-tree rule (verify.runtime.atomic.move_in_tree). Returns the
    wheel's path there and pip's figures."""
    staging = Path(tempfile.mkdtemp(prefix="wheel-", dir=work))
    try:
        cmd = pip_wheel_command(src, staging, options or [])
        cpu_before, started_epoch = _children_cpu_s(), time.time()
        code, wall, peak_tree, peak_single = run_logged(cmd, env, log_path, on_line=on_line)
        stats = {
            # pip wheel's own wall and start; the builder records the whole command's as wall_s
            "pip_wall_s": round(wall, 1),
            "started_epoch_s": round(started_epoch, 3),
            # every compiler, linker and pip process the build waited for (RUSAGE_CHILDREN is cumulative)
            "cpu_s": round(_children_cpu_s() - cpu_before, 1),
            "peak_rss_mb": round(peak_tree, 1),
            "peak_rss_single_process_mb": round(peak_single, 1),
        }
        if code != 0:
            raise BuildFailed(_failure_summary(log_path, code, setup))
        wheels = sorted(staging.glob("*.whl"))
        if len(wheels) != 1:
            raise BuildFailed(
                f"pip wheel finished but left {len(wheels)} wheels in {staging}; see {log_path}",
            )
        return wheels[0], stats
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _failure_summary(log_path: Path, code: int, setup: apex_setup.SetupPy | None = None) -> str:
    """One paragraph: what failed and where the log says why. The log's lines were already streamed to
    stdout, so they are not repeated here."""
    lines = input_files.read_text_lenient(log_path, input_files.LOG).splitlines()
    text = "\n".join(lines)
    if "No space left on device" in text:
        raise EnvironmentUnavailable(
            f"the build ran out of disk space (No space left on device); free space and retry; see {log_path}",
        )
    hint = ""
    if re.search(r"Killed signal terminated program|out of memory|std::bad_alloc", text):
        hint = " The compiler was killed or ran out of memory: lower --jobs / --nvcc-threads."
    unsupported = re.search(r"Unsupported gpu architecture '(compute_[0-9]+)'", text)
    rejected = Arch.from_nvcc_name(unsupported.group(1)) if unsupported else None
    if unsupported and rejected:
        arch = rejected.number
        where_set = next(
            (
                f"setup.py line {line} hard-codes it for {block.switches[0]}"
                for block in (setup.blocks if setup else ())
                for a, line in block.hardcoded_archs
                if a == arch
            ),
            "it is not in your --archs",
        )
        hint += (
            f" nvcc rejects {unsupported.group(1)}: {where_set}; this Apex ref cannot be built with this CUDA"
            " toolkit: use an older toolkit (and a torch built for it) or a newer Apex ref."
        )
    # a compiler's `error:` first (not setup.py's "this is not an error." banner), else any error/fatal word
    first_error = next(
        (
            i
            for pattern in (r"\b(?:fatal )?error\b\s*(?:\[[^]]*\]\s*)?:", r"\berror\b|\bfatal\b")
            for i, line in enumerate(lines, 1)
            if re.search(pattern, line, re.I)
        ),
        None,
    )
    where = (
        f"first error at log line {first_error}: {lines[first_error - 1].strip()[:300]}"
        if first_error
        else "no line says 'error'"
    )
    return f"pip wheel failed (exit {code}); {where} (log {log_path}).{hint}"
