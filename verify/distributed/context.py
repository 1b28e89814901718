"""What a check sees inside one rank process: who it is, where it runs, the run's seed."""

from __future__ import annotations

import dataclasses
from typing import Any

from verify.checks import Check, Status
from verify.distributed.cases import LAYER, DistCase


@dataclasses.dataclass(frozen=True)
class RankContext:
    rank: int
    world_size: int
    local_rank: int
    backend: str  # "nccl" | "gloo"
    device: Any  # torch.device of this rank (cuda:LOCAL_RANK, or cpu)
    seed: int
    timeout_s: float  # the process group's collective timeout

    @property
    def where(self) -> str:
        return f"{self.world_size} ranks ({self.backend}, {self.device.type})"


def result(
    case: DistCase,
    ctx: RankContext,
    ok: bool,
    summary: str,
    details: dict[str, Any],
    status: Status | None = None,
) -> Check:
    """This rank's view of a check; the parent merges the views of all ranks into one."""
    return Check(
        LAYER,
        case.name,
        status or (Status.PASS if ok else Status.FAIL),
        summary,
        {"rank": ctx.rank, "seed": ctx.seed, **details},
    )
