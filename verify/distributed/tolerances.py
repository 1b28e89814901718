"""How close Apex's distributed pieces must come to torch's, with where each number comes from.

A comparison passes elementwise when |apex - torch| <= atol + rtol * |torch| and every element of both
sides is finite (verify.gpu.compare). All-reduce correctness needs no tolerance: it is exact
(verify.distributed.collectives).

Sources (NVIDIA/apex, upstream HEAD 6424da3b):
  tests/distributed/synced_batchnorm/two_gpu_unit_test.py
    SyncBatchNorm vs a float64 reference: np.allclose(a, b, error, error), error 1e-5 in fp32,
    1e-3 in fp16 (used as both rtol and atol).
  apex/contrib/test/optimizers/test_dist_adam.py
    DistributedFusedAdam vs torch.optim.AdamW under DDP, fp32: torch.testing's defaults (rtol 1.3e-6,
    atol 1e-5) after 3 steps at lr 0.1.
"""

from __future__ import annotations

from verify.gpu.tolerances import ADAM_PARAMS, ADAM_UPDATE_AGREEMENT, Tolerance

# --- Apex SyncBatchNorm forward vs torch.nn.SyncBatchNorm, same inputs on every rank ---------------------
# Apex's own numbers, kept: both sides reduce the same per-rank Welford statistics in fp32 and apply
# them elementwise, so they differ by fp32 rounding of the statistics (fp32) or by one rounding of
# the output to fp16 (2^-11 relative, inside 1e-3 plus 1e-3 absolute for outputs near zero).
SYNCBN: dict[str, Tolerance] = {
    "fp32": Tolerance(rtol=1e-5, atol=1e-5),
    "fp16": Tolerance(rtol=1e-3, atol=1e-3),
}

# --- One DistributedFusedAdam step vs torch.optim.AdamW on the rank-averaged gradient ---------------------
# The same rule as FusedAdam's fp32 parity (verify.gpu.tolerances.ADAM_PARAMS): relative to the step,
# not Apex's 1e-5 absolute, which at our lr (1e-3) is 1% of a whole step. The averaged gradient is
# summed in another order by the reduce-scatter than by our reference, a few fp32 ulps; Adam's first
# step normalises it (m / sqrt(v) ~ sign(g)), so params differ by a few ulps of the param only.
DFA_PARAMS: Tolerance = ADAM_PARAMS["fp32"]
# ||apex update - torch update|| / ||torch update||: catches a systematic error (sum instead of mean,
# wrong decay mode, a shard left out) that elementwise rtol could hide.
DFA_UPDATE_AGREEMENT: float = ADAM_UPDATE_AGREEMENT["fp32"]
