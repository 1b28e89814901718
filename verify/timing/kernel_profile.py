"""What torch.profiler says one block of calls ran on the device: the kernel-time side of verify.timing.kernel_compare.

A block's kernel time is the sum of the durations of every kernel (and memset/memcpy) its calls launched;
sync records are not work, and a user annotation's GPU span covers kernels already counted. Several
blocks share one profiler session, separated by a tiny marker kernel (torch.cuda._sleep).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

PROFILER_CUDA = "torch.profiler CUDA activity: sum of the GPU kernels (and memset/memcpy) one call launches"
SESSION_MARKED = "one profiler session, a marker kernel between blocks"
SESSION_PER_BLOCK = "one profiler session per block"
PROFILER_CPU = "torch.profiler CPU activity: time inside aten ops per call (CPU run, not GPU kernels)"
NO_KERNELS = "the profiler recorded no device activity for this call (no CUPTI?)"
MARKER_KERNEL = "spin_kernel"  # what torch.cuda._sleep launches (aten/src/ATen/cuda/Sleep.cu)
# device-side profiler records that are not work a call launched
NOT_WORK = ("Context Sync", "Stream Sync", "Event Sync", "Stream Wait Event")


def split_at_markers(events: Sequence[tuple[float, str, float]], marker: str = MARKER_KERNEL) -> list[float]:
    """Device events (start, name, duration_us), in any order -> summed duration of each block between
    markers, in GPU order; what follows the last marker is not a block. Sync records are not work."""
    blocks: list[float] = []
    current: list[tuple[float, str, float]] = []
    for event in sorted(events, key=lambda e: e[0]):
        if marker in event[1]:
            blocks.append(work_us(current))
            current = []
        else:
            current.append(event)
    return blocks


def work_us(events: Sequence[tuple[float, str, float]]) -> float:
    """Summed duration of the device events (start, name, duration_us) that are work a call launched."""
    return sum(duration for _start, name, duration in events if not name.startswith(NOT_WORK))


def device_events(prof: torch.profiler.profile) -> list[tuple[float, str, float]]:
    """GPU activity records; a user annotation's GPU span (e.g. torch's `Optimizer.step#AdamW.step` range)
    covers kernels already counted, so it is left out."""
    cuda = torch.autograd.DeviceType.CUDA
    return [
        (e.time_range.start, e.name, e.time_range.elapsed_us())
        for e in prof.events()
        if e.device_type == cuda and not getattr(e, "is_user_annotation", False)
    ]


def cpu_op_us(prof: torch.profiler.profile) -> float:
    return float(sum(e.self_cpu_time_total for e in prof.events()))
