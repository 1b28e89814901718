"""What torch.compile made of an Apex feature, and the verdict: graph breaks are WARN, other numbers FAIL.

torch-free records and rules (the unit tier tests them with made-up explain results); the torch side,
which runs the compiles, is verify/gpu/compile_check.py. A graph break is a cost, not a bug: the model
still trains, but Inductor cannot fuse across the break, so Apex's kernel may cost more than it saves.
Compiled numbers that differ from eager ones beyond the parity layer's tolerances are a bug.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from verify.checks import Status

# where torch says it: a break reason is a paragraph (explanation, hint, debug context); its first line
# names the cause, and the user frame (file:line) says which call broke the graph
MAX_REASON_CHARS = 300


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    reason: str  # the first line of torch's reason, e.g. "Call to `torch._dynamo.graph_break()`"
    where: str  # the innermost user frame, "file.py:123 in forward", or "" when torch gave none
    count: int = 1  # breaks with the same reason at the same place

    def describe(self) -> str:
        at = f" at {self.where}" if self.where else ""
        times = f" ({self.count}x)" if self.count > 1 else ""
        return f"{self.reason}{at}{times}"

    def to_json(self) -> dict[str, object]:
        return {"reason": self.reason, "where": self.where, "count": self.count}


@dataclasses.dataclass(frozen=True)
class GraphReport:
    """torch._dynamo.explain's answer for one call: graphs made, breaks between them and why."""

    graphs: int
    break_count: int
    breaks: tuple[GraphBreak, ...] = ()
    error: str = ""  # explain itself failed (then graphs/breaks are unknown: 0)
    ops: tuple[str, ...] = ()  # the functions and ops the captured graphs call, distinct, in order

    @property
    def apex_ops(self) -> tuple[str, ...]:
        return tuple(op for op in self.ops if op.startswith("apex.") or ".apex." in op)

    def to_json(self) -> dict[str, object]:
        return {
            "graphs": self.graphs,
            "graph_breaks": self.break_count,
            "breaks": [b.to_json() for b in self.breaks],
            "error": self.error or None,
            "ops": list(self.ops),
        }


def kernel_note(graphs: GraphReport, looked_for: str) -> str:
    """Whether Apex's kernel is what runs compiled: the captured graph calls an apex op, or torch's own op
    instead (upstream's norms call F.layer_norm / F.rms_norm when torch.compiler.is_compiling())."""
    if graphs.error or not graphs.ops:
        return ""
    if graphs.apex_ops:
        return f"Apex's kernel runs in the compiled graph ({', '.join(graphs.apex_ops[:3])})"
    norms = [op for op in graphs.ops if "norm" in op.rsplit(".", 1)[-1]]
    instead = f" it calls {', '.join(norms[:3])}" if norms else ""
    return (
        f"Apex's kernel is not in the compiled graph:{instead or ' no apex op in it'}; compiled, "
        f"{looked_for} runs torch's own op, which Inductor fuses"
    )


def first_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return (lines[0] if lines else "(no reason given)")[:MAX_REASON_CHARS]


def group_breaks(raw: Sequence[tuple[str, str]]) -> tuple[GraphBreak, ...]:
    """(reason text, where) pairs in the order torch gave them -> one GraphBreak per distinct pair."""
    counts: dict[tuple[str, str], int] = {}
    for reason, where in raw:
        key = (first_line(reason), where)
        counts[key] = counts.get(key, 0) + 1
    return tuple(GraphBreak(r, w, n) for (r, w), n in counts.items())


@dataclasses.dataclass(frozen=True)
class CompileOutcome:
    """Everything one compile case measured, before the verdict."""

    label: str  # e.g. "FusedLayerNorm(bf16) fwd+bwd"
    graphs: GraphReport
    fullgraph_error: str = ""  # torch.compile(fullgraph=True) raised: its first line
    run_error: str = ""  # the default torch.compile (graph breaks allowed) raised: its first line
    mismatches: tuple[str, ...] = ()  # compiled vs eager comparisons that failed, described
    closest: str = ""  # the worst comparison that passed, described (shown on PASS/WARN)
    run_error_fails: bool = True  # False where not compiling is a choice users have (an optimizer step)
    note: str = ""  # a fact worth the summary whatever the verdict (kernel_note)


def verdict(outcome: CompileOutcome) -> tuple[Status, str]:
    """(status, one-line summary): FAIL for other numbers (or, where users must compile it, an error),
    WARN for graph breaks or a fullgraph=True refusal, PASS for one graph with eager's numbers."""
    o = outcome
    if o.run_error:
        status = Status.FAIL if o.run_error_fails else Status.WARN
        return status, f"{o.label} does not run under torch.compile: {o.run_error}"
    if o.mismatches:
        more = f" (+{len(o.mismatches) - 1} more)" if len(o.mismatches) > 1 else ""
        return Status.FAIL, f"{o.label} compiled gives other numbers than eager: {o.mismatches[0]}{more}"
    if o.graphs.graphs == 0 and not o.graphs.error:
        why = (o.graphs.breaks[0].describe() if o.graphs.breaks else "") or o.fullgraph_error
        return Status.WARN, (
            f"{o.label} is not captured by torch.compile (no graph: it runs eagerly, so there was nothing "
            f"compiled to compare): {why or 'torch gave no reason'}"
        )
    agree = f"compiled matches eager ({o.closest})" if o.closest else "compiled matches eager"
    if o.note:
        agree += f"; {o.note}"
    breaks = o.graphs.break_count
    if breaks or o.fullgraph_error:
        if o.graphs.breaks:
            why = o.graphs.breaks[0].describe()
            more = f"; +{len(o.graphs.breaks) - 1} other reason(s)" if len(o.graphs.breaks) > 1 else ""
        else:
            why, more = o.fullgraph_error or o.graphs.error or "reason not reported", ""
        count = f"{breaks} graph break(s), {o.graphs.graphs} graphs" if breaks else "no fullgraph"
        return Status.WARN, f"{o.label} breaks the graph ({count}): {why}{more}; {agree}"
    return Status.PASS, f"{o.label} compiles with fullgraph=True (one graph, no break); {agree}"


@dataclasses.dataclass(frozen=True)
class OpcheckResult:
    """torch.library.opcheck of one custom op: each of its tests SUCCESS or the error's first line."""

    op: str  # "apex::fused_layer_norm_fwd"
    tests: dict[str, str]  # test name -> "SUCCESS" | "Type: message"
    skipped: str = ""  # why the op was not checked (no sample inputs known for an argument)

    @property
    def failed(self) -> dict[str, str]:
        return {t: r for t, r in self.tests.items() if r != "SUCCESS"}

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "tests": self.tests, "skipped": self.skipped or None}


def opcheck_verdict(results: Sequence[OpcheckResult], where: str) -> tuple[Status, str]:
    """INFO when Apex registers no custom op (a fact about the build: its kernels are opaque pybind11
    calls to torch.compile); WARN naming the first failing op and test; PASS when every op passes."""
    if not results:
        return Status.INFO, (
            f"Apex registers no custom ops with torch.library here ({where}): torch.compile sees its "
            "kernels as opaque Python calls, so nothing is opchecked"
        )
    failing = [r for r in results if r.failed]
    checked = [r for r in results if not r.skipped]
    unchecked = [r for r in results if r.skipped]
    tail = (
        f"; not checked: {', '.join(r.op for r in unchecked)} ({unchecked[0].skipped})" if unchecked else ""
    )
    if failing:
        first = failing[0]
        test, error = next(iter(first.failed.items()))
        more = f" (+{len(failing) - 1} more ops)" if len(failing) > 1 else ""
        return Status.WARN, (
            f"{len(failing)} of {len(checked)} Apex custom ops fail torch.library.opcheck: {first.op} "
            f"{test}: {error}{more}{tail}"
        )
    if not checked:
        return Status.WARN, f"{len(results)} Apex custom ops found, none could be opchecked{tail}"
    tests = sorted({t for r in checked for t in r.tests})
    return Status.PASS, (
        f"{len(checked)} Apex custom ops pass torch.library.opcheck ({', '.join(tests)}): "
        f"{', '.join(r.op for r in checked)}{tail}"
    )
