"""verify's cross-GPU layer: one process per GPU, NCCL between them, Apex's distributed pieces against torch.

    from verify.distributed import run_distributed_layer
    results = run_distributed_layer(requested=None, device_count=8, usable_modules=frozenset({"syncbn", ...}),
                                    seed=1234, check_timeout_s=120.0)
    results.checks  # verify.checks.Check, layer "distributed"
    results.block   # the report's "distributed" object (world size, ranks, all-reduce bandwidth), or None

What runs where: verify.distributed.plan (when, and what is SKIP), .launcher (the rank processes and
their timeouts), .rank (one rank), .collectives / .syncbn_parity / .adam_parity (the checks). This
package imports torch only inside the rank processes.
"""

from __future__ import annotations

import dataclasses

from verify.checks import Check, Status
from verify.distributed import launcher
from verify.distributed import plan as plan_mod
from verify.distributed.cases import CASES, LAYER
from verify.distributed.rank import MULTICAST_OFF

__all__ = ["DistributedResults", "hook_problem", "run_distributed_layer"]


@dataclasses.dataclass(frozen=True)
class DistributedResults:
    checks: list[Check]
    block: dict[str, object] | None


def hook_problem() -> str | None:
    """A malformed test hook as a one-line usage error, checked before anything runs."""
    try:
        plan_mod.cpu_hook_ranks()
    except ValueError as err:
        return str(err)
    return None


def default_group_timeout(check_timeout_s: float, n_checks: int) -> float:
    """Every check at its limit, plus a setup for each group that may be started."""
    return (check_timeout_s + launcher.REPORT_GRACE_S) * n_checks + launcher.setup_timeout(
        check_timeout_s
    ) * launcher.MAX_LAUNCHES


def run_distributed_layer(
    *,
    requested: bool | None,
    device_count: int,
    usable_modules: frozenset[str],
    seed: int,
    check_timeout_s: float,
    group_timeout_s: float | None = None,
) -> DistributedResults:
    """requested: True (--distributed), False (--no-distributed: nothing at all), None (auto: 2+ GPUs)."""
    if requested is False:
        return DistributedResults([], None)
    plan = plan_mod.plan(device_count, frozenset(usable_modules), plan_mod.cpu_hook_ranks())
    topo = plan.topology
    block: dict[str, object] = {
        "requested": "on" if requested else "auto",
        "ran": False,
        "skip_reason": plan.skip_reason,
        "world_size": topo.world_size if topo else None,
        "backend": topo.backend if topo else None,
        "device": topo.device if topo else None,
        "origin": topo.origin if topo else None,
        "multicast_off": dict(MULTICAST_OFF),
        "nccl_version": None,
        "ranks": [],
        "launches": [],
        "all_reduce": None,
        "wall_s": 0.0,
    }
    if topo is None or not plan.to_run:
        return DistributedResults(list(plan.skipped), block)
    names = tuple(c.name for c in plan.to_run)
    timeout = group_timeout_s or default_group_timeout(check_timeout_s, len(names))
    try:
        result = launcher.run(launcher.LaunchPlan(topo, names, seed, check_timeout_s, timeout))
    except Exception as exc:  # noqa: BLE001 - a bug or an OS refusal here must not lose the other layers
        stopped = Check(
            LAYER,
            "all",
            Status.FAIL,
            f"the distributed layer stopped: {type(exc).__name__}: {exc}; not run: {', '.join(names)}",
            {"not_run": list(names)},
        )
        return DistributedResults([stopped, *plan.skipped], block)
    order = {c.name: i for i, c in enumerate(CASES)}
    checks = sorted(result.checks + list(plan.skipped), key=lambda c: order.get(c.name, len(order)))
    bandwidth = next(
        (c for c in result.checks if c.name == "all_reduce.bandwidth" and "figures" in c.details), None
    )
    block.update(
        ran=True,
        group_timeout_s=timeout,
        launches=result.launches,
        wall_s=result.wall_s,
        nccl_version=(result.ready.get(0) or {}).get("nccl_version"),
        ranks=[
            {k: ev.get(k) for k in ("rank", "pid", "device", "setup_s", "env")}
            for _, ev in sorted(result.ready.items())
        ],
        all_reduce=bandwidth.details["figures"] if bandwidth else None,
    )
    return DistributedResults(checks, block)
