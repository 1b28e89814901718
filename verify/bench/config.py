"""Benchmark sizes: every knob declared once with its default, per preset, then overridden by flags.

Resolution order: the preset (`default`, `quick`, or `cpu-smoke` when --device cpu) gives every value;
an explicit command-line flag replaces it. The resolved BenchConfig is frozen and goes into bench.json.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

GiB = 1024**3
MiB = 1024**2

# The default fits the 3-minute budget on one H200 with room to spare: a ~160M-parameter model whose
# FP32 iteration is ~0.2 s and bf16 iteration a few tens of ms, 5 warm-up + 20 timed steps per stage.
PRESETS: dict[str, dict[str, Any]] = {
    "default": {
        "batch": 8,
        "seq": 1024,
        "d_model": 1024,
        "layers": 12,
        "vocab": 8192,
        "warmup": 5,
        "steps": 20,
        "linear_count": 60,  # the guides' optimizer case: 60 x Linear(512, 512)
        "linear_dim": 512,
        "big_params": 250_000_000,  # an optimizer step on >= 250M parameters, a model-sized step
        "norm_shapes": ((32, 512, 1024), (16384, 4096)),
        "copy_bytes": 2 * GiB,
        "micro_warmup": 5,  # the copy ceiling: warm-up copies and timed copies
        "micro_iters": 30,
        "micro_rounds": 12,  # kernel comparisons: interleaved rounds (verify.timing.rules.RoundPlan)
    },
    "quick": {
        "batch": 4,
        "seq": 512,
        "d_model": 512,
        "layers": 6,
        "vocab": 8192,
        "warmup": 3,
        "steps": 10,
        "linear_count": 60,
        "linear_dim": 512,
        "big_params": 50_000_000,
        "norm_shapes": ((32, 512, 1024), (16384, 4096)),
        "copy_bytes": 512 * MiB,
        "micro_warmup": 3,
        "micro_iters": 15,
        "micro_rounds": 8,
    },
    # --device cpu: a smoke run for CI (tiny sizes; perf_counter timings mean nothing about a GPU)
    "cpu-smoke": {
        "batch": 2,
        "seq": 16,
        "d_model": 32,
        "layers": 2,
        "vocab": 64,
        "warmup": 1,
        "steps": 4,
        "linear_count": 60,
        "linear_dim": 16,
        "big_params": 100_000,
        "norm_shapes": ((2, 8, 64), (64, 128)),
        "copy_bytes": 4 * MiB,
        "micro_warmup": 1,
        "micro_iters": 3,
        "micro_rounds": 4,
    },
}

LEARNING_RATE = 3e-4  # same for every stage; weight decay 0 so Adam and AdamW are the same update
N_BATCHES = 4  # synthetic batches cycled through: the model can fit them, so the loss visibly falls
MAX_HEAD_DIM = 64


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    preset: str
    device: str
    seed: int
    out: Path
    plots: bool
    stages: tuple[str, ...]  # stage keys, in run order
    micro: bool
    batch: int
    seq: int
    d_model: int
    layers: int
    vocab: int
    warmup: int
    steps: int
    linear_count: int
    linear_dim: int
    big_params: int
    norm_shapes: tuple[tuple[int, ...], ...]
    copy_bytes: int
    micro_warmup: int
    micro_iters: int
    micro_rounds: int
    lr: float = LEARNING_RATE

    @property
    def head_dim(self) -> int:
        return min(MAX_HEAD_DIM, self.d_model)

    @property
    def heads(self) -> int:
        return self.d_model // self.head_dim

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"

    def to_json(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["out"] = str(self.out)
        data["norm_shapes"] = [list(s) for s in self.norm_shapes]
        data["stages"] = list(self.stages)
        data["heads"] = self.heads
        data["n_batches"] = N_BATCHES
        return data
