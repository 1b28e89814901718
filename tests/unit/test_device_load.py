"""verify.gpu.device_load: other work on the timed GPU, from nvidia-smi's CSV (stored answers in its
documented format, an injected runner and clock), and what it does to the timing checks and rows."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time

from verify.checks import Check, Status
from verify.domain.report_json import TimingJSON
from verify.gpu import device_load
from verify.gpu.device_load import DeviceLoad, DeviceWatch, GpuProcess, LoadSample

BUS = "00000000:18:00.0"
GPUS_IDLE = f"0, {BUS}, GPU-5f1c2a3b-0000-1111-2222-333344445555, 0, 1980\n"
GPUS_BUSY = f"0, {BUS}, GPU-5f1c2a3b-0000-1111-2222-333344445555, 100, 1755\n"


class Driver:
    """nvidia-smi's answers in turn: the GPU row, the compute apps and (optionally) pmon's table, per sample."""

    def __init__(self, *samples: tuple[str, ...]) -> None:
        self.samples, self.calls = list(samples), 0

    def __call__(self, argv: tuple[str, ...]) -> str | None:
        self.calls += 1
        if argv == device_load.GPU_QUERY:
            return self.samples[0][0]
        if argv[1] == "pmon":
            answer = self.samples.pop(0) if len(self.samples) > 1 else self.samples[0]
            return answer[2] if len(answer) > 2 else None
        return self.samples[0][1]


def _load(*samples: LoadSample, own: tuple[int, ...] = (100, 101)) -> DeviceLoad:
    return DeviceLoad(True, f"nvidia-smi, GPU {BUS}", samples, own)


def test_parsers_read_nvidia_smis_csv() -> None:
    assert device_load.parse_gpus(GPUS_IDLE + "1, 00000000:3B:00.0, GPU-x, [N/A], [N/A]\n") == [
        ("0", BUS, "GPU-5f1c2a3b-0000-1111-2222-333344445555", 0, 1980),
        ("1", "00000000:3B:00.0", "GPU-x", None, None),
    ]
    apps = device_load.parse_apps(f"{BUS}, 4242, 81234, /usr/bin/python3.12\n{BUS}, 77, [N/A], a, b\n")
    assert apps == [
        (BUS, GpuProcess(4242, 81234, "/usr/bin/python3.12")),
        (BUS, GpuProcess(77, None, "a, b")),
    ]
    assert device_load.parse_apps("No running processes found\n") == []


def test_which_gpu_is_cuda0() -> None:
    two = device_load.parse_gpus(GPUS_IDLE + "1, 00000000:3B:00.0, GPU-abc, 0, 1980\n")
    assert device_load.pick_gpu(two, "1")[1] == "00000000:3B:00.0"
    assert device_load.pick_gpu(two, "GPU-abc,0")[0] == "1"
    assert device_load.pick_gpu(two, None) is None  # several GPUs and no CUDA_VISIBLE_DEVICES: not guessed
    assert device_load.pick_gpu(two[:1], None)[0] == "0"


def test_an_idle_gpu_is_not_shared() -> None:
    own = GpuProcess(101, 900, "python")
    load = _load(
        LoadSample("before", (own,), 0, 1980),
        LoadSample("during", (own,), 99, 1980),
        LoadSample("after", (), 0, 1980),
    )
    assert load.reasons() == [] and load.shared_reason() is None
    assert load.summary().startswith(
        "no other work on the GPU: no other compute process in 3 samples (1 during"
    )


def test_another_process_or_utilization_while_verify_idles_is_shared() -> None:
    other = GpuProcess(1, 3000, "/usr/bin/python3")  # pid 1: a process here that is not verify's
    load = _load(
        LoadSample("before", (other,), 100, 1755),
        LoadSample("during", (other, GpuProcess(101, 9, "p")), 100, 1755),
    )
    reasons = load.reasons()
    assert reasons[0] == (
        "another compute process on the GPU (pid 1 python3, 3000 MiB; seen before/during timing; its "
        "own utilization was not read, and it was not there throughout with the GPU idle before "
        "and after timing)"
    )
    assert reasons[1].startswith("GPU utilization 100% before timing")
    assert len(reasons) == 2  # utilization during timing is verify's own: not a reason


def test_pids_of_another_namespace_leave_one_process_to_verify() -> None:
    worker = GpuProcess(4_000_000, 900, "python")  # the driver's PID for verify's worker: none here
    assert _load(LoadSample("during", (worker,), 99, 1980)).reasons() == []
    shared = _load(LoadSample("during", (worker, GpuProcess(4_000_001, 4000, "train.py")), 99, 1980))
    assert len(shared.reasons()) == 1


def test_withhold_keeps_figures_and_drops_verdicts() -> None:
    checks = [
        Check(
            "timing", "fused_layer_norm.bf16", Status.INFO, "FusedLayerNorm (bf16, input 8x8): native 1.2x"
        ),
        Check("parity", "fused_adam.fp32", Status.PASS, "agree"),
        Check("environment", "gpu", Status.INFO, "NVIDIA H200"),  # an INFO of another layer: not timing's
        Check("timing", "fused_adam.fp32", Status.FAIL, "FusedAdam (fp32): the loop failed"),  # not a verdict
        Check("timing", "fused_rms_norm.fp32", Status.SKIP, "FusedRMSNorm (fp32): not built"),
    ]
    rows: list[TimingJSON] = [
        {
            "kernel": "FusedLayerNorm",
            "kernel_time": {"fused_ms": 1.0},
            "verdict": "native",
            "winner": {"kernel_time": "native", "host_inclusive": "tie"},
        }
    ]
    load = _load(LoadSample("before", (GpuProcess(1, 1, "x"),), 0, 1980))
    device_load.withhold(checks, rows, load)
    assert checks[0].status == Status.WARN and "timing verdict withheld" in checks[0].summary
    assert (
        checks[0].summary.startswith("FusedLayerNorm (bf16, input 8x8): ") and "pid 1 x" in checks[0].summary
    )
    assert checks[1].status == Status.PASS and checks[1].summary == "agree"  # parity is judged as before
    assert checks[2].status == Status.INFO and checks[2].summary == "NVIDIA H200"
    assert [c.status for c in checks[3:]] == [Status.FAIL, Status.SKIP]  # only an INFO verdict is withheld
    assert rows[0]["winner"] == {"kernel_time": None, "host_inclusive": None}
    assert rows[0]["kernel_time"] == {"fused_ms": 1.0} and rows[0]["verdict"].startswith("withheld:")
    idle_rows: list[TimingJSON] = [{"verdict": "native", "winner": {"kernel_time": "native"}}]
    device_load.withhold([], idle_rows, _load(LoadSample("before", (), 0, 1980)))
    assert idle_rows[0]["verdict"] == "native" and idle_rows[0]["device_load"] == {
        "observed": True,
        "shared": None,
    }


def test_the_watch_samples_before_during_and_after_with_an_injected_clock() -> None:
    sleeps: list[float] = []
    driver = Driver((GPUS_BUSY, f"{BUS}, 1, 3000, python3\n"))
    watch = DeviceWatch.start(runner=driver, sleep=sleeps.append, visible="", every_s=0.01, known=[4_000_002])
    while not any(s.when == "during" for s in watch.samples):
        pass
    load = watch.stop()
    assert [s.when for s in load.samples][0] == "before" and load.samples[-1].when == "after"
    assert sleeps == [device_load.SETTLE_S, device_load.SETTLE_S]
    assert 4_000_002 in load.own_pids  # a worker that already exited is still verify's
    assert "pid 1 python3" in (load.shared_reason() or "") and load.source == f"nvidia-smi, GPU {BUS}"


def test_without_nvidia_smi_nothing_waits_and_nothing_is_withheld() -> None:
    sleeps: list[float] = []
    load = DeviceWatch.start(runner=lambda argv: None, sleep=sleeps.append).stop()
    assert sleeps == [] and not load.observed and load.shared_reason() is None
    assert load.summary().startswith("not observed (nvidia-smi not found")


# nvidia-smi pmon -c 1 -s u, in its two documented layouts (drivers 5xx added jpg and ofa columns)
PMON_OLD = """# gpu        pid  type    sm   mem   enc   dec   command
# Idx          #   C/G     %     %     %     %   name
    0       4242     C      -     -     -     -   python3
    0        101     C     97    41     -     -   python
"""
PMON_NEW = """# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
# Idx           #    C/G      %      %      %      %      %      %    name
    0       4242     C     98     40      -      -      -      -    python3
    0        101     C      -      -      -      -      -      -
"""


def test_pmon_is_read_by_its_header() -> None:
    assert device_load.parse_pmon(PMON_OLD) == {4242: 0, 101: 97}  # '-': no sample of it working
    assert device_load.parse_pmon(PMON_NEW) == {4242: 98, 101: 0}  # a row without its command still counts
    header = "".join(PMON_OLD.splitlines(keepends=True)[:2])
    # a GPU with no process: pmon prints one row of dashes, which names no process
    assert device_load.parse_pmon(header + "    0          -     -     -     -     -     -     -\n") == {}
    # a row cut short is not read, and the rows after it still are; an idle 0 stays 0
    short = "    0       4242     C     98\n"
    assert device_load.parse_pmon(header + short) == {}
    full = "    0        101     C      0     0     -     -   python\n"
    assert device_load.parse_pmon(header + short + full) == {101: 0}
    assert (
        device_load.parse_pmon("") == {} and device_load.parse_pmon("NVML: Insufficient Permissions\n") == {}
    )
    assert device_load.pmon_query("3")[-2:] == ("-i", "3")


def _other(sm_pct: int | None, used_mib: int = 512) -> GpuProcess:
    return GpuProcess(1, used_mib, "/usr/bin/python3", sm_pct)  # pid 1: a process here that is not verify's


def _samples(
    other: GpuProcess | None, *, before: int = 0, after: int = 0, during=None
) -> tuple[LoadSample, ...]:
    during = other if during is None else during
    seen = lambda p: (p,) if p is not None else ()  # noqa: E731
    return (
        LoadSample("before", seen(other), before, 1980),
        LoadSample("during", seen(during), 99, 1980),
        LoadSample("during", seen(during), 99, 1980),
        LoadSample("after", seen(other), after, 1980),
    )


def test_an_idle_context_in_another_process_is_named_and_withholds_nothing() -> None:
    """A process that holds a CUDA context and does no work (the gpu tier's own idle process)."""
    load = _load(*_samples(_other(0)))
    assert load.reasons() == [] and load.shared_reason() is None
    assert load.idle_others() == [
        "pid 1 python3, 512 MiB: present, idle (its own SM utilization 0% at most in 4 "
        "samples; seen before/during/after timing)"
    ]
    assert load.summary().startswith(
        "no other work on the GPU: no other compute process at work in 4 samples (2 "
        "during timing); pid 1 python3, 512 MiB: present, idle (its own SM"
    )
    rows: list[TimingJSON] = [
        {"verdict": "native", "winner": {"kernel_time": "native", "host_inclusive": "tie"}}
    ]
    checks = [Check("timing", "fused_layer_norm.bf16", Status.INFO, "FusedLayerNorm (bf16): native 1.2x")]
    device_load.withhold(checks, rows, load)
    assert (
        rows[0]["winner"] == {"kernel_time": "native", "host_inclusive": "tie"} and "withheld" not in rows[0]
    )
    assert checks[0].status == Status.INFO
    assert load.to_json()["idle_others"] == load.idle_others()


def test_another_process_at_work_withholds_the_verdicts() -> None:
    load = _load(*_samples(_other(0), during=_other(98)))  # idle around timing, working during it
    (reason,) = load.reasons()
    assert reason.endswith(
        "seen before/during/after timing; working: its own SM utilization 98% during timing)"
    )
    assert load.idle_others() == []
    rows: list[TimingJSON] = [
        {"verdict": "native", "winner": {"kernel_time": "native", "host_inclusive": "tie"}}
    ]
    device_load.withhold([], rows, load)
    assert (
        rows[0]["winner"] == {"kernel_time": None, "host_inclusive": None} and "pid 1" in rows[0]["withheld"]
    )
    grown = _load(*_samples(_other(0), during=_other(0, used_mib=4096)))  # no utilization read, memory grew
    assert "its memory changed (512-4096 MiB)" in (grown.shared_reason() or "")


def test_without_per_process_figures_only_a_process_there_throughout_on_an_idle_gpu_is_idle() -> None:
    assert _load(*_samples(_other(None))).reasons() == []  # before and after, the GPU at 0%: idle
    assert "the GPU idle before and after timing" in _load(*_samples(_other(None))).idle_others()[0]
    # the driver gave no memory figure either: still idle, judged by the GPU alone
    no_memory = dataclasses.replace(_other(None), used_mib=None)
    assert _load(*_samples(no_memory)).reasons() == []
    came = _load(*_samples(None, during=_other(None)))  # appeared only while verify timed
    assert "not there throughout" in (came.shared_reason() or "")
    busy_gpu = _load(*_samples(_other(None), before=100))
    assert "not there throughout with the GPU idle" in busy_gpu.reasons()[0] and len(busy_gpu.reasons()) == 2


def test_the_runner_reports_an_idle_other_process_as_info_and_a_working_one_as_warn() -> None:
    from verify.gpu import runner
    from verify.gpu.runner import GroupResult

    header = PMON_NEW.splitlines()[:2]
    pmon_idle = "\n".join(
        [*header, "    0          1     C      -      -      -      -      -      -    python3"]
    )
    pmon_busy = "\n".join(
        [*header, "    0          1     C     98     40      -      -      -      -    python3"]
    )
    for pmon, status, words in (
        (pmon_idle, Status.INFO, "present, idle"),
        (pmon_busy, Status.WARN, "working: its own SM utilization 98%"),
    ):
        driver = Driver((GPUS_IDLE, f"{BUS}, 1, 512, /usr/bin/python3\n", pmon))
        watch = DeviceWatch.start(runner=driver, sleep=lambda s: None, visible="", every_s=0.01)
        while not any(s.when == "during" for s in watch.samples):
            pass
        result = GroupResult("timing")
        result.timings.append(
            {"verdict": "native", "winner": {"kernel_time": "native", "host_inclusive": "tie"}}
        )
        runner._judge_load(result, watch.stop())
        (check,) = [c for c in result.checks if c.name == "device_load"]
        assert check.status == status and words in check.summary, check.summary
        assert ("withheld" in result.timings[0]) == (status == Status.WARN)


def test_own_pids_include_a_real_child() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in device_load.own_pids()
    finally:
        child.kill()
        child.wait()


def test_the_summary_gives_the_sm_clocks_range_lowest_first() -> None:
    load = _load(
        LoadSample("before", (), 0, 1980),
        LoadSample("during", (), 100, 1755),
        LoadSample("after", (), 0, 1830),
    )
    assert "SM clock 1755-1980 MHz" in load.summary()
    # verify's own kernels fill the GPU while it times: only the readings around timing are listed
    assert "utilization 0% before, 0% after" in load.summary() and "100% during" not in load.summary()


def test_under_pci_bus_order_cuda0_is_nvidia_smis_gpu_0(monkeypatch) -> None:
    two = device_load.parse_gpus("1, 00000000:3B:00.0, GPU-abc, 0, 1980\n" + GPUS_IDLE)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert device_load.pick_gpu(two, None)[1] == BUS
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    assert device_load.pick_gpu(two, None) is None


def test_a_gpu_that_cannot_be_told_is_named_as_the_reason_nothing_was_observed(monkeypatch) -> None:
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    two = GPUS_IDLE + "1, 00000000:3B:00.0, GPU-abc, 0, 1980\n"
    load = DeviceWatch.start(runner=Driver((two, "")), sleep=lambda s: None, visible="").stop()
    assert not load.observed and "which GPU is cuda:0 cannot be told" in load.summary()


def test_own_pids_follow_parent_links_whatever_the_group_and_the_name(tmp_path) -> None:
    # a worker in its own session (its group is not ours) whose name holds ')' as /proc/PID/stat shows it
    odd = tmp_path / "w) (x) y"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert child.pid in device_load.own_pids()
    finally:
        child.kill()
        child.wait()


def test_a_process_gone_between_the_listing_and_its_read_is_passed_over(monkeypatch) -> None:
    real = device_load.input_files.read_system_text
    gone: list[str] = []

    def vanishing(path: str) -> str:
        if not gone and path.endswith("/stat") and path != f"/proc/{os.getpid()}/stat":
            gone.append(path)
            raise device_load.input_files.InputFileError(path, "missing", "no such process", "none")
        return real(path)

    monkeypatch.setattr(device_load.input_files, "read_system_text", vanishing)
    assert os.getpid() in device_load.own_pids() and gone


def test_a_killed_nvidia_smi_gives_no_answer_and_one_that_fails_later_is_named() -> None:
    assert device_load.run_nvidia_smi(("sh", "-c", "echo 0, whole")) == "0, whole\n"
    # a query that failed, or was killed by a signal (a negative code), printed part of a table at most
    assert device_load.run_nvidia_smi(("sh", "-c", "echo 0, half; exit 3")) is None
    assert device_load.run_nvidia_smi(("sh", "-c", "echo 0, half; kill -9 $$")) is None
    answers = iter([GPUS_IDLE])
    load = DeviceWatch.start(
        runner=lambda argv: next(answers, None), sleep=lambda s: None, visible="0"
    ).stop()
    assert load.summary().startswith("not observed (nvidia-smi not found or it failed)")


def test_an_idle_process_seen_in_one_sample_only_is_named_once() -> None:
    own, other = GpuProcess(100, 256, "python", sm_pct=0), GpuProcess(4242, 512, "/usr/bin/python3", sm_pct=0)
    load = _load(LoadSample("before", (own, other), 0, 1980))
    assert load.idle_others() == [
        "pid 4242 python3, 512 MiB: present, idle (its own SM utilization 0% at most in 1 samples; "
        "seen before timing)"
    ]


def test_the_watch_reads_the_gpu_it_is_told_and_only_that_gpus_processes(monkeypatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    low = "00000000:01:00.0"  # sorts before BUS: a process there is on another GPU all the same
    two = GPUS_IDLE + f"1, {low}, GPU-abc, 0, 1980\n"
    apps = f"{BUS}, 101, 900, python\n{low}, 4242, 81234, /usr/bin/python3\n"
    first = DeviceWatch.start(runner=Driver((two, apps)), sleep=lambda s: None, visible="0").stop()
    assert first.source == f"nvidia-smi, GPU {BUS}"
    assert {p.pid for s in first.samples for p in s.processes} == {101}
    second = DeviceWatch.start(runner=Driver((two, apps)), sleep=lambda s: None, visible="1").stop()
    assert second.source == f"nvidia-smi, GPU {low}"


def test_without_per_process_figures_a_process_seen_before_and_after_is_idle_even_unseen_during() -> None:
    other = _other(None)
    load = _load(
        LoadSample("before", (other,), 0, 1980),
        LoadSample("during", (), 99, 1980),
        LoadSample("after", (other,), 0, 1980),
    )
    assert load.reasons() == [] and len(load.idle_others()) == 1


def test_an_nvidia_smi_that_cannot_be_started_gives_no_answer(tmp_path, monkeypatch) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_bytes(b"\x7fNOT-AN-EXECUTABLE")  # on PATH and executable, but the kernel cannot run it
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert device_load.run_nvidia_smi(device_load.GPU_QUERY) is None


# --- the edges: which reading names a process, what a row must hold, which GPU and which fields are read ---


def test_the_settle_outlasts_the_drivers_longest_sample_period() -> None:
    # utilization covers nvidia-smi's last sample period (1/6 to 1 s): verify's own kernels must age out of
    # it, and the wait is paid twice per timing group
    assert 1.0 < device_load.SETTLE_S <= 2.0
    assert DeviceWatch(runner=lambda argv: None).settle_s == device_load.SETTLE_S


def test_a_working_process_is_named_by_its_first_busy_reading_and_its_last_sample() -> None:
    busy = _load(
        LoadSample("before", (_other(0),), 0, 1980),
        LoadSample("during", (_other(98),), 99, 1980),
        LoadSample("after", (_other(50),), 0, 1980),
    )
    (reason,) = busy.reasons()
    assert reason.endswith("working: its own SM utilization 98% during timing)")
    grown = _load(
        LoadSample("before", (_other(None, used_mib=512),), 0, 1980),
        LoadSample("during", (_other(None, used_mib=1024),), 99, 1980),
        LoadSample("after", (_other(None, used_mib=4096),), 0, 1980),
    )
    (reason,) = grown.reasons()
    assert reason.startswith("another compute process on the GPU (pid 1 python3, 4096 MiB;")  # as last seen
    assert reason.endswith("working: its memory changed (512-4096 MiB))")  # lowest to highest, all samples


def test_an_idle_process_is_named_as_last_seen() -> None:
    # the driver gave its memory before timing and none after: one figure is no change, and the name is the
    # last sample's
    load = _load(
        LoadSample("before", (_other(0),), 0, 1980),
        LoadSample("after", (_other(0, used_mib=None),), 0, 1980),  # type: ignore[arg-type]
    )
    (idle,) = load.idle_others()
    assert idle.startswith("pid 1 python3: present, idle (its own SM utilization 0% at most in 2 samples")


def test_a_gpu_row_short_of_its_five_fields_is_not_read() -> None:
    assert device_load.parse_gpus(f"0, {BUS}\n" + GPUS_IDLE) == device_load.parse_gpus(GPUS_IDLE)
    assert device_load.parse_gpus(f"0, {BUS}, GPU-x, 0\n") == []  # four fields: no SM clock, not a row
    assert len(device_load.parse_gpus(GPUS_IDLE)) == 1


def test_a_pmon_row_short_of_more_than_its_command_is_not_read() -> None:
    header = "".join(PMON_OLD.splitlines(keepends=True)[:2])  # 8 columns
    assert device_load.parse_pmon(header + "    0       4242     C     98     40      -      -\n") == {
        4242: 98
    }
    assert device_load.parse_pmon(header + "    0       4242     C     98     40      -\n") == {}


def test_cuda0_is_named_by_an_index_or_a_uuid_or_its_prefix_never_a_bus_id() -> None:
    gpus = device_load.parse_gpus("1, 00000000:3B:00.0, GPU-abc, 0, 1980\n" + GPUS_IDLE)
    assert device_load.pick_gpu(gpus, "GPU-5f1c2a3b")[1] == BUS  # CUDA takes a UUID's unique prefix
    assert device_load.pick_gpu(gpus, BUS) is None
    assert device_load.pick_gpu(gpus, "00000000:3B:00.0") is None


def _answers(gpus: str, apps: str, index: str) -> dict[tuple[str, ...], str]:
    """nvidia-smi's answers to one sample: the GPUs, their apps, and pmon's row for pid 4242 (3% SM)."""
    header = "".join(PMON_OLD.splitlines(keepends=True)[:2])
    return {
        device_load.GPU_QUERY: gpus,
        device_load.APPS_QUERY: apps,
        device_load.pmon_query(index): header
        + f"    {index}       4242     C      3     1     -     -   python3\n",
    }


def test_a_sample_reads_the_chosen_gpus_fields_processes_and_pmon() -> None:
    gpus = "0, 00000000:DB:00.0, GPU-aaa, 0, 1980\n1, 00000000:3B:00.0, GPU-bbb, 7, 1410\n"
    # a process on the GPU whose bus id sorts after the chosen one's is on another GPU all the same
    apps = "00000000:3B:00.0, 4242, 512, python3\n00000000:DB:00.0, 77, 100, other\n"
    answers = _answers(gpus, apps, "1")
    load = DeviceWatch.start(runner=answers.get, sleep=lambda s: None, visible="1").stop()
    assert [(s.when, s.utilization_pct, s.sm_clock_mhz) for s in load.samples] == [
        ("before", 7, 1410),
        ("after", 7, 1410),
    ]
    assert {(p.pid, p.sm_pct) for s in load.samples for p in s.processes} == {(4242, 3)}


def test_stop_waits_for_a_sample_in_flight() -> None:
    """A during-sample whose query is slow (nvidia-smi under load) is waited for: the after-sample is last."""
    in_flight = threading.Event()

    def runner(argv: tuple[str, ...]) -> str | None:
        if threading.current_thread().name == "verify-device-watch" and not in_flight.is_set():
            in_flight.set()
            time.sleep(0.4)
        return GPUS_IDLE if argv == device_load.GPU_QUERY else ""

    watch = DeviceWatch.start(runner=runner, sleep=lambda s: None, visible="", every_s=0.01)
    assert in_flight.wait(10)
    assert [s.when for s in watch.stop().samples] == ["before", "during", "after"]


def test_withholding_names_the_check_and_clears_a_row_without_winners() -> None:
    checks = [Check("timing", "fused_layer_norm.bf16", Status.INFO, "FusedLayerNorm (bf16): native 1.2x")]
    rows: list[TimingJSON] = [{"kernel": "FusedLayerNorm", "verdict": "native"}]
    device_load.withhold(checks, rows, _load(LoadSample("before", (GpuProcess(1, 1, "x"),), 0, 1980)))
    assert checks[0].summary.startswith("FusedLayerNorm (bf16): timing verdict withheld, the GPU was shared")
    assert "native 1.2x" not in checks[0].summary
    assert rows[0]["winner"] == {"kernel_time": None, "host_inclusive": None}


def test_own_pids_find_a_grandchild_listed_before_its_parent(monkeypatch) -> None:
    """After PIDs wrap, a worker's child can hold a lower PID than the worker: /proc lists it first."""
    child = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    grandchild = int(child.stdout.readline())
    real = os.listdir
    monkeypatch.setattr(
        os, "listdir", lambda path: sorted(real(path), key=lambda n: -int(n) if n.isdigit() else 0)
    )
    try:
        assert {child.pid, grandchild} <= set(device_load.own_pids())
    finally:
        monkeypatch.undo()
        os.kill(grandchild, 9)
        child.kill()
        child.wait()


def test_a_pmon_reading_that_is_no_number_is_not_read() -> None:
    header = "".join(PMON_OLD.splitlines(keepends=True)[:2])
    # no figure: the process's own utilization stays unread (None), not an idle 0
    assert (
        device_load.parse_pmon(header + "    0       4242     C    N/A   N/A     -     -   python3\n") == {}
    )


def test_no_gpu_listed_is_no_gpu_picked() -> None:
    assert device_load.pick_gpu([], None) is None and device_load.pick_gpu([], "0") is None


def test_without_a_readable_proc_verify_is_this_process_alone(monkeypatch) -> None:
    def unreadable(path: str) -> list[str]:
        raise PermissionError(path)

    monkeypatch.setattr(os, "listdir", unreadable)
    assert device_load.own_pids(4242) == (4242,)


def test_a_pid_gone_before_its_read_leaves_the_rest_of_the_listing_read(monkeypatch) -> None:
    child = subprocess.Popen(["sleep", "30"])
    real = os.listdir
    # listed first, gone by its read (above any pid_max): the processes listed after it are still read
    monkeypatch.setattr(os, "listdir", lambda path: ["4194304001", *real(path)])
    try:
        assert child.pid in device_load.own_pids()
    finally:
        monkeypatch.undo()
        child.kill()
        child.wait()


def test_stop_waits_for_every_query_one_sample_makes() -> None:
    """stop() waits SAMPLE_QUERIES query timeouts for the sampling thread: as many as one sample may ask."""
    gpus = "0, 00000000:DB:00.0, GPU-aaa, 7, 1410\n"
    answers = _answers(gpus, "00000000:DB:00.0, 4242, 512, python3\n", "0")
    asked: list[tuple[str, ...]] = []

    def runner(argv: tuple[str, ...]) -> str | None:
        asked.append(argv)
        return answers.get(argv)

    watch = DeviceWatch(runner=runner, sleep=lambda s: None, visible="0")
    assert watch.sample("during")
    assert watch.samples[0].processes  # a process on the GPU: the sample asked for its own use too
    assert len(asked) == device_load.SAMPLE_QUERIES
