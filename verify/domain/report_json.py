"""The JSON shapes the report's writers build and its readers index, as TypedDicts.

One name per object in verify/schema/report.schema.json that code here reads by key: a report, a check, a
timing row, an extension row, the host and environment blocks. A part no reader here indexes (a check's
`details`, a figure's statistics) stays an open JSON value; the schema is the full contract.
"""

from __future__ import annotations

from typing import Any, TypedDict


class CheckJSON(TypedDict):
    id: str
    layer: str
    name: str
    status: str
    summary: str
    details: dict[str, Any]
    duration_s: float


class HostJSON(TypedDict, total=False):
    hostname: str
    in_container: bool
    cpu_count: int | None
    os: str


class ExtensionJSON(TypedDict, total=False):
    module: str
    flag: str | None
    kind: str
    status: str
    path: str | None
    origin: str | None
    error: str | None
    demangled_symbol: str | None
    arch: Any


class TimingJSON(TypedDict, total=False):
    """One row of the report's timings (verify.gpu.kernel_timing): figures and their verdicts."""

    kernel: str
    case: str
    device: str | None
    fused: Any
    natives: list[Any]
    kernel_time: Any
    host_inclusive: Any
    winner: Any
    verdict: Any
    rounds: Any
    bootstrap: Any
    device_load: Any
    withheld: Any
    host: Any


class RecommendationJSON(TypedDict):
    """What to use for one feature and case (verify.report.recommend), from that case's timing row."""

    feature: str  # "LayerNorm", "RMSNorm", "Adam"
    dtype: str | None
    case: str
    use: str | None  # the implementation to use, "tie", or None (no verdict: withheld, not run)
    figure: str | None  # the figure that decided: kernel_time, else host_inclusive
    speedup: float | None  # how much faster `use` is (>= 1); None for a tie
    line: str  # the sentence the report's first screen shows


class ToolJSON(TypedDict, total=False):
    """nvcc's or gcc's block: where it is and its version."""

    path: str | None
    version: str | None
    full: str | None  # nvcc's
    banner: str  # gcc's


class GpuJSON(TypedDict, total=False):
    index: int
    name: str
    capability: str  # "9.0"
    sm: str
    memory_gib: float
    multiprocessors: int


class TorchJSON(TypedDict, total=False):
    version: str
    path: str
    cuda: str | None
    cxx11_abi: bool
    arch_list: list[str]
    cuda_available: bool
    device_count: int
    gpu: GpuJSON | None  # device 0, without its index
    gpus: list[GpuJSON]
    cuda_error: str


class DriverJSON(TypedDict, total=False):
    version: str | None
    source: str | None
    supports_torch_cuda: bool | None
    needs_branch: int


class EnvironmentJSON(TypedDict, total=False):
    """The report's environment block (verify.layers.environment.collect)."""

    python: dict[str, str]
    platform: dict[str, str]
    torch: TorchJSON | None
    torch_error: str | None
    driver: DriverJSON
    nvcc: ToolJSON | None
    gcc: ToolJSON | None


class ReportJSON(TypedDict, total=False):
    """A verify report (schema v3) as the assembler writes it and the renderers read it."""

    schema_version: str
    tool_version: str
    created_at: str
    mode: str
    options: dict[str, object]
    host: HostJSON
    environment: EnvironmentJSON
    apex: dict[str, Any]
    manifest: dict[str, Any] | None
    extensions: list[ExtensionJSON]
    checks: list[CheckJSON]
    timings: list[TimingJSON]
    recommendations: list[RecommendationJSON]
    summary: dict[str, int]
    distributed: dict[str, Any]
    verdict: str
    exit_code: int
    duration_s: float
    audit: Any
