"""Apex under torch.compile (group compile): does each feature compile, where does it break the graph,
does it give eager's numbers, and do the custom ops Apex registers pass torch.library.opcheck.

Per feature (FusedLayerNorm, FusedRMSNorm: fp32 and bf16; FusedAdam's step; the amp training step):
  1. torch._dynamo.explain on the call: graphs, graph breaks and torch's reason for each;
  2. torch.compile(fullgraph=True): compiles or not (its error's first line);
  3. torch.compile (the default, breaks allowed; Inductor) against the same call eager, forward and backward,
     with the parity layer's tolerances (verify.gpu.tolerances).
Verdicts in verify/gpu/compile_rules.py. Every compile is timed into the check (duration_s) but no
kernel is: this layer says whether and how, verify's timing layer says how fast.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from verify.checks import Check, Status
from verify.gpu import amp_step, device, parity_adam, parity_norm, tolerances
from verify.gpu.cases import Case, case_seed
from verify.gpu.compare import Comparison, compare, relative_l2
from verify.gpu.compile_rules import (
    CompileOutcome,
    GraphReport,
    OpcheckResult,
    first_line,
    group_breaks,
    kernel_note,
    opcheck_verdict,
    verdict,
)
from verify.timing import compiled as compiled_torch

LEADING = (4, 64)  # 256 rows of a (batch, sequence, hidden) input
HIDDEN = 4096
ADAM_STEPS = 3
APEX_MODULES = ("apex.normalization", "apex.optimizers")  # imported before custom ops are looked for
APEX_NAMESPACES = ("apex",)  # dispatcher namespaces Apex's C++ (TORCH_LIBRARY) registrations would use
_OPS_BEFORE: frozenset[str] = frozenset()  # dispatcher op names before Apex was imported (setup)
_INDUCTOR_PROBLEM: str | None = None


def setup() -> str:
    global _OPS_BEFORE, _INDUCTOR_PROBLEM
    described = device.require_cuda()
    _OPS_BEFORE = frozenset(torch._C._dispatch_get_all_op_names())
    _INDUCTOR_PROBLEM = compiled_torch.inductor_problem()
    return described


# --- explain and compile ---------------------------------------------------------------------------------


def _frame(frames: Sequence[Any]) -> str:
    if not frames:
        return ""
    f = frames[-1]
    name = getattr(f, "name", "")
    return f"{getattr(f, 'filename', '?')}:{getattr(f, 'lineno', '?')}" + (f" in {name}" if name else "")


def op_name(target: Any) -> str:
    """An FX call_function target as a name: `apex.fused_layer_norm_affine_fwd.default` for an op,
    `torch.nn.functional.layer_norm` for a function."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    module, name = getattr(target, "__module__", None), getattr(target, "__name__", None)
    return f"{module}.{name}" if module and name else str(target)


def graph_report(explained: Any) -> GraphReport:
    """torch._dynamo.explain's ExplainOutput -> GraphReport (reasons grouped; first lines only)."""
    raw = [
        (getattr(r, "reason", str(r)), _frame(getattr(r, "user_stack", ()) or ()))
        for r in explained.break_reasons
    ]
    ops = dict.fromkeys(op_name(t) for graph_ops in explained.ops_per_graph for t in graph_ops)
    graphs = int(explained.graph_count)
    # explain counts breaks as graphs - 1: with no graph captured (the call skipped whole) that is -1
    breaks = max(int(explained.graph_break_count), 0) if graphs else 0
    return GraphReport(graphs, breaks, group_breaks(raw), ops=tuple(ops))


def explain(fn: Callable[..., Any], *args: Any) -> GraphReport:
    """Run fn(*args) under torch._dynamo.explain (fresh caches); an error in explain is reported, not raised."""
    torch._dynamo.reset()
    try:
        return graph_report(torch._dynamo.explain(fn)(*args))
    except Exception as err:  # noqa: BLE001
        return GraphReport(0, 0, (), f"{type(err).__name__}: {first_line(str(err))}")
    finally:
        torch._dynamo.reset()


def error_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {first_line(str(err))}"


def _attempt(run: Callable[[], Any]) -> tuple[Any, str]:
    """(result, "") or (None, the error's first line), with fresh dynamo caches before and after."""
    torch._dynamo.reset()
    try:
        return run(), ""
    except Exception as err:  # noqa: BLE001 - a compile error is this layer's finding
        return None, error_line(err)
    finally:
        torch._dynamo.reset()


def _skip(case: Case, reason: str) -> tuple[Check, list[dict]]:
    return Check(case.layer, case.name, Status.SKIP, f"{case.name}: {reason}", {"reason": reason}), []


def _check(case: Case, outcome: CompileOutcome, details: dict[str, Any]) -> tuple[Check, list[dict]]:
    status, summary = verdict(outcome)
    details.update(
        graphs=outcome.graphs.to_json(),
        fullgraph=outcome.fullgraph_error or "compiles",
        run_error=outcome.run_error or None,
        mismatches=list(outcome.mismatches),
        torch=torch.__version__,
    )
    return Check(case.layer, case.name, status, summary, details), []


def _mismatches(results: Sequence[Comparison]) -> tuple[tuple[str, ...], str]:
    failed = tuple(c.describe() for c in results if not c.ok)
    closest = max(results, key=lambda c: c.tol_used).describe() if results else ""
    return failed, closest


# --- the cases -------------------------------------------------------------------------------------------


Compile = Callable[..., Callable[..., Any]]  # torch.compile's signature: (fn, fullgraph=...) -> compiled fn


def norm_case(
    case: Case,
    seed: int,
    make: Callable[..., torch.nn.Module] = parity_norm.make_fused,
    compile_fn: Compile = compiled_torch.compiled,
) -> tuple[Check, list[dict]]:
    """make(kind, hidden, affine, dtype): the module compiled (default Apex's); compile_fn: how (default
    torch.compile). The unit tier passes torch modules and a cheaper backend on the CPU."""
    kind, dtype_name = case.param("kind"), case.param("dtype")
    dtype = device.DTYPES[dtype_name]
    gen = device.generator(case_seed(seed, case.name))
    module = make(kind, HIDDEN, True, dtype)
    with torch.no_grad():
        for name, p in module.named_parameters():
            low, high = (0.5, 1.5) if name == "weight" else (-0.01, 0.01)
            p.copy_(device.uniform((HIDDEN,), gen, low, high, dtype=dtype))
    params = list(module.named_parameters())
    x = device.randn((*LEADING, HIDDEN), gen, dtype=dtype, scale=2.0, shift=0.5)
    grad_out = device.randn((*LEADING, HIDDEN), gen, dtype=dtype)

    def fwd_bwd(fn: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, ...]:
        xi = x.detach().clone().requires_grad_(True)
        y = fn(xi)
        grads = torch.autograd.grad(y, [xi, *(p for _, p in params)], grad_out)
        return (y.detach(), *grads)

    label = f"{parity_norm.NAMES[kind]}({dtype_name}) fwd+bwd, compiled"
    eager = fwd_bwd(module)
    graphs = explain(module, x)
    _, fullgraph_error = _attempt(lambda: fwd_bwd(compile_fn(module, fullgraph=True)))
    compiled, run_error = _attempt(lambda: fwd_bwd(compile_fn(module)))
    tol = tolerances.NORM[dtype_name]
    results: list[Comparison] = []
    if compiled is not None:
        names = ["output", "input grad", *(f"{n} grad" for n, _ in params)]
        kinds = ["forward", "input_grad"] + ["param_grad"] * len(params)
        results = [
            compare(f"{what} (compiled vs eager)", c, e, tol[k])
            for what, c, e, k in zip(names, compiled, eager, kinds, strict=True)
        ]
    failed, closest = _mismatches(results)
    note = kernel_note(graphs, parity_norm.NAMES[kind])
    outcome = CompileOutcome(label, graphs, fullgraph_error, run_error, failed, closest, note=note)
    details = {
        "seed": seed,
        "case_seed": case_seed(seed, case.name),
        "input_shape": [*LEADING, HIDDEN],
        "dtype": dtype_name,
        "tolerances": {k: v.to_json() for k, v in tol.items()},
        "compared": [c.to_json() for c in results],
    }
    return _check(case, outcome, details)


def adam_case(
    case: Case,
    seed: int,
    fused_adam: Callable[..., torch.optim.Optimizer] | None = None,
    compile_fn: Compile = compiled_torch.compiled,
) -> tuple[Check, list[dict]]:
    """fused_adam(params, adam_w_mode=..., **hyper): the optimizer whose step is compiled (default Apex's)."""
    if fused_adam is None:
        from apex.optimizers import FusedAdam

        fused_adam = FusedAdam

    gen = device.generator(case_seed(seed, case.name))
    initial = [device.randn(s, gen, scale=parity_adam.PARAM_SCALE) for s in parity_adam.SHAPES]
    grads = [
        [device.randn(s, gen, scale=parity_adam.GRAD_SCALE) for s in parity_adam.SHAPES]
        for _ in range(ADAM_STEPS)
    ]

    def optimizer() -> tuple[list[torch.nn.Parameter], torch.optim.Optimizer]:
        params = [torch.nn.Parameter(t.clone()) for t in initial]
        return params, fused_adam(params, adam_w_mode=True, **parity_adam.HYPER)

    def steps(params: list[torch.nn.Parameter], step: Callable[[], Any]) -> list[torch.Tensor]:
        for step_grads in grads:
            for p, g in zip(params, step_grads, strict=True):
                p.grad = g.clone()
            step()
        return [p.detach().clone() for p in params]

    eager_params, eager_opt = optimizer()
    eager = steps(eager_params, eager_opt.step)
    probe_params, probe_opt = optimizer()  # explain and fullgraph run the step: on a throwaway copy
    for p, g in zip(probe_params, grads[0], strict=True):
        p.grad = g.clone()
    graphs = explain(probe_opt.step)
    _, fullgraph_error = _attempt(lambda: compile_fn(probe_opt.step, fullgraph=True)())
    compiled_params, compiled_opt = optimizer()
    compiled, run_error = _attempt(lambda: steps(compiled_params, compile_fn(compiled_opt.step)))
    tol = tolerances.ADAM_PARAMS["fp32"]
    results = (
        [
            compare(f"param {i} {tuple(c.shape)} after {ADAM_STEPS} steps (compiled vs eager)", c, e, tol)
            for i, (c, e) in enumerate(zip(compiled, eager, strict=True))
        ]
        if compiled is not None
        else []
    )
    failed, closest = _mismatches(results)
    agreement = None
    if compiled is not None:
        moved_c = torch.cat([(c - t).reshape(-1) for c, t in zip(compiled, initial, strict=True)])
        moved_e = torch.cat([(e - t).reshape(-1) for e, t in zip(eager, initial, strict=True)])
        agreement = relative_l2(moved_c, moved_e)
        limit = tolerances.ADAM_UPDATE_AGREEMENT["fp32"]
        if not agreement <= limit:
            failed += (
                f"the {ADAM_STEPS}-step update differs from eager's by {agreement:.3g} (limit {limit:g})",
            )
    outcome = CompileOutcome(
        "FusedAdam(adamw, fp32).step",
        graphs,
        fullgraph_error,
        run_error,
        failed,
        closest,
        run_error_fails=False,
    )
    details = {
        "seed": seed,
        "case_seed": case_seed(seed, case.name),
        "compiled": "torch.compile(optimizer.step), as PyTorch compiles its own optimizers",
        "steps": ADAM_STEPS,
        "shapes": [list(s) for s in parity_adam.SHAPES],
        "tolerance": tol.to_json(),
        "update_agreement": agreement,
        "compared": [c.to_json() for c in results[:10]],
    }
    return _check(case, outcome, details)


def amp_case(
    case: Case,
    seed: int,
    parts: tuple[Callable[[], tuple[torch.nn.Module, torch.nn.Module]], Callable[..., torch.optim.Optimizer]]
    | None = None,
    compile_fn: Compile = compiled_torch.compiled,
) -> tuple[Check, list[dict]]:
    """parts: (make the two norms, the optimizer class); default Apex's FusedLayerNorm/FusedRMSNorm and
    FusedAdam."""
    if parts is None:
        from apex.optimizers import FusedAdam

        parts = (amp_step.apex_norms, FusedAdam)
    make_norms, fused_adam = parts

    dtype_name = case.param("dtype")
    dtype = device.DTYPES[dtype_name]
    gen = device.generator(case_seed(seed, case.name))
    eager_model, _torch_model = amp_step.make_models(gen, make_norms())
    del _torch_model
    compiled_model = copy.deepcopy(eager_model)
    initial = [p.detach().clone() for p in eager_model.parameters()]
    x = device.randn((amp_step.BATCH, amp_step.IN_FEATURES), gen)
    target = torch.randint(0, amp_step.CLASSES, (amp_step.BATCH,), generator=gen, device=device.DEVICE)

    def train(model: torch.nn.Module, net: Any) -> tuple[list[float], torch.Tensor]:
        opt = fused_adam(model.parameters(), adam_w_mode=True, **amp_step.HYPER)
        losses, _ = amp_step.train(net, opt, x, target, dtype, None)
        update = torch.cat(
            [(p.detach() - p0).reshape(-1) for p, p0 in zip(model.parameters(), initial, strict=True)]
        )
        return losses, update

    def forward(inp: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=torch.device(device.DEVICE).type, dtype=dtype):
            return probe(inp)

    probe = copy.deepcopy(eager_model)
    graphs = explain(forward, x)
    _, fullgraph_error = _attempt(lambda: train(probe, compile_fn(probe, fullgraph=True)))
    eager_losses, eager_update = train(eager_model, eager_model)
    compiled, run_error = _attempt(lambda: train(compiled_model, compile_fn(compiled_model)))
    failed: tuple[str, ...] = ()
    closest = ""
    details: dict[str, Any] = {
        "seed": seed,
        "case_seed": case_seed(seed, case.name),
        "model": "verify.gpu.amp_step's model with FusedLayerNorm and FusedRMSNorm, torch.compile(model), "
        "FusedAdam stepped eagerly",
        "autocast_dtype": dtype_name,
        "eager_losses": eager_losses,
    }
    if compiled is not None:
        losses, update = compiled
        diffs = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, eager_losses, strict=True)]
        agreement = relative_l2(update, eager_update)
        loss_limit = tolerances.AMP_LOSS_RTOL[dtype_name]
        update_limit = tolerances.AMP_UPDATE_AGREEMENT[dtype_name]
        details.update(compiled_losses=losses, loss_rel_diff_max=max(diffs), update_agreement=agreement)
        if not all(v == v and abs(v) != float("inf") for v in losses):
            failed += (f"non-finite loss compiled: {losses}",)
        elif max(diffs) > loss_limit:
            worst = max(range(len(diffs)), key=lambda i: diffs[i])
            failed += (
                f"loss at step {worst + 1} is {losses[worst]:.5g} vs eager {eager_losses[worst]:.5g} "
                f"({diffs[worst]:.2%} off; limit {loss_limit:.0%})",
            )
        elif not agreement <= update_limit:
            failed += (f"parameter update differs from eager's by {agreement:.3g} (limit {update_limit:g})",)
        closest = f"max loss diff {max(diffs):.2%}, update {agreement:.2g} off"
    label = f"{amp_step.STEPS} training steps, {dtype_name} autocast, compiled model with Fused{{LayerNorm,RMSNorm}}"
    note = kernel_note(graphs, "FusedLayerNorm/FusedRMSNorm")
    outcome = CompileOutcome(label, graphs, fullgraph_error, run_error, failed, closest, note=note)
    return _check(case, outcome, details)


# --- opcheck --------------------------------------------------------------------------------------------


def apex_custom_ops(before: frozenset[str], namespaces: Sequence[str] = APEX_NAMESPACES) -> list[str]:
    """Dispatcher ops that appeared since `before` in Apex's namespaces, plus every torch.library.custom_op
    whose Python definition lives in an `apex` module (whatever namespace it chose, e.g. cudnn::)."""
    names = {
        n for n in torch._C._dispatch_get_all_op_names() if n not in before and n.split("::")[0] in namespaces
    }
    opdefs = getattr(getattr(torch._library, "custom_ops", None), "OPDEFS", {})
    for qualname, opdef in dict(opdefs).items():
        module = getattr(getattr(opdef, "_init_fn", None), "__module__", "") or ""
        if module.split(".")[0] in namespaces:
            names.add(qualname)
    return sorted(names)


def _op_packet(qualname: str) -> Any:
    namespace, _, name = qualname.partition("::")
    packet = getattr(getattr(torch.ops, namespace), name)
    return packet.default if hasattr(packet, "default") else packet


def _has_autograd(qualname: str) -> bool:
    opdefs = getattr(getattr(torch._library, "custom_ops", None), "OPDEFS", {})
    opdef = opdefs.get(qualname)
    return getattr(opdef, "_backward_fn", None) is not None


def sample_values(rows: int, hidden: int, grad: bool, device_name: str, eps: float = 1e-5) -> dict[str, Any]:
    """Values for a norm op's arguments, by argument name (Apex's norm ops name them alike)."""
    gen = torch.Generator(device=device_name).manual_seed(0)

    def draw(*shape: int, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
        return torch.rand(shape, generator=gen, device=device_name) * (high - low) + low

    x = draw(rows, hidden).requires_grad_(grad)
    plain = x.detach()
    mean = plain.mean(-1)
    invvar = torch.rsqrt(plain.var(-1, unbiased=False) + eps)
    return {
        "input": x,
        "input_or_output": plain,
        "weight": draw(hidden, low=0.5, high=1.5).requires_grad_(grad),
        "gamma": draw(hidden, low=0.5, high=1.5).requires_grad_(grad),
        "bias": draw(hidden).requires_grad_(grad),
        "beta": draw(hidden).requires_grad_(grad),
        "normalized_shape": [hidden],
        "eps": eps,
        "epsilon": eps,
        "memory_efficient": False,
        "grad_output": draw(rows, hidden),
        "dout": draw(rows, hidden),
        "mean": mean,
        "invvar": invvar,
    }


def sample_args(schema: Any, values: dict[str, Any]) -> tuple[tuple[Any, ...], str]:
    """Positional args for an op's schema from `values` by name; (args, "") or ((), why not)."""
    args: list[Any] = []
    for i, arg in enumerate(schema.arguments):
        if arg.name in values:
            args.append(values[arg.name])
            continue
        rest = schema.arguments[i:]
        if all(a.has_default_value() for a in rest):
            break
        return (), f"no sample input for argument {arg.name!r} ({arg.type})"
    return tuple(args), ""


def opcheck_op(qualname: str, device_name: str, rows: int = 8, hidden: int = 64) -> OpcheckResult:
    op = _op_packet(qualname)
    values = sample_values(rows, hidden, _has_autograd(qualname), device_name)
    args, why = sample_args(op._schema, values)
    if why:
        return OpcheckResult(qualname, {}, why)
    found = torch.library.opcheck(op, args, raise_exception=False)
    return OpcheckResult(qualname, {t: r if isinstance(r, str) else error_line(r) for t, r in found.items()})


def _opcheck(case: Case, seed: int) -> tuple[Check, list[dict]]:
    for name in APEX_MODULES:
        importlib.import_module(name)
    ops = apex_custom_ops(_OPS_BEFORE)
    results = [opcheck_op(op, device.DEVICE) for op in ops]
    where = f"after importing {', '.join(APEX_MODULES)}; torch {torch.__version__}"
    status, summary = opcheck_verdict(results, where)
    details = {"seed": seed, "ops": [r.to_json() for r in results], "looked_in": where}
    return Check(case.layer, case.name, status, summary, details), []


def run_case(case: Case, seed: int) -> tuple[Check, list[dict]]:
    if _INDUCTOR_PROBLEM and case.family != "opcheck":
        return _skip(case, _INDUCTOR_PROBLEM)
    if case.family == "opcheck":
        return _opcheck(case, seed)
    if case.family == "fused_adam":
        return adam_case(case, seed)
    if case.family == "amp_step":
        return amp_case(case, seed)
    return norm_case(case, seed)
