"""An Apex that returns slightly wrong results, for the gpu tier and reports/h200-2026-12-01-wrong-result/.

Put this folder first on PYTHONPATH and set VERIFY_TEST_WRONG_RESULT to a comma list of `fused_adam`,
`fused_layer_norm` (and optionally `fused_rms_norm`): every Python process that starts then (verify, its
GPU workers) wraps the real Apex class so that FusedAdam.step moves each param by 4x the parity rtol of
its dtype after the real step, and FusedLayerNorm/FusedRMSNorm.forward scale the real output by the same
4x of the forward rtol. The kernels run as built; only their result is off, by a known, small amount
above what verify's tolerances allow. Unset, this file does nothing.
"""

import os

_WRONG = {w.strip() for w in os.environ.get("VERIFY_TEST_WRONG_RESULT", "").split(",") if w.strip()}
FACTOR = 4.0  # times the rtol of the dtype: beyond the tolerance, "slightly" wrong


def _install() -> None:
    import torch  # before any Apex extension module

    from verify.gpu import tolerances

    dtypes = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}

    if "fused_adam" in _WRONG:
        from apex.optimizers import FusedAdam

        real_step = FusedAdam.step

        def step(self, *args, **kwargs):
            result = real_step(self, *args, **kwargs)
            with torch.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        rtol = tolerances.ADAM_PARAMS[dtypes.get(p.dtype, "fp32")].rtol
                        p.mul_(1 + FACTOR * rtol)
            return result

        FusedAdam.step = step

    from apex import normalization

    for name, cls in (
        ("fused_layer_norm", normalization.FusedLayerNorm),
        ("fused_rms_norm", normalization.FusedRMSNorm),
    ):
        if name not in _WRONG:
            continue
        real_forward = cls.forward

        def forward(self, x, *args, _real=real_forward, **kwargs):
            y = _real(self, x, *args, **kwargs)
            return y * (1 + FACTOR * tolerances.norm(dtypes.get(y.dtype, "fp32"), "forward").rtol)

        cls.forward = forward


if _WRONG:
    _install()
