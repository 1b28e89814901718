"""Decide, without torch, whether the cross-GPU checks run here, on how many ranks, and what is SKIP.

When: `--distributed` forces the layer, `--no-distributed` turns it off, and by default (auto) it runs
in a full verify whenever two or more CUDA devices are visible: a report that looked at GPU 0 only can
pass a node whose other GPUs cannot talk to each other. With fewer than two, every check is SKIP with
the reason.

Test hook: VERIFY_DISTRIBUTED_CPU=N (N >= 2) runs the layer with N ranks on the CPU over gloo whatever
GPUs are visible, so the launcher, the rendezvous, per-rank collection and the timeouts can be tested
on a CPU machine; the CUDA-only checks (Apex's kernels) are then SKIP. It is for tests, not for users.
"""

from __future__ import annotations

import dataclasses
import os

from verify.checks import Check, Status
from verify.distributed.cases import CASES, LAYER, DistCase

CPU_HOOK_ENV = "VERIFY_DISTRIBUTED_CPU"
MAX_CPU_RANKS = 16  # the GPU path's own ceiling is one rank per GPU (8 on a node); the hook needs no more


@dataclasses.dataclass(frozen=True)
class Topology:
    world_size: int  # one rank process per device
    backend: str  # "nccl" on GPUs, "gloo" on the CPU (test hook)
    device: str  # "cuda" or "cpu"
    origin: str  # where the world size came from, for the report


@dataclasses.dataclass(frozen=True)
class DistributedPlan:
    topology: Topology | None  # None: nothing is launched
    to_run: tuple[DistCase, ...]
    skipped: tuple[Check, ...]
    skip_reason: str | None = None  # set when every check is SKIP for one reason


def cpu_hook_ranks(environ: dict[str, str] | None = None) -> int | None:
    """The test hook's rank count, None when unset; ValueError with a one-line message when malformed."""
    raw = (os.environ if environ is None else environ).get(CPU_HOOK_ENV, "").strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 6 or not 2 <= int(raw) <= MAX_CPU_RANKS:
        raise ValueError(
            f"{CPU_HOOK_ENV}={raw[:40]!r}: must be a whole number of CPU ranks from 2 to "
            f"{MAX_CPU_RANKS} (a test hook); unset it to check the real GPUs"
        )
    return int(raw)


def _skip(case: DistCase, why: str, **details: object) -> Check:
    return Check(
        LAYER, case.name, Status.SKIP, f"{case.what}: {why}", {"needs": sorted(case.needs), **details}
    )


def plan(device_count: int, usable_modules: frozenset[str], cpu_ranks: int | None = None) -> DistributedPlan:
    """What runs and what is SKIP, from the visible CUDA devices and the modules that work on this GPU."""
    if cpu_ranks is not None:
        topology = Topology(cpu_ranks, "gloo", "cpu", f"the {CPU_HOOK_ENV}={cpu_ranks} test hook")
    elif device_count >= 2:
        topology = Topology(device_count, "nccl", "cuda", f"{device_count} visible CUDA devices")
    else:
        seen = "no CUDA device is visible" if device_count == 0 else "1 CUDA device is visible"
        reason = f"{seen}; the cross-GPU checks need 2 or more (one process per GPU, NCCL between them)"
        return DistributedPlan(None, (), tuple(_skip(c, reason) for c in CASES), reason)

    to_run: list[DistCase] = []
    skipped: list[Check] = []
    for case in CASES:
        missing = sorted(case.needs - usable_modules)
        if case.needs_cuda and topology.device != "cuda":
            skipped.append(
                _skip(case, f"needs CUDA; this run uses gloo on the CPU (the {CPU_HOOK_ENV} test hook)")
            )
        elif missing:
            skipped.append(
                _skip(
                    case,
                    f"needs {', '.join(missing)} ({', '.join(case.features)}), which did not"
                    " import or has no code for this GPU (see the extensions and arch layers);"
                    " not run",
                    missing=missing,
                )
            )
        else:
            to_run.append(case)
    return DistributedPlan(topology, tuple(to_run), tuple(skipped))
