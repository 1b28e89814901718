"""How close a fused result must be to torch's, per dtype: data, with where each number comes from.

A comparison passes elementwise when |actual - expected| <= atol + rtol * |expected| (the rule of
torch.testing.assert_close) and every element of both sides is finite. Our references are computed in
fp32 from the same low-precision inputs, so a fused result in bf16/fp16 carries at most its own
rounding (half a unit in the last place) on top of fp32 noise: Apex's own low-precision tolerances,
which compare two rounded results, are kept as they are.

Sources (NVIDIA/apex, upstream HEAD 6424da3b):
  tests/L0/run_fused_layer_norm/test_fused_layer_norm.py
    bf16 forward rtol 1.6e-2 atol 3e-4, backward rtol 1.6e-2 atol 3e-3 (test_layer_norm_bfloat16);
    fp16 forward and backward rtol 1e-3 atol 1e-3 (test_layer_norm_half);
    fp32 RMSNorm backward rtol 2e-3 atol 2e-4 (test_rms_norm_elemwise); fp32 otherwise torch's
    defaults (rtol 1.3e-6, atol 1e-5) at hidden size 512.
  tests/L0/run_optimizers/test_fused_optimizer.py
    FusedAdam vs torch.optim.Adam, fp32: max abs diff 1e-3 over 7 steps (lr 5e-4); fp16/bf16 are run
    without any assertion there ("threshold values look too small").
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    why: str = dataclasses.field(default="", compare=False)  # where the numbers come from (not in reports)

    def to_json(self) -> dict[str, float]:
        return {"rtol": self.rtol, "atol": self.atol}


# --- FusedLayerNorm / FusedRMSNorm vs torch in fp32 on the same inputs --------------------------------
# fp32 is looser than torch's defaults because our hidden sizes reach 5123 (Apex tests 512); every
# fp32 figure is still >100x below what a wrong kernel produces.
NORM: dict[str, dict[str, Tolerance]] = {
    "fp32": {
        "forward": Tolerance(
            rtol=1e-5, atol=1e-5, why="torch's fp32 defaults, loosened for hidden sizes to 5123"
        ),
        "input_grad": Tolerance(rtol=1e-4, atol=1e-5, why="a reduction over hidden: 10x the forward rtol"),
        "param_grad": Tolerance(rtol=2e-3, atol=2e-4, why="Apex test_rms_norm_elemwise"),
    },
    "bf16": {
        "forward": Tolerance(rtol=1.6e-2, atol=3e-4, why="Apex test_layer_norm_bfloat16 forward"),
        "input_grad": Tolerance(rtol=1.6e-2, atol=3e-3, why="Apex test_layer_norm_bfloat16 backward"),
        "param_grad": Tolerance(rtol=1.6e-2, atol=3e-3, why="Apex test_layer_norm_bfloat16 backward"),
    },
    "fp16": {
        # Apex test_layer_norm_half says 1e-3; rtol 2e-3 because the fused forward rounds three times to
        # the param dtype (x_hat, gamma * x_hat, + beta: csrc/layer_norm_cuda_kernel.cu cuApplyLayerNorm),
        # up to 3 * 2^-11 = 1.5e-3 relative in fp16 (bf16: 3 * 2^-8 = 1.2e-2, inside 1.6e-2)
        "forward": Tolerance(rtol=2e-3, atol=1e-3, why="three roundings to fp16: 3 * 2^-11"),
        "input_grad": Tolerance(rtol=1e-3, atol=1e-3, why="Apex test_layer_norm_half; one rounding <= 2^-11"),
        "param_grad": Tolerance(rtol=1e-3, atol=1e-3, why="Apex test_layer_norm_half"),
    },
}

# --- FusedAdam vs torch.optim.Adam/AdamW ---------------------------------------------------------------
# Apex's 1e-3 absolute is as large as a whole step at its lr, so it cannot see a missing update; ours
# is relative to the step. The reference does what FusedAdam does (fp32 math and state, params
# stored in their dtype), so low precision differs only where the two round a value differently:
# one unit in the last place (bf16 2^-7, fp16 2^-10 relative), hence rtol = 2 ulps. Such a 1-ulp
# difference keeps its absolute size while the param moves towards zero (at most lr * steps = 7e-3),
# hence atol = 2 ulps at 7e-3 (bf16 2 * 2^-15, fp16 2 * 2^-18), still far below one step (1e-3).
ADAM_PARAMS: dict[str, Tolerance] = {
    "fp32": Tolerance(rtol=1e-5, atol=1e-6, why="the same fp32 math: 1e-5 of the param, 1e-3 of one step"),
    "bf16": Tolerance(rtol=1.6e-2, atol=6e-5, why="2 bf16 ulps; atol 2 ulps at lr * steps"),
    "fp16": Tolerance(rtol=2e-3, atol=8e-6, why="2 fp16 ulps; atol 2 ulps at lr * steps"),
}
# The optimizer state is fp32 for every param dtype. Apex computes (1 - beta) in fp32 inside the
# kernel where torch uses the double, a 2e-7 (beta1) / 1.3e-5 (beta2) relative difference on each
# step's contribution; exp_avg can cancel to near zero, so its atol is 1e-5 of one contribution
# ((1 - beta1) * |grad| = 1e-3 at parity_adam's grad scale 0.01); exp_avg_sq is a sum of squares.
ADAM_STATE: dict[str, Tolerance] = {
    "exp_avg": Tolerance(rtol=1e-4, atol=1e-8, why="(1 - beta) in fp32 vs double; 1e-5 of one contribution"),
    "exp_avg_sq": Tolerance(rtol=1e-4, atol=1e-12, why="(1 - beta2) in fp32 vs double; a sum of squares"),
}
# ||fused update - torch update|| / ||torch update|| over all params after the last step: catches a
# systematic error (wrong weight decay mode, missing bias correction) that elementwise rtol could hide.
ADAM_UPDATE_AGREEMENT: dict[str, float] = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 5e-3}

# --- One training step under autocast: fused modules + FusedAdam vs torch modules + AdamW ---------------
# Loose on purpose: under autocast Apex's norms take and return the autocast dtype (rounding x_hat,
# gamma * x_hat and the sum) where torch's compute in fp32, and Adam turns small gradient differences
# into lr-sized update differences. An emulation of that rounding in the same loop (6 steps, lr 2e-4)
# gives a loss difference <= 0.14% (bf16) / 0.02% (fp16) and an update difference of 1.7% / 0.5%:
# the limits are about 10x that; a broken kernel or optimizer gives differences of order 100%.
AMP_LOSS_RTOL: dict[str, float] = {"bf16": 2e-2, "fp16": 1e-2}
AMP_UPDATE_AGREEMENT: dict[str, float] = {"bf16": 0.15, "fp16": 0.08}


def norm(dtype: str, quantity: str) -> Tolerance:
    return NORM[dtype][quantity]
