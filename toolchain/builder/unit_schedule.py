"""Slowest units first: each nvcc unit's niceness and --threads from its predicted cost
(reports/h200-2026-12-01-buildspeed-i16/).

With every unit in flight (parallelism.all_in_flight) the kernel is the scheduler, and it shares the cores
per thread: at five archs and --threads 2 for all, the costliest unit (scaled_upper_triang_masked_softmax,
~340 CPU seconds) got 2/74 of 16 cores and was still compiling at 274 s, after every other unit had ended
(reports/h200-2026-12-01-buildspeed). So each nvcc unit gets, from its predicted cost (CPU seconds):
- threads: a unit that cannot finish within THREAD_MARGIN x (predicted work / cores) on one core gets
  ceil(cost / (margin x target)) nvcc threads, at most one per arch and MAX_NVCC_THREADS; the rest 1;
- niceness: a per-thread CFS weight ~ (cost / threads) ** PRIORITY_EXPONENT. CFS weights fall by 1.25x
  per nice level (the kernel's sched_prio_to_weight table), so nice = EXPONENT x log(top / its cost per
  thread) / log(1.25), 0-19. Exponent 1 shares the cores in proportion to cost (all would end together
  if no unit had serial phases); 2 leans towards longest-first, so the costliest units run close to
  alone on their threads while the rest still progress.
Measured on the H200 host (reports/h200-2026-12-01-buildspeed-i16): exponent 1 and margin 0.75 gave a
five-arch cold build 1.315x its lower bound, the costliest unit ending 38 s after the others; a fluid
simulation of the kernel's sharing on the measured costs (simulate_schedule.py there, within 5% of both
measured builds) puts exponent 2 and margin 0.5 at 1.05x for five archs and 1.03x for one, exponent 1 at
1.12x / 1.15x, 3 at 1.06x / 1.06x.
Costs are data (toolchain/data/apex_unit_costs.json: cost(archs) = host_s + archs x device_s_per_arch);
a unit not listed runs at the median niceness with the bulk threads. .cpp units (g++) are not wrapped and
run at nice 0. The schedule reaches the compiles through unit_runner.py (PYTORCH_NVCC). Stdlib only.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

from toolchain.builder.parallelism import MAX_NVCC_THREADS
from verify.runtime import atomic, input_files

COSTS_PATH = next(
    (
        d / "data" / "apex_unit_costs.json"
        for d in Path(__file__).resolve().parents[:2]
        if (d / "data" / "apex_unit_costs.json").is_file()
    ),
    Path(__file__).resolve().parents[1] / "data" / "apex_unit_costs.json",
)
RUNNER = Path(__file__).resolve().parent / "unit_runner.py"
# CFS: each nice level is ~1.25x less weight (kernel/sched/core.c sched_prio_to_weight: 1024 at 0, 820 at 1)
NICE_STEP = 1.25
MAX_NICE = 19
# A unit's host phases (preprocessing, the host compile after the fatbinary) use one thread whatever
# --threads says; give it threads as if it had to finish in half the target.
THREAD_MARGIN = 0.5
PRIORITY_EXPONENT = 2


@dataclasses.dataclass(frozen=True)
class UnitCost:
    host_s: float
    device_s_per_arch: float
    nvcc: bool

    def cpu_s(self, n_archs: int) -> float:
        return self.host_s + n_archs * self.device_s_per_arch


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Per-unit (threads, nice) for the nvcc units the cost table knows; `default` for the others."""

    units: dict[str, tuple[int, int]]
    default: tuple[int, int]
    predicted_cpu_s: float
    target_s: float
    cores: int
    reason: str

    @property
    def extra_threads(self) -> int:
        """nvcc threads above the default's, summed over the units: what the memory model must add."""
        return sum(max(0, threads - self.default[0]) for threads, _ in self.units.values())

    def to_json(self) -> dict:
        return {
            "default": {"threads": self.default[0], "nice": self.default[1]},
            "units": {k: {"threads": t, "nice": n} for k, (t, n) in sorted(self.units.items())},
            "predicted_cpu_s": round(self.predicted_cpu_s, 1),
            "target_s": round(self.target_s, 1),
            "cores": self.cores,
            "reason": self.reason,
        }


def load_costs(path: Path = COSTS_PATH) -> dict[str, UnitCost]:
    try:
        raw = input_files.read_shipped_json(path)["units"]
        return {
            k: UnitCost(float(v["host_s"]), float(v["device_s_per_arch"]), bool(v["nvcc"]))
            for k, v in raw.items()
        }
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def schedule(
    costs: dict[str, UnitCost],
    extensions: set[str],
    n_archs: int,
    cores: int,
    bulk_threads: int = 1,
    raise_threads: bool = True,
) -> Schedule | None:
    """The schedule for the units of `extensions` the table knows; None when it knows none of them."""
    known = {k: c for k, c in costs.items() if k.split("/", 1)[0] in extensions}
    nvcc = {k: c.cpu_s(n_archs) for k, c in known.items() if c.nvcc}
    if not nvcc:
        return None
    work = sum(c.cpu_s(n_archs) for c in known.values())
    target = work / max(1, cores)
    top_threads = max(bulk_threads, min(n_archs, MAX_NVCC_THREADS)) if raise_threads else bulk_threads
    threads = {
        k: max(bulk_threads, min(top_threads, math.ceil(cost / (THREAD_MARGIN * target))))
        for k, cost in nvcc.items()
    }
    heaviest = max(cost / threads[k] for k, cost in nvcc.items())
    units = {
        k: (threads[k], _nice((heaviest / (cost / threads[k])) ** PRIORITY_EXPONENT))
        for k, cost in nvcc.items()
    }
    default_nice = round(statistics.median(n for _, n in units.values()))
    raised = [
        f"{k.split('/')[-1]} ({units[k][0]})"
        for k in sorted(nvcc, key=lambda k: -nvcc[k])
        if units[k][0] > bulk_threads
    ]
    reason = (
        f"{len(units)} nvcc units ranked by predicted cost ({work:.0f} CPU s at {n_archs} arch(s), "
        f"{target:.0f} s on {cores} cores): nice 0-{max(n for _, n in units.values())}, per-thread weight "
        f"~ (cost / threads) ** {PRIORITY_EXPONENT}; "
        + (f"more nvcc threads for {', '.join(raised)}" if raised else "none needs more nvcc threads")
        + f"; units not in the table: threads {bulk_threads}, nice {default_nice}"
    )
    return Schedule(units, (bulk_threads, default_nice), work, target, cores, reason)


def _nice(weight_ratio: float) -> int:
    return max(0, min(MAX_NICE, round(math.log(max(1.0, weight_ratio)) / math.log(NICE_STEP))))


def write(plan: Schedule, path: Path, user_threads: bool = False) -> None:
    """The runner's schedule file; user_threads: --nvcc-threads / NVCC_APPEND_FLAGS set them, keep those."""

    def entry(threads: int, nice: int) -> dict:
        return {"threads": None if user_threads else threads, "nice": nice}

    atomic.write_text(
        path,
        json.dumps(
            {"default": entry(*plan.default), "units": {k: entry(*v) for k, v in plan.units.items()}},
            indent=1,
        )
        + "\n",
    )


def nvcc_command(schedule_path: Path, times_path: Path, inner: str) -> str:
    """PYTORCH_NVCC: the runner, then the command torch would have used (`ccache nvcc` or `nvcc`)."""
    return " ".join(
        [
            shlex.quote(sys.executable),
            shlex.quote(str(RUNNER)),
            shlex.quote(str(schedule_path)),
            shlex.quote(str(times_path)),
            "--",
            inner,
        ]
    )


def read_times(path: Path) -> dict[str, dict]:
    """{unit key: the runner's record} from TIMES_JSONL (the last record of a key wins); {} when absent."""
    found: dict[str, dict] = {}
    try:
        lines = input_files.read_text_lenient(path, input_files.LOG).splitlines()
    except input_files.InputFileError:
        return found
    for line in lines:
        try:
            record = input_files.parse_json(line, path, input_files.LOG)
            found[str(record["key"])] = record
        except (input_files.InputFileError, KeyError, TypeError):
            continue
    return found


def for_build(
    extensions: list[str], n_archs: int, cores: int, bulk_threads: int = 1, raise_threads: bool = True
) -> Schedule | None:
    """The schedule of a build of these extensions from the cost table; None when it knows none of them."""
    return schedule(load_costs(), set(extensions), n_archs, cores, bulk_threads, raise_threads)


def route_nvcc(
    plan: Schedule,
    env: dict[str, str],
    nvcc: str,
    ccache_binary: str | None,
    workdir: Path,
    times_path: Path,
    user_threads: bool,
) -> str:
    """PYTORCH_NVCC that sends every nvcc unit through the runner: writes the schedule into workdir and
    empties times_path. The inner command is what torch would have run: an existing PYTORCH_NVCC (the
    ccache masquerade sets `ccache nvcc`), else ccache + nvcc when ccache is used, else nvcc (torch's own
    ccache prefix does not apply to a PYTORCH_NVCC)."""
    schedule_path = workdir / "unit-schedule.json"
    write(plan, schedule_path, user_threads)
    atomic.write_in_tree(times_path.parent, times_path.name, b"")  # in --out: no link there followed
    inner = env.get("PYTORCH_NVCC") or " ".join(
        shlex.quote(p) for p in ([ccache_binary] if ccache_binary else []) + [nvcc]
    )
    return nvcc_command(schedule_path, times_path, inner)
