"""The cross-GPU checks as data: what each one runs in every rank and what it needs (torch-free).

The parent decides from this table what to launch and what is SKIP; each rank process looks the same
table up to know which module runs a check.
"""

from __future__ import annotations

import dataclasses

from verify.layers import module_map

LAYER = "distributed"  # verify.checks.LAYERS


@dataclasses.dataclass(frozen=True)
class DistCase:
    name: str  # check name inside the layer, e.g. "all_reduce.correctness"
    module: str  # the module whose run(case, ctx) runs it inside each rank
    features: tuple[str, ...]  # Apex features it exercises (module_map names); () for torch alone
    needs_cuda: bool  # Apex's distributed pieces are CUDA-only; torch's collectives also run on gloo
    what: str  # a phrase for SKIP lines

    @property
    def needs(self) -> frozenset[str]:
        """Extension modules the check runs: from the module map, never repeated here."""
        return frozenset(m for f in self.features for m in module_map.modules_for_feature(f))


CASES: tuple[DistCase, ...] = (
    DistCase(
        "all_reduce.correctness",
        "verify.distributed.collectives",
        (),
        False,
        "all-reduce correctness across the ranks",
    ),
    DistCase("all_reduce.bandwidth", "verify.distributed.collectives", (), False, "all-reduce bus bandwidth"),
    DistCase(
        "syncbn.forward.fp32",
        "verify.distributed.syncbn_parity",
        ("SyncBatchNorm",),
        True,
        "Apex SyncBatchNorm forward (fp32) vs torch.nn.SyncBatchNorm",
    ),
    DistCase(
        "syncbn.forward.fp16",
        "verify.distributed.syncbn_parity",
        ("SyncBatchNorm",),
        True,
        "Apex SyncBatchNorm forward (fp16) vs torch.nn.SyncBatchNorm",
    ),
    # DistributedFusedAdam imports amp_C as well as its own distributed_adam_cuda
    DistCase(
        "distributed_fused_adam.step",
        "verify.distributed.adam_parity",
        ("DistributedFusedAdam", "multi_tensor_applier"),
        True,
        "one DistributedFusedAdam step vs torch.optim.AdamW",
    ),
)


def case(name: str) -> DistCase:
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(f"unknown distributed check {name!r}: use one of {', '.join(c.name for c in CASES)}")
