"""The facts a benchmark result needs to be read later: GPU, torch, CUDA, Python, Apex commit.

The flat `headline` block is collected here (cheap, always present); the full environment block and the
Apex identity come from verify's own layers (verify.layers.environment, verify.layers.identity, verify.layers.manifest) so
the bench and the verify report describe a machine the same way.
"""

from __future__ import annotations

import platform

import torch

from verify.domain.report_json import EnvironmentJSON


def _apex_identity() -> dict[str, object]:
    try:
        from verify.layers import identity, manifest

        info = identity.locate()
        path, origin = manifest.locate(None)
        loaded = None
        note = ""
        if path is not None:
            try:
                loaded = manifest.load(path, origin)
            except manifest.ManifestError as exc:
                note = str(exc)
        record = manifest.BuildManifest.from_json(loaded) if loaded is not None else None
        commit, source, disagree = identity.resolve_commit(info, record)
        return {
            "kind": info.get("kind"),
            "path": info.get("path"),
            "commit": commit,
            "commit_source": source,
            "disagreements": disagree,
            "manifest": str(path) if path else None,
            "note": note,
        }
    except Exception as exc:  # identity is informational here: never let it stop a benchmark
        return {"kind": None, "commit": None, "commit_source": None, "note": f"{type(exc).__name__}: {exc}"}


def _environment_block() -> EnvironmentJSON | dict[str, str]:
    try:
        from verify.layers import environment

        env, _checks = environment.collect()
        return env
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def collect(device: torch.device) -> dict[str, object]:
    gpu = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
        }
    apex = _apex_identity()
    headline = {
        "device": str(device),
        "gpu": gpu["name"] if gpu else None,
        "capability": gpu["capability"] if gpu else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": platform.python_version(),
        "apex_commit": apex.get("commit"),
    }
    return {"headline": headline, "gpu": gpu, "apex": apex, "details": _environment_block()}
