"""Layer 4 (arch coverage): which SASS/PTX targets each compiled extension carries, read from its `.so`
(ELF fatbin) without running a kernel, against the capability of every visible GPU.

The layer returns new ExtensionResults with `arch` filled in (the report's `extensions[].arch`, what the
expectations and GPU layers read) beside its checks; the results it was given stay as they were.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verify.checks import Check, Status
from verify.layers import fatbin
from verify.layers.extensions import ExtensionResult

_UNREADABLE: dict[str, Any] = {"sass": [], "ptx": [], "compatible": None}


@dataclasses.dataclass(frozen=True)
class ArchLayer:
    extensions: tuple[ExtensionResult, ...]  # the input results, each with its `arch`
    checks: tuple[Check, ...]


def arch_layer(
    results: Sequence[ExtensionResult],
    capability: tuple[int, int] | None,
    devices: Sequence[tuple[int, int]] = (),
) -> ArchLayer:
    """capability: GPU 0's (parity and timing run there). devices: every visible GPU's capability, device 0
    first; with more than one, each device is checked too (`arch.devices` in the report) and the check
    fails if any GPU of the node cannot run the code. One GPU: exactly the single-device check.
    """
    extensions: list[ExtensionResult] = []
    checks: list[Check] = []
    for ext in results:
        arch, check = (
            _read(ext, capability, devices) if ext.path and ext.path.endswith(".so") else (ext.arch, None)
        )
        extensions.append(dataclasses.replace(ext, arch=arch))
        if check is not None:
            checks.append(check)
    return ArchLayer(tuple(extensions), tuple(checks))


def _read(
    ext: ExtensionResult, capability: tuple[int, int] | None, devices: Sequence[tuple[int, int]]
) -> tuple[dict[str, Any], Check | None]:
    """(the extension's arch block, its arch check or None)."""
    assert ext.path is not None  # arch_layer reads only an extension with a .so path
    try:
        targets = fatbin.read_targets(ext.path)
    except fatbin.FatbinError as exc:
        return dict(_UNREADABLE), Check("arch", ext.module, Status.WARN, f"cannot read GPU code: {exc}")
    if targets is None:
        if not ext.cuda:
            return dict(_UNREADABLE), None
        return dict(_UNREADABLE), Check(
            "arch",
            ext.module,
            Status.WARN,
            f"{Path(ext.path).name} carries no GPU code (.nv_fatbin section absent)",
        )
    arch: dict[str, Any] = {**targets.to_json(), "compatible": None}
    built = ", ".join(targets.sass + targets.ptx)
    if capability is None:
        return arch, Check(
            "arch", ext.module, Status.INFO, f"built for {built} (no GPU here to compare)", details=dict(arch)
        )
    verdict = fatbin.compatibility(targets, capability)
    arch["compatible"] = verdict.compatible
    per_device = [(i, cap, fatbin.compatibility(targets, cap)) for i, cap in enumerate(devices)]
    if len(per_device) > 1:
        arch["devices"] = [
            {"index": i, "sm": fatbin.capability_name(cap), "compatible": v.compatible}
            for i, cap, v in per_device
        ]
    others_bad = [(i, v) for i, _cap, v in per_device[1:] if not v.compatible]
    via_ptx = [
        v for v in [verdict, *(v for _i, _c, v in per_device)] if v.via and v.via.startswith("compute_")
    ]
    if not verdict.compatible or others_bad:
        status = Status.FAIL
    elif via_ptx:
        status = Status.WARN  # runs, but through a JIT compile on first use
    else:
        status = Status.PASS
    message = verdict.message + ("" if verdict.compatible is False else f" (built for {built})")
    if len(per_device) > 1:
        message += "; " + (
            ", ".join(f"cuda:{i}: {v.message}" for i, v in others_bad)
            if others_bad
            else f"all {len(per_device)} GPUs can run it"
        )
    return arch, Check("arch", ext.module, status, message, details={**arch, "via": verdict.via})


def usable_on_devices(results: Sequence[ExtensionResult], device_count: int) -> dict[int, frozenset[str]]:
    """Per GPU index: the modules that imported and carry code that GPU can run (results from arch_layer)."""
    usable: dict[int, frozenset[str]] = {}
    for index in range(device_count):
        names = set()
        for ext in results:
            if ext.status != "ok":
                continue
            arch = ext.arch or {}
            devices = {d["index"]: d["compatible"] for d in arch.get("devices") or []}
            compatible = devices.get(index, arch.get("compatible"))
            if compatible is not False:
                names.add(ext.module)
        usable[index] = frozenset(names)
    return usable
