"""Other work on the GPU that verify times: noticed before, during and after the timing rounds, said,
and the timing verdicts withheld when it was there (parity is unaffected and still judged).

    watch = DeviceWatch.start()          # before the timing group: settles, then samples the idle GPU
    ...run the timing worker...          # a thread samples every DURING_EVERY_S meanwhile
    load = watch.stop()                  # after: settles, samples again
    load.shared_reason()                 # None, or "another compute process on the GPU (pid 4242, ...)"

Why (H200 of 2026-12-01, reports/h200-2026-12-01-busy-gpu/): a verify run beside another process's matmuls passed with every
timing line as confident as on an idle GPU, and one verdict changed (FusedLayerNorm bf16: "native"
idle, "tie" under load). What is read: the driver's own view through `nvidia-smi` (it ships with the
driver, so verify stays standard library + torch; torch's own `torch.cuda.utilization()` needs pynvml,
which images do not carry): the compute processes on the device, each one's own SM utilization
(`nvidia-smi pmon`, the driver's per-process samples), the device's utilization and SM clock.

What counts as other work (judgements, each with its reason):
- another compute process (not verify or one of its children) that works: its own SM utilization at
  least BUSY_UTILIZATION_PCT in any sample, or its memory changing between samples. One that only holds
  a context (a notebook, a server between requests, the test runner that imported torch) is named
  "present, idle" and withholds nothing (the gpu tier's own idle process had withheld the
  verdicts). Where the driver gives no per-process figure, a process counts as idle only when it was
  there before and after timing and the device read idle then; else it counts. In a container whose
  PIDs differ from the driver's, verify's own worker cannot be told by PID: then one PID that is not in
  verify's /proc is left to verify (the held timing worker may be it);
- utilization of at least BUSY_UTILIZATION_PCT before or after timing, when verify runs no kernel
  (the driver averages over its last sample period, up to 1 s: SETTLE_S lets verify's own work age out).
The SM clock is recorded, not judged: it also moves with verify's own load and the GPU's power state.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable

from verify.domain.report_json import TimingJSON
from verify.runtime import input_files

BUSY_UTILIZATION_PCT = (
    10  # the share of the sample period with a kernel running: 0 when idle, near 100 under a loop
)
SETTLE_S = 2.0  # nvidia-smi's utilization covers its last sample period (1/6-1 s): verify's own kernels age out first
DURING_EVERY_S = 2.0
QUERY_TIMEOUT_S = 10.0
SAMPLE_QUERIES = 3  # one sample asks nvidia-smi up to three times: the GPU, its apps, their own use
GPU_QUERY = (
    "nvidia-smi",
    "--query-gpu=index,pci.bus_id,uuid,utilization.gpu,clocks.sm",
    "--format=csv,noheader,nounits",
)
APPS_QUERY = (
    "nvidia-smi",
    "--query-compute-apps=gpu_bus_id,pid,used_memory,process_name",
    "--format=csv,noheader,nounits",
)


def pmon_query(index: str) -> tuple[str, ...]:
    """One sample of each process's own utilization on GPU `index` (the driver's per-process samples)."""
    return ("nvidia-smi", "pmon", "-c", "1", "-s", "u", "-i", index)


Runner = Callable[[tuple[str, ...]], str | None]  # argv -> stdout, None when it cannot run


@dataclasses.dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mib: int | None
    name: str
    sm_pct: int | None = None  # its own SM utilization in this sample (nvidia-smi pmon); None: not read

    def describe(self) -> str:
        memory = f", {self.used_mib} MiB" if self.used_mib is not None else ""
        return f"pid {self.pid} {os.path.basename(self.name) or '?'}{memory}"


@dataclasses.dataclass(frozen=True)
class LoadSample:
    when: str  # "before" | "during" | "after"
    processes: tuple[GpuProcess, ...]  # every compute process on the device, verify's own included
    utilization_pct: int | None
    sm_clock_mhz: int | None

    def to_json(self) -> dict[str, object]:
        return {
            "when": self.when,
            "processes": [dataclasses.asdict(p) for p in self.processes],
            "utilization_pct": self.utilization_pct,
            "sm_clock_mhz": self.sm_clock_mhz,
        }


@dataclasses.dataclass(frozen=True)
class DeviceLoad:
    observed: bool
    source: str  # "nvidia-smi, GPU 00000000:18:00.0" or why nothing was observed
    samples: tuple[LoadSample, ...] = ()
    own_pids: tuple[int, ...] = ()

    def _others(self) -> dict[int, list[tuple[str, GpuProcess]]]:
        """Every compute process that is not verify's, with the samples it was seen in."""
        own = set(self.own_pids)
        seen_own = any(p.pid in own for s in self.samples for p in s.processes)
        others: dict[int, list[tuple[str, GpuProcess]]] = {}
        for sample in self.samples:
            foreign = [p for p in sample.processes if p.pid not in own]
            unsure = [p for p in foreign if not os.path.exists(f"/proc/{p.pid}")]
            if not seen_own and unsure:  # PIDs of another namespace: one of them may be verify's own worker
                foreign.remove(unsure[0])
            for process in foreign:
                others.setdefault(process.pid, []).append((sample.when, process))
        return others

    def _work(self, seen: list[tuple[str, GpuProcess]]) -> str | None:
        """What shows this other process working (None: it only holds a context)."""
        busy = [(w, p.sm_pct) for w, p in seen if p.sm_pct is not None and p.sm_pct >= BUSY_UTILIZATION_PCT]
        if busy:
            return f"working: its own SM utilization {busy[0][1]}% {busy[0][0]} timing"
        memory = sorted({p.used_mib for _, p in seen if p.used_mib is not None})
        if len(memory) > 1:
            return f"working: its memory changed ({memory[0]}-{memory[-1]} MiB)"
        if all(p.sm_pct is not None for _, p in seen):
            return None
        when = {w for w, _ in seen}
        quiet = all(
            s.utilization_pct is not None and s.utilization_pct < BUSY_UTILIZATION_PCT
            for s in self.samples
            if s.when != "during"
        )
        if {"before", "after"} <= when and quiet:
            return None
        return (
            "its own utilization was not read, and it was not there throughout with the GPU idle before and "
            "after timing"
        )

    def idle_others(self) -> list[str]:
        """Other processes that only held a CUDA context ("present, idle": they withhold nothing)."""
        if not self.observed:
            return []
        found = []
        for seen in self._others().values():
            if self._work(seen) is None:
                moments = "/".join(w for w in ("before", "during", "after") if w in {w for w, _ in seen})
                read = [p.sm_pct for _, p in seen if p.sm_pct is not None]
                how = (
                    f"its own SM utilization {max(read)}% at most in {len(read)} samples"
                    if len(read) == len(seen)
                    else "the GPU idle before and after timing, its memory unchanged"
                )
                found.append(f"{seen[-1][1].describe()}: present, idle ({how}; seen {moments} timing)")
        return found

    def reasons(self) -> list[str]:
        """Why this GPU was shared with other work (empty: it was not, as far as the driver shows)."""
        if not self.observed:
            return []
        found: list[str] = []
        for seen in self._others().values():
            work = self._work(seen)
            if work is not None:
                moments = "/".join(w for w in ("before", "during", "after") if w in {w for w, _ in seen})
                found.append(
                    f"another compute process on the GPU ({seen[-1][1].describe()}; seen {moments} timing; "
                    f"{work})"
                )
        for sample in self.samples:
            busy = sample.utilization_pct is not None and sample.utilization_pct >= BUSY_UTILIZATION_PCT
            if sample.when != "during" and busy:
                found.append(
                    f"GPU utilization {sample.utilization_pct}% {sample.when} timing, while verify ran no "
                    f"kernel (idle reads under {BUSY_UTILIZATION_PCT}%)"
                )
        return found

    def shared_reason(self) -> str | None:
        reasons = self.reasons()
        return "; ".join(reasons) if reasons else None

    def summary(self) -> str:
        if not self.observed:
            return f"not observed ({self.source}): timing verdicts assume the GPU was not shared"
        reason = self.shared_reason()
        clocks = sorted({s.sm_clock_mhz for s in self.samples if s.sm_clock_mhz is not None})
        clock = f"; SM clock {clocks[0]}-{clocks[-1]} MHz" if clocks else ""
        if reason:
            return f"the GPU was shared with other work: {reason}{clock}; timing verdicts withheld (figures kept)"
        during = sum(s.when == "during" for s in self.samples)
        utilization = [
            f"{s.utilization_pct}% {s.when}"
            for s in self.samples
            if s.when != "during" and s.utilization_pct is not None
        ]
        idle = "".join(
            f"; {entry}" for entry in self.idle_others()
        )  # a context held, no work: said, not judged
        at_work, then = (" at work", "; ") if idle else ("", ", ")
        return (
            f"no other work on the GPU: no other compute process{at_work} in {len(self.samples)} samples "
            f"({during} during timing){idle}{then}utilization {', '.join(utilization) or 'n/a'}{clock} "
            f"({self.source})"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "observed": self.observed,
            "source": self.source,
            "shared": self.shared_reason(),
            "idle_others": self.idle_others(),
            "samples": [s.to_json() for s in self.samples],
            "own_pids": list(self.own_pids),
        }


# --- reading the driver (pure parsers; the runner is injectable) --------------------------------


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def parse_gpus(text: str) -> list[tuple[str, str, str, int | None, int | None]]:
    """nvidia-smi --query-gpu CSV -> (index, bus id, uuid, utilization %, SM clock MHz) per GPU."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 5 and cells[0].isdigit():
            rows.append((cells[0], cells[1].upper(), cells[2], _int(cells[3]), _int(cells[4])))
    return rows


def parse_apps(text: str) -> list[tuple[str, GpuProcess]]:
    """nvidia-smi --query-compute-apps CSV -> (bus id, process) per compute process."""
    found = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",", 3)]
        if len(cells) == 4 and _int(cells[1]) is not None:
            found.append((cells[0].upper(), GpuProcess(int(cells[1]), _int(cells[2]), cells[3])))
    return found


def parse_pmon(text: str) -> dict[int, int]:
    """nvidia-smi pmon's table -> each process's SM utilization % ('-': no sample of it working, 0). The
    columns are read from its header (drivers add columns: jpg, ofa)."""
    columns: list[str] = []
    found: dict[int, int] = {}
    for line in text.splitlines():
        cells = line.split()
        if line.startswith("#"):
            if "pid" in cells and "sm" in cells and not columns:
                columns = [c for c in cells if c != "#"]
            continue
        if not columns or len(cells) < len(columns) - 1:
            continue
        row = dict(zip(columns, cells, strict=False))  # a row may lack the command
        pid, sm = _int(row.get("pid", "")), row.get("sm", "")
        if pid is not None and (sm == "-" or _int(sm) is not None):
            found[pid] = max(found.get(pid, 0), 0 if sm == "-" else _int(sm) or 0)
    return found


def pick_gpu(gpus: list[tuple[str, str, str, int | None, int | None]], visible: str | None):  # noqa: ANN201
    """The row of the GPU torch calls cuda:0: CUDA_VISIBLE_DEVICES' first entry (an index or a UUID), else
    the only GPU; None when it cannot be told (several GPUs, no CUDA_VISIBLE_DEVICES)."""
    first = (visible or "").split(",")[0].strip()
    if first:
        return next(
            (
                g
                for g in gpus
                if first in (g[0], g[2]) or (first.startswith("GPU-") and g[2].startswith(first))
            ),
            None,
        )
    if len(gpus) == 1:
        return gpus[0]
    return (
        next((g for g in gpus if g[0] == "0"), None)
        if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
        else None
    )


def run_nvidia_smi(argv: tuple[str, ...]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False, errors="replace"
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def own_pids(root: int | None = None) -> tuple[int, ...]:
    """This process and every descendant (verify's workers), from /proc's parent links."""
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return (root,)
    for name in names:
        if not name.isdigit():
            continue
        try:
            fields = input_files.read_system_text(f"/proc/{name}/stat").rsplit(")", 1)[1].split()
            parents[int(name)] = int(fields[1])
        except (input_files.InputFileError, IndexError, ValueError):
            continue
    mine, grew = {root}, True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                grew = True
    return tuple(sorted(mine))


# --- watching around the timing group -----------------------------------------------------------


class DeviceWatch:
    def __init__(
        self,
        runner: Runner = run_nvidia_smi,
        sleep: Callable[[float], None] = time.sleep,
        visible: str | None = None,
        settle_s: float = SETTLE_S,
        every_s: float = DURING_EVERY_S,
        known: Iterable[int] = (),
    ) -> None:
        self.runner, self.sleep, self.settle_s, self.every_s = runner, sleep, settle_s, every_s
        self.visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
        self.samples: list[LoadSample] = []
        self.pids: set[int] = set(known)  # verify's processes, those that already exited included
        self.bus: str | None = None
        self.why_not = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def start(cls, **kwargs: object) -> DeviceWatch:
        watch = cls(**kwargs)  # type: ignore[arg-type]
        if watch.runner(GPU_QUERY) is None:  # no driver tool here: no settling either
            watch.why_not = "nvidia-smi not found or it failed"
            return watch
        watch.sleep(watch.settle_s)
        if watch.sample("before"):
            watch._thread = threading.Thread(target=watch._during, name="verify-device-watch", daemon=True)
            watch._thread.start()
        return watch

    def stop(self) -> DeviceLoad:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(QUERY_TIMEOUT_S * SAMPLE_QUERIES + self.every_s)  # a sample in flight ends
            self.sleep(self.settle_s)
            self.sample("after")
        if self.bus is None:
            return DeviceLoad(False, self.why_not or "nvidia-smi not found")
        return DeviceLoad(True, f"nvidia-smi, GPU {self.bus}", tuple(self.samples), tuple(sorted(self.pids)))

    def _during(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample("during")

    def sample(self, when: str) -> bool:
        gpus_text = self.runner(GPU_QUERY)
        if gpus_text is None:
            self.why_not = self.why_not or "nvidia-smi not found or it failed"
            return False
        gpu = pick_gpu(parse_gpus(gpus_text), self.visible)
        if gpu is None:
            self.why_not = self.why_not or "which GPU is cuda:0 cannot be told (set CUDA_VISIBLE_DEVICES)"
            return False
        apps_text = self.runner(APPS_QUERY) or ""
        self.bus = gpu[1]
        processes = tuple(p for bus, p in parse_apps(apps_text) if bus == gpu[1])
        if processes:
            own_use = parse_pmon(self.runner(pmon_query(gpu[0])) or "")
            processes = tuple(dataclasses.replace(p, sm_pct=own_use.get(p.pid)) for p in processes)
        self.pids.update(own_pids())
        self.samples.append(LoadSample(when, processes, gpu[3], gpu[4]))
        return True


def withhold(checks: Iterable, timings: list[TimingJSON], load: DeviceLoad) -> None:
    """Under other work: each timing check becomes WARN naming it, each timing row keeps its figures and
    loses its verdict ("withheld"); else each row records that the GPU was watched. In place."""
    from verify.checks import Status

    reason = load.shared_reason()
    for row in timings:
        row["device_load"] = {"observed": load.observed, "shared": reason}
        if reason:
            row["withheld"] = reason
            row["verdict"] = f"withheld: the GPU was shared with other work ({reason})"
            row["winner"] = {
                key: None for key in row.get("winner") or {"kernel_time": None, "host_inclusive": None}
            }
    if not reason:
        return
    for check in checks:
        if check.layer == "timing" and check.status == Status.INFO:
            check.status = Status.WARN
            check.summary = (
                f"{check.summary.split(':', 1)[0]}: timing verdict withheld, the GPU was shared with "
                f"other work ({reason}); the figures are in the report, not judged"
            )
            check.details["withheld"] = reason
