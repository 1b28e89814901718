"""Which Apex pieces this run can use, and if not, the reason a reader sees next to each SKIP.

Apex fails late and quietly (FusedAdam raises only when constructed; FusedLayerNorm silently falls back
to F.layer_norm for CPU tensors), so each piece is probed by importing its extension module and
constructing it on the benchmark's device, never assumed from `import apex` succeeding.
"""

from __future__ import annotations

import dataclasses
import importlib

import torch

from verify.layers import module_map

# the Apex features the benchmark uses (names from verify/data/apex_modules.json)
FEATURES = ("FusedAdam", "FusedLayerNorm", "FusedRMSNorm")


@dataclasses.dataclass(frozen=True)
class ApexPart:
    feature: str
    usable: bool
    reason: str  # why not (empty when usable)
    cls: type | None = None

    def to_json(self) -> dict[str, object]:
        return {"feature": self.feature, "usable": self.usable, "reason": self.reason}


def _import_class(dotted: str) -> type:
    module_name, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)


def _probe(feature: str, device: torch.device) -> ApexPart:
    if device.type != "cuda":
        return ApexPart(feature, False, f"Apex kernels are CUDA-only; this is a --device {device.type} run")
    try:
        import apex  # noqa: F401
    except ImportError as exc:
        if exc.name == "apex":
            return ApexPart(feature, False, "Apex is not installed (no module named 'apex')")
        # e.g. the unrelated PyPI `apex`, which fails on its missing pyramid dependencies
        return ApexPart(feature, False, f"`import apex` fails ({exc}): not NVIDIA Apex, or a broken install")
    except Exception as exc:
        return ApexPart(feature, False, f"`import apex` fails: {type(exc).__name__}: {exc}")
    dotted = module_map.feature_import_path(feature) or ""
    try:
        cls = _import_class(dotted)
    except (ImportError, AttributeError) as exc:
        return ApexPart(feature, False, f"{dotted} is missing ({exc}): not NVIDIA Apex, or a too-old one")
    for ext in module_map.modules_for_feature(feature):
        try:
            importlib.import_module(ext)
        except Exception as exc:  # ImportError, or an OSError/undefined symbol from a broken build
            return ApexPart(
                feature,
                False,
                f"extension {ext} does not import ({type(exc).__name__}: {exc}): "
                "Apex was installed without APEX_CUDA_EXT=1 or against another torch",
            )
    try:
        if feature == "FusedAdam":
            cls([torch.nn.Parameter(torch.ones(4, device=device))])
        else:
            cls(8).to(device)
    except Exception as exc:
        return ApexPart(feature, False, f"constructing {feature} failed: {type(exc).__name__}: {exc}")
    return ApexPart(feature, True, "", cls)


def probe(device: torch.device) -> dict[str, ApexPart]:
    """Every Apex feature the benchmark needs, keyed by feature name."""
    return {feature: _probe(feature, device) for feature in FEATURES}
