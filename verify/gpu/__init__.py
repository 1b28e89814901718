"""verify's GPU layers (6 parity, 7 timing): fused Apex kernels against torch, each group in its own process.

    from verify.gpu import run_gpu_layers
    results = run_gpu_layers(seed=1234, check_timeout_s=120.0, usable_modules=frozenset({"amp_C", ...}))
    results.checks   # verify.checks.Check, layers "parity" and "timing"
    results.timings  # dicts (verify.timing.kernel_compare): kernel, case, device, fused, natives, kernel_time,
                     # host_inclusive, winner, verdict

Decided here, without torch: what can run (a CUDA device, the extension modules each case needs) and
what is SKIP with its reason. What runs, runs in verify.gpu.worker processes (verify.gpu.runner).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

from verify.checks import Check, Status
from verify.domain.report_json import TimingJSON
from verify.gpu import cases as case_table
from verify.gpu import large_sizes
from verify.gpu.runner import GroupResult, run_groups

__all__ = ["GpuResults", "plan", "run_gpu_layers", "selected_groups"]


@dataclasses.dataclass(frozen=True)
class GpuResults:
    checks: list[Check]
    timings: list[TimingJSON]
    groups: list[dict] = dataclasses.field(default_factory=list)  # per group: wall_s, worker processes
    wall_s: float = 0.0


def _cuda_device() -> tuple[bool, str]:
    """(available, why not): asked of torch in this process; no kernel runs here."""
    try:
        import torch
    except Exception as err:  # noqa: BLE001 - a broken torch is reported, not raised
        return False, f"torch cannot be imported ({type(err).__name__}: {err})"
    if not torch.cuda.is_available():
        build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return False, f"no CUDA device visible to torch {torch.__version__} ({build})"
    return True, ""


def plan(
    usable_modules: frozenset[str],
    cuda_reason: str | None,
    groups: Sequence[str] = case_table.DEFAULT_GROUPS,
    device_count: int = 1,
    device_usable: Mapping[int, frozenset[str]] | None = None,
) -> tuple[dict[str, list[str]], list[Check]]:
    """Cases to run per group, and one SKIP check per (layer, family) that cannot run, with the reason.

    cuda_reason: None when a CUDA device is there, else why not (then everything is SKIP).
    device_count: visible GPUs; cases for devices beyond it do not exist here (one GPU: no smoke case).
    device_usable: per device index, the modules usable there (default: usable_modules everywhere).
    """
    to_run: dict[str, list[str]] = {}
    skipped: dict[tuple[str, str], Check] = {}
    for group in groups:
        for case in case_table.cases_of(group):
            index = case_table.device_of(case)
            if index >= max(1, device_count):
                continue
            usable = (device_usable or {}).get(index, usable_modules)
            missing = sorted(case.needs - usable)
            key = (case.layer, case.family)
            if cuda_reason is None and not missing:
                to_run.setdefault(group, []).append(case.name)
                continue
            if index:  # another GPU: its own SKIP line, naming the device
                key = (case.layer, case.name)
            if key in skipped:
                continue
            if cuda_reason is not None:
                why = f"{case.family}: {cuda_reason}; run on a GPU host to check the kernels"
            else:
                why = (
                    f"{case.family}: needs {', '.join(missing)} ({', '.join(case.features)}), which did not "
                    "import or has no code for this GPU (see the extensions and arch layers); no kernel was run"
                )
            skipped[key] = Check(
                case.layer,
                case.name if index else case.family,
                Status.SKIP,
                why.replace(f"{case.family}:", f"{case.name} (cuda:{index}):", 1) if index else why,
                {"needs": sorted(case.needs), "missing": missing, "features": list(case.features)},
            )
    return to_run, list(skipped.values())


def selected_groups(*, compile_layer: bool = True, large: bool = False) -> tuple[str, ...]:
    """The groups a run asks for: compile unless --no-compile, large only with --large."""
    return tuple(
        g
        for g in case_table.GPU_GROUPS
        if (large or g not in case_table.OPT_IN_GROUPS)
        and (compile_layer or g not in case_table.COMPILE_GROUPS)
    )


def opted_out(*, compile_layer: bool) -> list[Check]:
    """The SKIP line of a layer the user switched off, so a report says it was not asked for."""
    if compile_layer:
        return []
    return [Check("compile", "all", Status.SKIP, "--no-compile: Apex under torch.compile not checked")]


def large_refusals(
    to_run: dict[str, list[str]], device_memory_bytes: int | None
) -> tuple[dict[str, list[str]], list[Check]]:
    """--large cases the device cannot hold leave the plan as SKIP checks naming the memory needed."""
    names = to_run.get("large")
    if not names:
        return to_run, []
    refused: list[Check] = []
    kept = []
    for name in names:
        why = large_sizes.refusal(name, device_memory_bytes)
        if why is None:
            kept.append(name)
            continue
        refused.append(Check("large", name, Status.SKIP, why, {"size": large_sizes.SIZES[name].to_json()}))
    plan_left = {g: n for g, n in to_run.items() if g != "large"}
    if kept:
        plan_left["large"] = kept
    return plan_left, refused


def name_the_limit(checks: list[Check]) -> None:
    """A --large case that crashed its worker or raised: its FAIL names the limit and the upstream issues."""
    for check in checks:
        if (
            check.layer == "large"
            and check.status is Status.FAIL
            and large_sizes.UPSTREAM not in check.summary
        ):
            check.summary += f" (past the 2^31-element limit: {large_sizes.UPSTREAM})"


def run_gpu_layers(
    seed: int,
    check_timeout_s: float,
    usable_modules: frozenset[str],
    *,
    groups: Sequence[str] = case_table.DEFAULT_GROUPS,
    parallel: bool = True,
    device_count: int = 1,
    device_usable: Mapping[int, frozenset[str]] | None = None,
    compile_natives: bool = True,
    device_memory_bytes: int | None = None,
) -> GpuResults:
    """Parity and timing checks of the fused kernels; each group runs in a worker with a per-check timeout.

    groups: selected_groups(...) (compile, large); compile_natives: time compiled torch too;
    device_memory_bytes: cuda:0's total memory (the --large cases it cannot hold are SKIP, not run).

    usable_modules: extension modules that imported and whose compiled archs cover GPU 0 (parity, timing).
    device_count / device_usable: the node's visible GPUs; each one after the first gets a smoke check.
    """
    t0 = time.monotonic()
    available, reason = _cuda_device()
    to_run, skipped = plan(
        frozenset(usable_modules), None if available else reason, groups, device_count, device_usable
    )
    to_run, refused = large_refusals(to_run, device_memory_bytes)
    skipped += refused
    flags = () if compile_natives else ("--no-compile",)
    results: list[GroupResult] = (
        run_groups(
            [g for g in groups if g in to_run],
            seed,
            check_timeout_s,
            names=to_run,
            parallel=parallel,
            flags=flags,
        )
        if to_run
        else []
    )
    by_group = {r.group: r for r in results}
    checks: list[Check] = []
    timings: list[TimingJSON] = []
    for group in groups:  # report order follows the case table, whatever ran in parallel
        if group in by_group:
            checks.extend(by_group[group].checks)
            timings.extend(by_group[group].timings)
    checks.extend(skipped)
    name_the_limit(checks)
    layer_order = {"parity": 0, "compile": 1, "timing": 2, "large": 3}
    checks.sort(key=lambda c: layer_order.get(c.layer, 4))  # stable: keeps case order inside a layer
    groups_info = [{"group": r.group, "wall_s": r.wall_s, "workers": r.workers} for r in results]
    return GpuResults(checks, timings, groups_info, round(time.monotonic() - t0, 3))
