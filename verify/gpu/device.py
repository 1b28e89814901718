"""What every GPU case shares: the CUDA device, dtype names, and seeded fresh random inputs."""

from __future__ import annotations

import torch

from verify.gpu.errors import NoDevice

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DEVICE = "cuda"  # every case allocates here; the fused kernels are CUDA-only


def require_cuda() -> str:
    """Initialise CUDA once, up front, so the first case is not billed for it; describe the device."""
    if not torch.cuda.is_available():
        raise NoDevice(
            f"no CUDA device visible to torch {torch.__version__} (CUDA {torch.version.cuda}): "
            "run on a GPU host, or use `python -m verify --static`"
        )
    torch.cuda.init()
    torch.ones(1, device=DEVICE).add_(1)  # creates the context and the caching allocator
    torch.cuda.synchronize()
    name = torch.cuda.get_device_name(0)
    major, minor = torch.cuda.get_device_capability(0)
    return f"{name} (sm_{major}{minor})"


def generator(seed: int) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(seed)


def randn(
    shape: tuple[int, ...],
    gen: torch.Generator,
    *,
    dtype: torch.dtype = torch.float32,
    scale: float = 1.0,
    shift: float = 0.0,
) -> torch.Tensor:
    """Fresh normal values (never zeros), drawn in fp32 then cast, so every dtype sees the same numbers."""
    values = torch.randn(shape, generator=gen, device=DEVICE, dtype=torch.float32) * scale + shift
    return values.to(dtype)


def uniform(
    shape: tuple[int, ...],
    gen: torch.Generator,
    low: float,
    high: float,
    *,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    values = torch.rand(shape, generator=gen, device=DEVICE, dtype=torch.float32) * (high - low) + low
    return values.to(dtype)


def release() -> None:
    """Between cases: give cached blocks back so one case's memory does not crowd the next."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
