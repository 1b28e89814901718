"""One nvcc compile unit for ninja: run it at the schedule's niceness and nvcc --threads, record its times.

torch's cpp_extension writes `nvcc = $PYTORCH_NVCC` into every extension's build.ninja; the builder sets

    PYTORCH_NVCC="<python> <this file> SCHEDULE_JSON TIMES_JSONL -- [ccache] <nvcc>"

so each nvcc unit of every extension passes through here. SCHEDULE_JSON (toolchain/builder/unit_schedule.py):

    {"default": {"nice": N, "threads": T}, "units": {"<extension>/<object>": {"nice": N, "threads": T}}}

threads null leaves NVCC_APPEND_FLAGS (read by nvcc itself) as it is. TIMES_JSONL gets one line per unit,
appended with one write: {"key", "output", "start_s", "end_s", "cpu_s", "maxrss_mib", "nice", "threads",
"exit"}; cpu_s is the user + system seconds of the unit's whole process tree (wait4), maxrss_mib its
largest process. A schedule or times file this script cannot use never fails the compile: the unit then
runs unchanged and says so on stderr. Standard library only and no project imports: ninja runs it as a
plain script, in the build image's Python (3.10).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

_THREADS = re.compile(r"(?:--threads|-t)[ =]\d+")


def unit_key(output: str) -> str:
    """extension/object from `.../build/temp.<platform>/<extension>/<dirs>/<object>.o`."""
    parts = output.replace("\\", "/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part.startswith("temp.") and i + 1 < len(parts) - 1:
            return f"{parts[i + 1]}/{parts[-1]}"
    return parts[-1]


def output_of(cmd: list[str]) -> str:
    """The -o argument, made absolute (ninja runs commands in the build directory of the extension)."""
    return os.path.abspath(cmd[cmd.index("-o") + 1]) if "-o" in cmd[:-1] else ""


def with_threads(flags: str, threads: int) -> str:
    return f"{_THREADS.sub('', flags).strip()} --threads {threads}".strip()


# The builder's own schedule, written in its private temp folder: a few KiB. The bounded reader cannot be
# imported here (no project imports, see above), so this one read is bounded by hand.
SCHEDULE_LIMIT = 1 << 20


def _read_schedule(path: str) -> dict:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(SCHEDULE_LIMIT + 1)
    if len(data) > SCHEDULE_LIMIT:
        raise ValueError(f"over {SCHEDULE_LIMIT} bytes")
    schedule = json.loads(data)
    if not isinstance(schedule, dict):
        raise ValueError("not a JSON object")
    return schedule


def choice(schedule_path: str, key: str) -> tuple[int, int | None]:
    schedule = _read_schedule(schedule_path)
    entry = schedule["units"].get(key, schedule["default"])
    return int(entry["nice"]), entry.get("threads")


def _append(path: str, record: dict) -> None:
    """One line in one write (parallel units append to the same file). The file lies in --out, a folder the
    builder owns: a link planted there is not followed (ELOOP), a FIFO not waited on (ENXIO)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("unit_runner: usage: unit_runner.py SCHEDULE_JSON TIMES_JSONL -- COMMAND...\n")
        return 2
    schedule_path, times_path, cmd = argv[0], argv[1], argv[3:]
    output = output_of(cmd)
    key = unit_key(output)
    try:
        nice, threads = choice(schedule_path, key)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        sys.stderr.write(
            f"unit_runner: schedule {schedule_path} unusable ({error}); {key} runs unscheduled\n"
        )
        nice, threads = 0, None
    env = dict(os.environ)
    if threads:
        env["NVCC_APPEND_FLAGS"] = with_threads(env.get("NVCC_APPEND_FLAGS", ""), int(threads))
    start = time.time()
    pid = os.fork()
    if pid == 0:  # the child: lower its priority (inherited by nvcc's own children), then become the compiler
        try:
            if nice > 0:
                os.nice(nice)
            os.execvpe(cmd[0], cmd, env)
        except OSError as error:
            sys.stderr.write(f"unit_runner: cannot run {cmd[0]}: {error}\n")
        os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    end = time.time()
    code = os.waitstatus_to_exitcode(status)
    record = {
        "key": key,
        "output": output,
        "start_s": round(start, 3),
        "end_s": round(end, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "maxrss_mib": round(usage.ru_maxrss / 1024, 1),
        "nice": nice,
        "threads": threads,
        "exit": code,
    }
    try:
        _append(times_path, record)
    except OSError as error:
        sys.stderr.write(f"unit_runner: cannot append to {times_path} ({error}); {key} is not timed\n")
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
