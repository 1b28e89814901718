"""Every GPU check case as data: its group (one worker process), its report name, what it needs.

torch-free on purpose: the parent decides what to run, skip or report without importing torch,
and the worker looks the same table up to know which cases a group holds.
"""

from __future__ import annotations

import dataclasses
import itertools
import zlib
from typing import Any

from verify.layers import module_map


@dataclasses.dataclass(frozen=True)
class Case:
    group: str  # the worker group that runs it (one subprocess per group)
    layer: str  # "parity", "compile", "timing" or "large" (verify.checks.LAYERS)
    name: str  # check name inside the layer, e.g. "fused_adam.adamw.bf16"
    family: str  # what a SKIP is reported against, e.g. "fused_adam"
    features: tuple[str, ...]  # Apex features exercised (module_map names)
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def needs(self) -> frozenset[str]:
        """Extension modules the case runs: from the module map, never repeated here."""
        return frozenset(m for f in self.features for m in module_map.modules_for_feature(f))

    def param(self, key: str) -> Any:
        return dict(self.params)[key]


DTYPES = ("fp32", "bf16", "fp16")
_ADAM = ("FusedAdam",)
_LN = ("FusedLayerNorm",)
_RMS = ("FusedRMSNorm",)


def _parity_adam() -> list[Case]:
    return [
        Case(
            "parity_adam",
            "parity",
            f"fused_adam.{mode}.{dtype}",
            "fused_adam",
            _ADAM,
            (("adam_w_mode", mode == "adamw"), ("dtype", dtype)),
        )
        for mode, dtype in itertools.product(("adam", "adamw"), DTYPES)
    ]


def _parity_norm() -> list[Case]:
    cases = []
    for kind, features in (("fused_layer_norm", _LN), ("fused_rms_norm", _RMS)):
        for affine, dtype in itertools.product((True, False), DTYPES):
            cases.append(
                Case(
                    "parity_norm",
                    "parity",
                    f"{kind}.{'affine' if affine else 'plain'}.{dtype}",
                    kind,
                    features,
                    (("kind", kind), ("affine", affine), ("dtype", dtype)),
                )
            )
    return cases


def _amp_step() -> list[Case]:
    features = _ADAM + _LN + _RMS
    return [
        Case("amp_step", "parity", "amp_step.bf16_autocast", "amp_step", features, (("dtype", "bf16"),)),
        Case("amp_step", "parity", "amp_step.fp16_grad_scaler", "amp_step", features, (("dtype", "fp16"),)),
    ]


def _timing() -> list[Case]:
    cases = [Case("timing", "timing", "fused_adam.fp32", "fused_adam", _ADAM, (("dtype", "fp32"),))]
    for kind, features in (("fused_layer_norm", _LN), ("fused_rms_norm", _RMS)):
        for dtype in ("bf16", "fp32"):
            cases.append(
                Case(
                    "timing", "timing", f"{kind}.{dtype}", kind, features, (("kind", kind), ("dtype", dtype))
                )
            )
    return cases


def _compile() -> list[Case]:
    # Apex under torch.compile (verify.gpu.compile_check): each feature compiled, explained, compared
    cases = [
        Case(
            "compile",
            "compile",
            f"{kind}.{dtype}.compiled",
            kind,
            features,
            (("kind", kind), ("dtype", dtype)),
        )
        for kind, features in (("fused_layer_norm", _LN), ("fused_rms_norm", _RMS))
        for dtype in ("fp32", "bf16")
    ]
    cases.append(
        Case("compile", "compile", "fused_adam.fp32.compiled_step", "fused_adam", _ADAM, (("dtype", "fp32"),))
    )
    cases.append(
        Case(
            "compile",
            "compile",
            "amp_step.bf16_autocast.compiled",
            "amp_step",
            _ADAM + _LN + _RMS,
            (("dtype", "bf16"),),
        )
    )
    # torch.library.opcheck on every custom op Apex registers (found at run time, not listed here)
    cases.append(Case("compile", "compile", "opcheck", "opcheck", _LN + _RMS))
    return cases


def _large() -> list[Case]:
    # tensors past 2^31 elements (verify.gpu.large_check; sizes and memory in verify.gpu.large_sizes)
    return [
        Case(
            "large", "large", "fused_layer_norm.bf16.past_2_31", "fused_layer_norm", _LN, (("dtype", "bf16"),)
        ),
        Case("large", "large", "fused_adam.fp32.past_2_31", "fused_adam", _ADAM, (("dtype", "fp32"),)),
    ]


MAX_DEVICES = 16  # smoke cases exist for cuda:1 .. cuda:15; plan() takes those the node has


def _smoke() -> list[Case]:
    # one per further GPU of the node (device 0 runs the full parity and timing layers)
    return [
        Case("smoke", "parity", f"smoke.cuda{i}", "smoke", _ADAM + _LN + _RMS, (("device", i),))
        for i in range(1, MAX_DEVICES)
    ]


def device_of(case: Case) -> int:
    """The GPU a case runs on: cuda:0 unless it names another (smoke)."""
    return dict(case.params).get("device", 0)


def _selftest() -> list[Case]:
    # CPU-only, torch-free cases: they exist so the subprocess isolation can be tested anywhere
    names = ("selftest.first", "selftest.second", "selftest.third")
    return [Case("selftest", "parity", n, "selftest", ()) for n in names] + [
        Case("selftest_peer", "parity", "selftest_peer.only", "selftest_peer", ())
    ]


# The module that runs each group's cases inside the worker process.
GROUP_MODULES = {
    "parity_adam": "verify.gpu.parity_adam",
    "parity_norm": "verify.gpu.parity_norm",
    "amp_step": "verify.gpu.amp_step",
    "timing": "verify.gpu.kernel_timing",
    "compile": "verify.gpu.compile_check",
    "large": "verify.gpu.large_check",
    "smoke": "verify.gpu.smoke",
    "selftest": "verify.gpu.selftest",
    "selftest_peer": "verify.gpu.selftest",
}
# Group order is run order; parity and compile groups may run side by side, timing runs alone afterwards,
# then large (opt-in, --large: tens of GiB, alone so that no other group's memory counts against it).
GPU_GROUPS = ("parity_adam", "parity_norm", "amp_step", "smoke", "compile", "timing", "large")
OPT_IN_GROUPS = frozenset({"large"})  # run only when asked for (--large)
COMPILE_GROUPS = frozenset({"compile"})  # left out with --no-compile
DEFAULT_GROUPS = tuple(g for g in GPU_GROUPS if g not in OPT_IN_GROUPS)  # a plain `verify` run
EXCLUSIVE_GROUPS = frozenset({"timing", "large"})  # timings must not share the GPU; large needs its memory
WATCHED_GROUPS = frozenset(
    {"timing"}
)  # other work on the GPU is looked for around them (verify.gpu.device_load)
SELFTEST_GROUPS = ("selftest", "selftest_peer")
ALL_CASES: tuple[Case, ...] = tuple(
    _parity_adam() + _parity_norm() + _amp_step() + _smoke() + _compile() + _timing() + _large() + _selftest()
)


def cases_of(group: str) -> list[Case]:
    found = [c for c in ALL_CASES if c.group == group]
    if not found:
        known = ", ".join(GPU_GROUPS + SELFTEST_GROUPS)
        raise KeyError(f"unknown check group {group!r}: use one of {known}")
    return found


def case(name: str, group: str | None = None) -> Case:
    for c in ALL_CASES:
        if c.name == name and (group is None or c.group == group):
            return c
    raise KeyError(name)


def case_seed(seed: int, name: str) -> int:
    """Each case draws its own stream from the run's seed: fresh per run, reproducible with the seed."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63)
