"""The implementations verify compares, declared once: names, hyperparameters and how each one is built.

verify's timing layer and `verify bench` time the same variants under the same names, so a report and a
benchmark can be read side by side. Each function returns verify.timing.kernel_compare.Variant records, the
fused (Apex) one first; the caller owns the inputs (fresh random values, never zeros).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from verify.timing import compiled as compiled_torch
from verify.timing.kernel_compare import Variant

FUSED_ADAM = "apex FusedAdam"
ADAMW_FOREACH = "torch AdamW(foreach=True)"
ADAMW_FUSED = "torch AdamW(fused=True)"
FUSED_LAYER_NORM = "apex FusedLayerNorm"
LAYER_NORM = "torch nn.LayerNorm"
FUSED_RMS_NORM = "apex FusedRMSNorm"
RMS_NORM = "torch nn.RMSNorm"
COMPILED_LAYER_NORM = "torch.compile(nn.LayerNorm)"
COMPILED_RMS_NORM = "torch.compile(nn.RMSNorm)"
COMPILED_NAMES = {LAYER_NORM: COMPILED_LAYER_NORM, RMS_NORM: COMPILED_RMS_NORM}

# AdamW-style update (decoupled weight decay); a small lr keeps thousands of steps on random grads finite
ADAM_HYPER: dict[str, object] = {"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
NORM_EPS = 1e-5

# (Apex feature, fused name, native name, name of the native class in torch.nn, has a bias)
NORM_KINDS: dict[str, tuple[str, str, str, str, bool]] = {
    "fused_layer_norm": ("FusedLayerNorm", FUSED_LAYER_NORM, LAYER_NORM, "LayerNorm", True),
    "fused_rms_norm": ("FusedRMSNorm", FUSED_RMS_NORM, RMS_NORM, "RMSNorm", False),
}


def adam_variants(
    params: Sequence[nn.Parameter], fused_cls: type | None, fused_reason: str = ""
) -> list[Variant]:
    """One optimizer step over `params` (their .grad set by the caller and left alone: read-only).

    Every variant has its own optimizer state over the same parameters; each step moves them by ~lr.
    """
    params = list(params)

    def make(
        cls: Callable[..., torch.optim.Optimizer], **extra: object
    ) -> Callable[[], Callable[[], object]]:
        return lambda: cls(params, **ADAM_HYPER, **extra).step

    return [
        Variant(
            FUSED_ADAM,
            "fused",
            make(fused_cls, adam_w_mode=True) if fused_cls is not None else None,
            fused_reason,
        ),
        Variant(ADAMW_FOREACH, "native", make(torch.optim.AdamW, foreach=True)),
        Variant(ADAMW_FUSED, "native", make(torch.optim.AdamW, fused=True)),
    ]


def norm_variants(
    kind: str,
    x: torch.Tensor,
    grad_out: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    fused_cls: type | None,
    fused_reason: str = "",
    compile_native: bool = False,
    compile_skip: str = "",
) -> list[Variant]:
    """Forward + backward of a norm over the last dim of x, both sides with the same weights (and bias),
    in x's dtype. Gradients come from torch.autograd.grad: no .grad accumulation is timed.

    compile_native: add torch.compile of the native module (Inductor's fused norm) as a further native;
    compile_skip: why that one is SKIP instead ("--no-compile", no Triton, ...). Its compile happens in
    `make`, with two calls, before the comparison warms anything up."""
    _feature, fused_name, native_name, native_attr, has_bias = NORM_KINDS[kind]
    hidden = x.shape[-1]
    native_cls = getattr(nn, native_attr, None)

    def make(cls: type, compile_it: bool = False) -> Callable[[], Callable[[], object]]:
        def build() -> Callable[[], object]:
            module = cls(hidden, eps=NORM_EPS).to(device=x.device, dtype=x.dtype)
            with torch.no_grad():
                module.weight.copy_(weight)
                if has_bias and bias is not None:
                    module.bias.copy_(bias)
            inputs = [x, *module.parameters()]
            forward = compiled_torch.compiled(module) if compile_it else module

            def call() -> object:
                return torch.autograd.grad(forward(x), inputs, grad_out)

            if compile_it:  # the compile (forward and backward graphs) happens here, never in a timed block
                call()
                call()
            return call

        return build

    native = (
        Variant(native_name, "native", make(native_cls))
        if native_cls is not None
        else Variant(native_name, "native", None, f"not available in torch {torch.__version__}")
    )
    variants = [
        Variant(fused_name, "fused", make(fused_cls) if fused_cls is not None else None, fused_reason),
        native,
    ]
    if compile_native:
        compiled_name = COMPILED_NAMES[native_name]
        if native_cls is None:
            variants.append(
                Variant(compiled_name, "native", None, f"not available in torch {torch.__version__}")
            )
        elif compile_skip:
            variants.append(Variant(compiled_name, "native", None, compile_skip))
        else:
            variants.append(Variant(compiled_name, "native", make(native_cls, compile_it=True)))
    return variants


def norm_feature(kind: str) -> str:
    return NORM_KINDS[kind][0]
