"""Fused vs native on the same inputs: two figures per implementation, interleaved rounds, a verdict.

The one comparison used by verify's timing layer (verify/gpu/kernel_timing.py) and by `verify bench`
(verify/bench/micro.py); the implementations compared are declared once in verify/timing/kernel_variants.py.

Per implementation:
  kernel          GPU time of the kernels one call launches: torch.profiler with CUDA activity, the
                  durations of every kernel (and memset/memcpy) summed, / calls. Host work is not in it.
  host_inclusive  time per call of a back-to-back loop: CUDA events around N calls, / N. When the host
                  issues work more slowly than the GPU runs it, this is host time; what a training step sees.
Method: warm up every implementation (RoundPlan.warmup_ms of calls), calibrate N so one block lasts
about RoundPlan.block_ms, then RoundPlan.rounds alternating rounds (even rounds fused first, odd rounds
native first) of one block each, host-inclusive rounds first (host_block: the garbage collector off
inside each), then kernel rounds in one profiler session (a tiny marker kernel, torch.cuda._sleep,
separates the blocks; without it, one session per block). The verdicts come from verify.timing.stats
(bootstrap over the per-round ratios, tie bands from verify.timing.rules). Callers hold the host
steady around it (verify.timing.host.SteadyHost: one core, one torch thread) and pass its record as
`host`, which lands in the comparison's JSON.
On the CPU (tests, `verify bench --device cpu`) the same code runs with perf_counter and the
profiler's CPU activity (time inside aten ops stands in for kernel time); the numbers mean nothing
about a GPU.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import torch

from verify.timing import rules, stats
from verify.timing.host import quiet_gc
from verify.timing.kernel_profile import (
    NO_KERNELS,
    PROFILER_CPU,
    PROFILER_CUDA,
    SESSION_MARKED,
    SESSION_PER_BLOCK,
    cpu_op_us,
    device_events,
    split_at_markers,
    work_us,
)
from verify.timing.rules import RoundPlan

LOOP_CUDA = "CUDA events around N back-to-back calls, / N"
LOOP_CPU = "perf_counter around N back-to-back calls, / N (CPU run)"
# The host timer of every block and warm-up; a module attribute so that the unit tier injects a clock
# (the figures then follow the calls' own simulated time, never the test machine's load).
clock = time.perf_counter


@dataclasses.dataclass(frozen=True)
class Variant:
    """One implementation: `make` builds its state (optimizer, module) and returns one call."""

    name: str
    role: str  # "fused" | "native"
    make: Callable[[], Callable[[], object]] | None
    skip_reason: str = ""


@dataclasses.dataclass(frozen=True)
class VariantResult:
    name: str
    role: str
    status: str  # OK | SKIP | FAIL
    reason: str = ""
    kernel_ms: tuple[float, ...] = ()  # per round
    host_ms: tuple[float, ...] = ()  # per round
    issue_ms: float | None = None  # host wall time to issue one call (median over rounds), before any wait
    kernel_method: str = ""
    loop_method: str = ""
    loop_calls: int = 0
    kernel_calls: int = 0
    on_gpu: bool = True  # a CPU run has no GPU to be bound by
    warmup_calls: int = 0  # untimed calls before calibration (RoundPlan.warmup_ms)

    @property
    def kernel_median(self) -> float | None:
        return stats.median(self.kernel_ms) if self.kernel_ms else None

    @property
    def host_median(self) -> float | None:
        return stats.median(self.host_ms) if self.host_ms else None

    @property
    def bound(self) -> stats.Bound | None:
        if not self.on_gpu or self.kernel_median is None or self.host_median is None:
            return None
        return stats.bound_of(self.name, self.kernel_median, self.host_median)

    def to_json(self) -> dict[str, object]:
        def figure(values: tuple[float, ...], method: str, calls: int) -> dict[str, object] | None:
            if not values:
                return None
            return {
                "median_ms": round(stats.median(values), 5),
                "p10_ms": round(stats.quantile(values, 0.1), 5),
                "p90_ms": round(stats.quantile(values, 0.9), 5),
                "min_ms": round(min(values), 5),
                "rounds": len(values),
                "calls": calls,
                "method": method,
                "per_round_ms": [round(x, 5) for x in values],
            }  # re-deciding needs the rounds themselves

        bound = self.bound
        return {
            "name": self.name,
            "role": self.role,
            "status": self.status,
            "reason": self.reason,
            rules.KERNEL: figure(self.kernel_ms, self.kernel_method, self.kernel_calls),
            rules.HOST_INCLUSIVE: figure(self.host_ms, self.loop_method, self.loop_calls),
            "issue_ms": round(self.issue_ms, 5) if self.issue_ms is not None else None,
            "warmup_calls": self.warmup_calls,
            "bound": bound.to_json() if bound else None,
        }


@dataclasses.dataclass(frozen=True)
class KernelComparison:
    kernel: str  # the Apex feature, e.g. "FusedLayerNorm"
    case: str
    device: str  # e.g. "cuda:0 (NVIDIA H200)"
    variants: tuple[VariantResult, ...]
    kernel_verdict: stats.FigureVerdict | None
    host_verdict: stats.FigureVerdict | None
    sentence: str
    plan: RoundPlan
    host: dict[str, object] | None = None  # verify.timing.host.HostConditions.to_json() it ran under

    @property
    def fused(self) -> VariantResult:
        return self.variants[0]

    @property
    def natives(self) -> tuple[VariantResult, ...]:
        return self.variants[1:]

    @property
    def failed(self) -> list[VariantResult]:
        return [v for v in self.variants if v.status == "FAIL"]

    def winners(self) -> dict[str, str | None]:
        return {
            rules.KERNEL: self.kernel_verdict.winner if self.kernel_verdict else None,
            rules.HOST_INCLUSIVE: self.host_verdict.winner if self.host_verdict else None,
        }

    def to_json(self) -> dict[str, object]:
        return {
            "kernel": self.kernel,
            "case": self.case,
            "device": self.device,
            "fused": self.fused.to_json(),
            "natives": [v.to_json() for v in self.natives],
            rules.KERNEL: self.kernel_verdict.to_json() if self.kernel_verdict else None,
            rules.HOST_INCLUSIVE: self.host_verdict.to_json() if self.host_verdict else None,
            "winner": self.winners(),
            "verdict": self.sentence,
            "rounds": self.plan.to_json(),
            "bootstrap": rules.BOOTSTRAP.to_json(),
            "host": self.host,
        }


def one_line_error(exc: BaseException) -> str:
    """`Type: first line of the message`, short enough for a table cell."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}".rstrip(": ")


def device_label(device: torch.device) -> str:
    if device.type != "cuda":
        return str(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


def host_block(fn: Callable[[], object], n: int, device: torch.device) -> tuple[float, float]:
    """verify's host-inclusive timer: (ms per call, host issue ms per call) of n back-to-back calls, from
    an idle GPU, the garbage collector off (verify.timing.host.quiet_gc)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    with quiet_gc():
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = clock()
            start.record()
            for _ in range(n):
                fn()
            end.record()
            issued = clock() - t0
            end.synchronize()
            return start.elapsed_time(end) / n, issued * 1e3 / n
        t0 = clock()
        for _ in range(n):
            fn()
        elapsed = (clock() - t0) * 1e3 / n
    return elapsed, elapsed


class _Runner:
    """Times live implementations on one device; `calls` are their step functions, fused first."""

    def __init__(
        self, names: list[str], calls: list[Callable[[], object]], device: torch.device, plan: RoundPlan
    ) -> None:
        self.names, self.calls, self.device, self.plan = names, calls, device, plan
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def order(self, round_index: int) -> list[int]:
        ids = list(range(len(self.calls)))
        return ids if round_index % 2 == 0 else ids[::-1]

    def block(self, fn: Callable[[], object], n: int) -> tuple[float, float]:
        return host_block(fn, n, self.device)

    def warm_up(self) -> list[int]:
        """Each implementation: blocks of plan.warmup_calls until plan.warmup_ms have passed (host caches,
        the interpreter's specialisation, the allocator, the core's clock); returns the calls made."""
        made = []
        for fn in self.calls:
            spent, calls = 0.0, 0
            while calls == 0 or spent < self.plan.warmup_ms:
                t0 = clock()
                self.block(fn, self.plan.warmup_calls)
                spent += (clock() - t0) * 1e3
                calls += self.plan.warmup_calls
            made.append(calls)
        return made

    def calibrate(self) -> int:
        slowest = max(self.block(fn, 2)[0] for fn in self.calls)
        wanted = math.ceil(self.plan.block_ms / slowest) if slowest > 0 else self.plan.max_calls
        return max(self.plan.min_calls, min(self.plan.max_calls, wanted))

    def host_rounds(self, n: int) -> tuple[list[list[float]], list[list[float]]]:
        host: list[list[float]] = [[] for _ in self.calls]
        issue: list[list[float]] = [[] for _ in self.calls]
        for r in range(self.plan.rounds):
            for i in self.order(r):
                loop_ms, issue_ms = self.block(self.calls[i], n)
                host[i].append(loop_ms)
                issue[i].append(issue_ms)
        return host, issue

    def kernel_rounds(self) -> tuple[list[list[float]], str]:
        m = self.plan.kernel_calls
        if self.cuda:
            marked = self._kernel_rounds_marked(m)
            if marked is not None:
                return marked, f"{PROFILER_CUDA} ({SESSION_MARKED})"
            return self._kernel_rounds_per_block(m), f"{PROFILER_CUDA} ({SESSION_PER_BLOCK})"
        return self._kernel_rounds_per_block(m), f"{PROFILER_CPU} ({SESSION_PER_BLOCK})"

    def _kernel_rounds_marked(self, m: int) -> list[list[float]] | None:
        """One profiler session for every round; None when the markers did not come back as planned."""
        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is None:
            return None
        self.sync()
        order = [i for r in range(self.plan.rounds) for i in self.order(r)]
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for i in order:
                for _ in range(m):
                    self.calls[i]()
                sleep(1)
            self.sync()
        blocks = split_at_markers(device_events(prof))
        if len(blocks) != len(order) or min(blocks, default=0.0) <= 0:
            return None
        kernel: list[list[float]] = [[] for _ in self.calls]
        for i, total_us in zip(order, blocks, strict=True):
            kernel[i].append(total_us / m / 1e3)
        return kernel

    def _kernel_rounds_per_block(self, m: int) -> list[list[float]]:
        activity = torch.profiler.ProfilerActivity.CUDA if self.cuda else torch.profiler.ProfilerActivity.CPU
        kernel: list[list[float]] = [[] for _ in self.calls]
        for r in range(self.plan.rounds):
            for i in self.order(r):
                self.sync()
                with torch.profiler.profile(activities=[activity]) as prof:
                    for _ in range(m):
                        self.calls[i]()
                    self.sync()
                if self.cuda:
                    total_us = work_us(device_events(prof))
                else:
                    total_us = cpu_op_us(prof)
                kernel[i].append(total_us / m / 1e3)
        return kernel


def _best(results: list[VariantResult], figure: str) -> VariantResult | None:
    natives = [v for v in results[1:] if v.status == "OK"]
    key = (lambda v: v.kernel_median) if figure == rules.KERNEL else (lambda v: v.host_median)
    natives = [v for v in natives if key(v) is not None]
    return min(natives, key=key) if natives else None


def compare(
    kernel: str,
    case: str,
    variants: Sequence[Variant],
    device: torch.device | str,
    plan: RoundPlan | None = None,
    host: dict[str, object] | None = None,
) -> KernelComparison:
    """Build, warm up and time every variant (the first is the fused one) in interleaved rounds.

    A variant whose `make` is None is SKIP (its skip_reason); one that raises while being built is FAIL
    and the others still run; an error while timing fails every variant of the comparison (they shared
    the rounds), with the error as the reason.
    """
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    plan = plan or (rules.ROUNDS if device.type == "cuda" else rules.CPU_ROUNDS)
    results: list[VariantResult] = []
    live: list[tuple[int, Callable[[], object]]] = []
    for v in variants:
        if v.make is None:
            results.append(VariantResult(v.name, v.role, "SKIP", v.skip_reason))
            continue
        try:
            live.append((len(results), v.make()))
            results.append(VariantResult(v.name, v.role, "OK"))
        except Exception as exc:  # e.g. a torch without fused AdamW, an extension without code for this GPU
            results.append(VariantResult(v.name, v.role, "FAIL", one_line_error(exc)))
    label = device_label(device)
    if live:
        runner = _Runner([results[i].name for i, _ in live], [fn for _, fn in live], device, plan)
        try:
            warmed = runner.warm_up()
            n = runner.calibrate()
            loop_times, issue = runner.host_rounds(n)
            kernel_times, kernel_method = runner.kernel_rounds()
        except Exception as exc:
            reason = f"while timing: {one_line_error(exc)}"
            results = [
                dataclasses.replace(r, status="FAIL", reason=reason) if r.status == "OK" else r
                for r in results
            ]
        else:
            loop_method = LOOP_CUDA if runner.cuda else LOOP_CPU
            for k, (i, _fn) in enumerate(live):
                # no kernel time recorded (a profiler without CUPTI): that figure is missing, not zero
                measured = min(kernel_times[k], default=0.0) > 0
                results[i] = dataclasses.replace(
                    results[i],
                    kernel_ms=tuple(kernel_times[k]) if measured else (),
                    host_ms=tuple(loop_times[k]),
                    issue_ms=stats.median(issue[k]),
                    kernel_method=kernel_method if measured else f"not measured: {NO_KERNELS}",
                    loop_method=loop_method,
                    loop_calls=n,
                    kernel_calls=plan.kernel_calls,
                    on_gpu=runner.cuda,
                    warmup_calls=warmed[k],
                )
        finally:
            del runner
    return dataclasses.replace(_decide(kernel, case, label, results, plan), host=host)


def _across_host_speeds(
    loop: stats.FigureVerdict, kernel: stats.FigureVerdict | None, results: list[VariantResult]
) -> stats.FigureVerdict:
    """timing_rules.LOOP_RULE on a GPU run. A native loop win is checked against that native's kernels (the
    loop's fastest native may not be the kernels' fastest), a fused one against the fastest native kernels.
    Without kernel times (no CUPTI) the plain loop verdict stands, and on a CPU run (the host is the device)."""
    fused = results[0]
    native = next(v for v in results[1:] if v.name == loop.native)
    if not fused.on_gpu or kernel is None or not fused.kernel_ms or not native.kernel_ms:
        return loop
    if loop.winner != "fused" and kernel.native != native.name:
        kernel = stats.decide(rules.KERNEL, fused.name, native.name, fused.kernel_ms, native.kernel_ms)
    return stats.across_host_speeds(loop, kernel)


def _decide(
    kernel: str, case: str, label: str, results: list[VariantResult], plan: RoundPlan
) -> KernelComparison:
    fused = results[0]
    verdicts: dict[str, stats.FigureVerdict | None] = {rules.KERNEL: None, rules.HOST_INCLUSIVE: None}
    if fused.status == "OK":
        for figure in rules.FIGURES:
            best = _best(results, figure)
            if best is None:
                continue
            f_ms, n_ms = (
                (fused.kernel_ms, best.kernel_ms) if figure == rules.KERNEL else (fused.host_ms, best.host_ms)
            )
            verdicts[figure] = stats.decide(figure, fused.name, best.name, f_ms, n_ms)
        loop = verdicts[rules.HOST_INCLUSIVE]
        if loop is not None:
            verdicts[rules.HOST_INCLUSIVE] = _across_host_speeds(loop, verdicts[rules.KERNEL], results)
    if fused.status != "OK":
        text = f"no comparison: {fused.name} {fused.status} ({fused.reason})"
    elif verdicts[rules.HOST_INCLUSIVE] is None:
        reasons = "; ".join(f"{v.name}: {v.status} ({v.reason})" for v in results[1:]) or "none declared"
        text = f"no native implementation ran ({reasons})"
    else:
        compared = {fused.name} | {v.native for v in verdicts.values() if v is not None}
        shown = [r.bound for r in results if r.name in compared and r.bound is not None]
        missing = "" if verdicts[rules.KERNEL] else NO_KERNELS
        several = sum(1 for v in results[1:] if v.status == "OK") > 1
        text = stats.sentence(verdicts[rules.KERNEL], verdicts[rules.HOST_INCLUSIVE], shown, missing, several)
    return KernelComparison(
        kernel,
        case,
        label,
        tuple(results),
        verdicts[rules.KERNEL],
        verdicts[rules.HOST_INCLUSIVE],
        text,
        plan,
    )
