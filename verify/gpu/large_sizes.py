"""The sizes that break Apex: tensors past 2^31 elements, and the memory each --large case needs (torch-free).

Apex's kernels index with 32-bit integers in places: multi_tensor_apply on a tensor of more than 2^31
elements is Apex #2014 ("illegal memory access"), #1989 the same class of bug. A check past that limit
needs tens of GiB, so the memory is stated up front and the case is refused (SKIP, with the figures)
where the device lacks it; the parent decides that from the device's total memory, the worker again
from what is free when it starts.
"""

from __future__ import annotations

import dataclasses

LIMIT = 2**31  # elements: past int32 indexing
GIB = 2**30
HEADROOM_BYTES = 4 * GIB  # the CUDA context, the allocator's rounding, the fp32 reference chunks (~1.5 GiB)
UPSTREAM = "Apex #2014, #1989 (32-bit indexing in multi_tensor_apply and the norm kernels)"


@dataclasses.dataclass(frozen=True)
class LargeSize:
    feature: str  # "FusedLayerNorm" | "FusedAdam"
    shape: tuple[int, ...]
    dtype: str
    element_bytes: int
    tensors: int  # full-size tensors alive at the peak (inputs, outputs, grads, optimizer state)
    what: str  # which tensors, for the reader

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def bytes_needed(self) -> int:
        return self.numel * self.element_bytes * self.tensors + HEADROOM_BYTES

    def to_json(self) -> dict[str, object]:
        return {
            "feature": self.feature,
            "shape": list(self.shape),
            "numel": self.numel,
            "over_limit": self.numel - LIMIT,
            "dtype": self.dtype,
            "memory_gib": round(self.bytes_needed / GIB, 1),
            "memory": self.what,
        }


# 256 rows of 4096 past 2^31 elements: every element of those rows sits beyond int32's reach
NORM_HIDDEN = 4096
NORM_ROWS = LIMIT // NORM_HIDDEN + 256
ADAM_NUMEL = LIMIT + 2**20  # one parameter: multi_tensor_apply's chunks past 2^31 elements

SIZES: dict[str, LargeSize] = {
    "fused_layer_norm.bf16.past_2_31": LargeSize(
        "FusedLayerNorm",
        (NORM_ROWS, NORM_HIDDEN),
        "bf16",
        2,
        4,
        "input, output, output grad and input grad in bf16 (mean and invvar per row are small)",
    ),
    "fused_adam.fp32.past_2_31": LargeSize(
        "FusedAdam",
        (ADAM_NUMEL,),
        "fp32",
        4,
        4,
        "param, grad, exp_avg and exp_avg_sq in fp32",
    ),
}


def refusal(case_name: str, device_bytes: int | None, device: str = "cuda:0") -> str | None:
    """Why a --large case cannot run on a device with `device_bytes` of memory, or None when it fits.
    None for device_bytes means unknown: the worker decides from what is free."""
    size = SIZES[case_name]
    if device_bytes is None or device_bytes >= size.bytes_needed:
        return None
    return (
        f"{size.feature} past 2^31 elements ({size.numel:,} {size.dtype}) needs "
        f"{size.bytes_needed / GIB:.1f} GiB of GPU memory; {device} has {device_bytes / GIB:.1f} GiB: not run"
    )
