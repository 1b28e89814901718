"""The verify run as a pipeline: each layer a function of what the layers before it returned.

    request (VerifyRequest, from the CLI) -> probe + environment -> extensions -> arch -> identity
    -> expectations  (--static stops here)  -> parity, compile, timing, large (verify.gpu) -> distributed
    -> report

Every layer returns a frozen result (its checks and what later layers need) and changes nothing it was
given, so the order below is the data flow, not a hidden rule. Speed: the import probe child starts in
a background thread while this process imports torch and reads the environment, so the two torch
imports overlap and --static stays within its few seconds.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import threading
import time
from pathlib import Path
from typing import Any

from verify import distributed
from verify.checks import Check, Status
from verify.domain.report_json import EnvironmentJSON, ReportJSON, TimingJSON
from verify.layers import environment, expectations, extensions, fatbin, identity, manifest, module_map
from verify.layers.arch import arch_layer, usable_on_devices
from verify.layers.extensions import ExtensionResult
from verify.report import assemble as report_mod
from verify.runtime import interrupts


class ManifestMismatch(Exception):
    """The build manifest belongs to another image (another torch): a usage error, found mid-run."""


@dataclasses.dataclass(frozen=True)
class LoadedManifest:
    path: Path
    origin: str  # "--manifest", "$APEX_BUILD_MANIFEST", "the installed wheel", "default"
    data: dict[str, Any]  # the file as read (the report quotes it)

    @property
    def record(self) -> manifest.BuildManifest:
        return manifest.BuildManifest.from_json(self.data)


@dataclasses.dataclass(frozen=True)
class VerifyRequest:
    static: bool
    required: tuple[str, ...]
    manifest: LoadedManifest | None
    seed: int
    check_timeout_s: float
    require_gpu: bool
    distributed: bool | None  # --distributed / --no-distributed / auto
    compile: bool = True  # the compile layer and compiled torch in the timings (--no-compile: off)
    large: bool = False  # --large: FusedLayerNorm and FusedAdam past 2^31 elements


@dataclasses.dataclass(frozen=True)
class StaticLayers:
    """Layers 1-5: what --static reports, and what the GPU layers need from it."""

    environment: EnvironmentJSON
    apex: dict[str, Any]
    extensions: tuple[ExtensionResult, ...]
    checks: tuple[Check, ...]
    gpu_missing: bool
    environment_unavailable: bool  # --require-gpu without a GPU, or a driver too old for torch's CUDA
    device_count: int  # GPUs the arch layer judged (at least 1, for the GPU plan)


@dataclasses.dataclass(frozen=True)
class GpuLayers:
    checks: tuple[Check, ...]
    timings: tuple[TimingJSON, ...]


def probe_tasks(required: tuple[str, ...], expected_modules: tuple[str, ...]) -> tuple[list[dict], list[str]]:
    """The import probe's tasks (every known module, the manifest's extra ones, apex, the features'
    entry points) and the module names in report order."""
    names = [m.name for m in module_map.modules()]
    names += [m for m in expected_modules if m not in names]
    tasks = [{"id": f"module:{n}", "op": "import", "target": n} for n in names]
    tasks.append({"id": "apex", "op": "import", "target": "apex"})
    tasks += [
        {"id": f"feature:{f}", "op": "attr", "target": path}
        for f, path in expectations.probe_targets(required).items()
    ]
    return tasks, names


def _probe_and_environment(
    request: VerifyRequest, tasks: list[dict]
) -> tuple[EnvironmentJSON, list[Check], dict]:
    """(environment block, layer-1 checks, probe results by task id), the probe overlapping torch's import."""
    cancel = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        probe_future = pool.submit(extensions.probe, tasks, timeout_s=request.check_timeout_s, cancel=cancel)
        try:
            env, checks = environment.collect()  # imports torch in this process, overlapping the child's
            interrupts.raise_if_received()  # a signal the import swallowed: no report of false FAILs
            torch_version = (env.get("torch") or {}).get("version")
            mismatch = (
                manifest.torch_mismatch(request.manifest.record, torch_version, request.manifest.origin)
                if request.manifest
                else None
            )
            if mismatch:
                cancel.set()
                raise ManifestMismatch(mismatch)
            probed = probe_future.result()
            interrupts.raise_if_received()  # the probe child killed by a signal's callbacks: not a finding
            return env, checks, probed
        except BaseException:  # Ctrl-C, SIGTERM: the pool's exit must not wait out the probe's timeout
            cancel.set()
            raise


def _require_gpu_check(env: EnvironmentJSON, old_driver: bool) -> Check:
    why = (
        "the NVIDIA driver is too old for this torch's CUDA (see environment.driver)"
        if old_driver
        else "check the driver, the container's GPU access, CUDA_VISIBLE_DEVICES"
    )
    return Check(
        "environment",
        "require_gpu",
        Status.FAIL,
        f"--require-gpu: no CUDA device is visible to torch ({why})",
    )


def static_layers(request: VerifyRequest) -> StaticLayers:
    """Layers 1-5: environment, identity, extensions, arch, expectations."""
    record = request.manifest.record if request.manifest else None
    expected_by_manifest = record.expected_modules if record else ()
    tasks, module_names = probe_tasks(request.required, expected_by_manifest)
    env, env_checks, probed = _probe_and_environment(request, tasks)

    capability = environment.capability(env)
    gpu_missing = capability is None
    old_driver = environment.driver_too_old(
        env
    )  # the node cannot run this torch's CUDA: exit 3 (environment.driver)
    if request.require_gpu and gpu_missing:
        env_checks = [*env_checks, _require_gpu_check(env, old_driver)]

    imported = [
        extensions.classify(n, probed.get(f"module:{n}", {"status": "missing"})) for n in module_names
    ]
    devices = environment.device_capabilities(env)
    arch = arch_layer(imported, capability, devices)
    who = identity.identity_layer(identity.locate(), probed.get("apex"), record, arch.extensions)
    expected = expectations.modules_required(request.required) | set(expected_by_manifest)
    entry_points = {f: probed[f"feature:{f}"] for f in request.required if f"feature:{f}" in probed}
    arch_fix = (
        f"rebuild with TORCH_CUDA_ARCH_LIST={fatbin.arch_list_value(capability)}" if capability else None
    )
    expected_checks = expectations.expectation_checks(
        request.required, list(arch.extensions), entry_points, record, arch_fix, apex_kind=who.apex["kind"]
    )
    checks = (
        *env_checks,
        *who.checks,
        *extensions.extension_checks(list(arch.extensions), expected, who.apex.get("kind", "nvidia")),
        *arch.checks,
        *expected_checks,
    )
    return StaticLayers(
        environment=env,
        apex=who.apex,
        extensions=arch.extensions,
        checks=checks,
        gpu_missing=gpu_missing,
        environment_unavailable=(request.require_gpu and gpu_missing) or old_driver,
        device_count=max(1, len(devices)),
    )


def gpu_layers(
    request: VerifyRequest, static: StaticLayers, device_usable: dict[int, frozenset[str]]
) -> GpuLayers:
    """Layers 6-7 (parity, timing) from verify.gpu; SKIP without a GPU, one FAIL if they cannot run."""
    if static.gpu_missing:
        reason = "no CUDA device visible: needs a GPU (use --static for layers 1-5 only)"
        layers = ["parity", "compile" if request.compile else "", "timing", "large" if request.large else ""]
        return GpuLayers(tuple(Check(layer, "all", Status.SKIP, reason) for layer in layers if layer), ())
    try:
        from verify.gpu import opted_out, run_gpu_layers, selected_groups
    except ImportError as exc:
        return GpuLayers(
            (
                Check(
                    "parity",
                    "all",
                    Status.FAIL,
                    f"the GPU layers are not installed with this verify (import verify.gpu failed: {exc})",
                ),
            ),
            (),
        )
    try:
        results = run_gpu_layers(
            seed=request.seed,
            check_timeout_s=request.check_timeout_s,
            usable_modules=device_usable[0],
            device_count=len(device_usable),
            device_usable=device_usable,
            groups=selected_groups(compile_layer=request.compile, large=request.large),
            compile_natives=request.compile,
            device_memory_bytes=_device_memory_bytes(static.environment),
        )
    except Exception as exc:  # one broken layer must not lose the static findings
        return GpuLayers(
            (Check("parity", "all", Status.FAIL, f"GPU layers stopped: {type(exc).__name__}: {exc}"),), ()
        )
    return GpuLayers((*results.checks, *opted_out(compile_layer=request.compile)), tuple(results.timings))


def _device_memory_bytes(env: EnvironmentJSON) -> int | None:
    """cuda:0's total memory from the environment layer (GiB, one decimal), for --large's refusal."""
    gib = ((env.get("torch") or {}).get("gpu") or {}).get("memory_gib")
    return int(gib * 2**30) if isinstance(gib, (int, float)) else None


def run(request: VerifyRequest) -> ReportJSON:
    """Every layer the request asks for, then the report (schema v2). Raises ManifestMismatch."""
    t0 = time.perf_counter()
    started_at = datetime.datetime.now(datetime.timezone.utc)
    static = static_layers(request)
    checks = list(static.checks)
    timings: tuple[TimingJSON, ...] = ()
    dist_block = None
    if not request.static:
        device_usable = usable_on_devices(static.extensions, static.device_count)
        gpu = gpu_layers(request, static, device_usable)
        dist = distributed.run_distributed_layer(
            requested=request.distributed,
            device_count=(static.environment.get("torch") or {}).get("device_count") or 0,
            usable_modules=device_usable[0],
            seed=request.seed,
            check_timeout_s=request.check_timeout_s,
        )
        checks += [*gpu.checks, *dist.checks]
        timings, dist_block = gpu.timings, dist.block
    loaded = request.manifest
    return report_mod.build(
        mode="static" if request.static else "full",
        started_at=started_at,
        duration_s=time.perf_counter() - t0,
        environment=static.environment,
        apex=static.apex,
        manifest={"path": str(loaded.path), "origin": loaded.origin, "data": loaded.data} if loaded else None,
        extensions=[e.to_json() for e in static.extensions],
        checks=checks,
        timings=list(timings),
        options={
            "require": list(request.required),
            "seed": request.seed,
            "check_timeout_s": request.check_timeout_s,
            "require_gpu": request.require_gpu,
            "distributed": {True: "on", False: "off", None: "auto"}[request.distributed],
            "compile": request.compile,
            "large": request.large,
        },
        environment_unavailable=static.environment_unavailable,
        distributed=dist_block,
    )
