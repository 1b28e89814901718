"""The staged training benchmark: the guides' incremental recipe beside today's native alternatives,
eager and compiled (stages 7 and 8: torch.compile(model), the optimizer stepped eagerly).

Every stage trains the same model (one initial state dict, one seed) on the same synthetic token
batches for the same number of steps; warm-up steps are training steps too, so "loss after N steps"
counts warm-up + timed steps. Only the optimizer, the norm class and the precision change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
from collections.abc import Callable, Iterator

import torch
from torch import nn

from verify.bench import model as gpt
from verify.bench.apex_parts import ApexPart
from verify.bench.config import N_BATCHES, BenchConfig
from verify.timing import compiled as compiled_torch
from verify.timing import kernel_variants
from verify.timing import stats as timing_stats
from verify.timing.cuda_timer import Timing, measure
from verify.timing.kernel_compare import one_line_error
from verify.timing.rules import HOST_INCLUSIVE

OPT_TORCH_ADAM = "torch.optim.Adam"
OPT_APEX_ADAM = kernel_variants.FUSED_ADAM
OPT_TORCH_FUSED = kernel_variants.ADAMW_FUSED
NORM_TORCH = "nn.LayerNorm"
NORM_APEX = kernel_variants.FUSED_LAYER_NORM

# which figure a stage's ms/iter is (verify.timing.rules): a whole training step, host work included
STAGE_FIGURE = HOST_INCLUSIVE
STAGE_TIMER = (
    "CUDA events around each training step, back to back after the warm-up steps (host-inclusive: "
    "the GPU waits whenever the host is slower)"
)

# losses of stages that train the same model should agree this closely with the baseline's (relative);
# bf16 and TF32 round differently, so the stages are close, not equal
LOSS_REL_TOL = 0.05


@dataclasses.dataclass(frozen=True)
class Stage:
    number: int
    key: str
    title: str
    optimizer: str
    norm: str
    precision: str  # fp32 | bf16 (autocast) | tf32 (fp32 params, TF32 matmul)
    meaning: str
    compiled: bool = False  # the model runs as torch.compile(model); the optimizer steps eagerly

    @property
    def apex_features(self) -> tuple[str, ...]:
        needs = []
        if self.optimizer == OPT_APEX_ADAM:
            needs.append("FusedAdam")
        if self.norm == NORM_APEX:
            needs.append("FusedLayerNorm")
        return tuple(needs)


STAGES: tuple[Stage, ...] = (
    Stage(
        1,
        "adam-fp32",
        "Adam + FP32",
        OPT_TORCH_ADAM,
        NORM_TORCH,
        "fp32",
        "the guides' baseline: torch.optim.Adam (its default multi-tensor implementation), FP32 throughout",
    ),
    Stage(
        2,
        "fusedadam-fp32",
        "FusedAdam + FP32",
        OPT_APEX_ADAM,
        NORM_TORCH,
        "fp32",
        "stage 1 with Apex FusedAdam in place of torch Adam",
    ),
    Stage(
        3,
        "fusedadam-fusedln-fp32",
        "+ FusedLayerNorm",
        OPT_APEX_ADAM,
        NORM_APEX,
        "fp32",
        "stage 2 with every nn.LayerNorm replaced by Apex FusedLayerNorm",
    ),
    Stage(
        4,
        "apex-bf16",
        "+ bf16 autocast",
        OPT_APEX_ADAM,
        NORM_APEX,
        "bf16",
        "stage 3 under torch.autocast(bfloat16): the guides' full Apex recipe",
    ),
    Stage(
        5,
        "native-bf16",
        "native: AdamW(fused) + LayerNorm + bf16",
        OPT_TORCH_FUSED,
        NORM_TORCH,
        "bf16",
        "no Apex: torch AdamW(fused=True), nn.LayerNorm, torch.autocast(bfloat16)",
    ),
    Stage(
        6,
        "native-tf32",
        "native: AdamW(fused) + TF32",
        OPT_TORCH_FUSED,
        NORM_TORCH,
        "tf32",
        "no Apex, FP32 parameters with TF32 matmuls (allow_tf32, float32_matmul_precision 'high')"
        " and torch's fastest native optimizer, AdamW(fused=True)",
    ),
    Stage(
        7,
        "native-bf16-compiled",
        "compiled native: AdamW(fused) + LayerNorm + bf16",
        OPT_TORCH_FUSED,
        NORM_TORCH,
        "bf16",
        "stage 5 with torch.compile(model): what a 2026 training run uses, Inductor fusing LayerNorm itself",
        compiled=True,
    ),
    Stage(
        8,
        "apex-bf16-compiled",
        "compiled + Apex: FusedAdam + FusedLayerNorm + bf16",
        OPT_APEX_ADAM,
        NORM_APEX,
        "bf16",
        "stage 4 with torch.compile(model): Apex's parts inside a compiled bf16 training step",
        compiled=True,
    ),
)
# a compiled stage compiles in its first warm-up steps (forward, then backward): never in a timed one
COMPILED_MIN_WARMUP = 2

# (apex side, native side, what the pair isolates)
COMPARISONS: tuple[tuple[str, str, str], ...] = (
    ("fusedadam-fp32", "adam-fp32", "FusedAdam vs torch Adam in an FP32 training step"),
    ("fusedadam-fusedln-fp32", "fusedadam-fp32", "FusedLayerNorm vs nn.LayerNorm in an FP32 training step"),
    ("apex-bf16", "native-bf16", "full Apex recipe vs native PyTorch recipe, both bf16 autocast"),
    ("fusedadam-fusedln-fp32", "native-tf32", "Apex FP32 recipe vs native TF32 (FP32 parameters both)"),
    ("apex-bf16-compiled", "native-bf16-compiled", "what Apex adds to a compiled bf16 training step"),
    ("apex-bf16", "native-bf16-compiled", "the guides' full Apex recipe (eager) vs compiled native PyTorch"),
)


def stage_by_key(key: str) -> Stage:
    for stage in STAGES:
        if stage.key == key:
            return stage
    raise KeyError(key)


@contextlib.contextmanager
def precision_flags(precision: str) -> Iterator[None]:
    """Set TF32 on only for the tf32 stage and put every global flag back afterwards."""
    saved = (
        torch.get_float32_matmul_precision(),
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )
    tf32 = precision == "tf32"
    try:
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        yield
    finally:
        # the precision setter also moves allow_tf32, so restore it first
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cuda.matmul.allow_tf32 = saved[1]
        torch.backends.cudnn.allow_tf32 = saved[2]


def _autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _norm_factory(stage: Stage, apex: dict[str, ApexPart]) -> Callable[[int], nn.Module]:
    if stage.norm == NORM_APEX:
        fused_norm = apex["FusedLayerNorm"].cls
        assert (
            fused_norm is not None
        )  # the stage runs only when FusedLayerNorm is usable, which gives it a class
        return fused_norm
    return nn.LayerNorm


def _optimizer(stage: Stage, params: list[nn.Parameter], lr: float, apex: dict[str, ApexPart]):
    if stage.optimizer == OPT_APEX_ADAM:
        # adam_w_mode is moot with weight_decay=0: the same update as torch Adam
        fused_adam = apex["FusedAdam"].cls
        assert fused_adam is not None  # the stage runs only when FusedAdam is usable, which gives it a class
        return fused_adam(params, lr=lr, weight_decay=0.0, adam_w_mode=True)
    if stage.optimizer == OPT_TORCH_FUSED:
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.0, fused=True)
    return torch.optim.Adam(params, lr=lr, weight_decay=0.0)


def _release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


@dataclasses.dataclass
class StageRun:
    stage: Stage
    status: str  # OK | SKIP | FAIL
    reason: str = ""
    timing: Timing | None = None
    losses: list[float] = dataclasses.field(default_factory=list)
    peak_mem_bytes: int | None = None
    params: int | None = None


def make_batches(cfg: BenchConfig, device: torch.device) -> torch.Tensor:
    """N_BATCHES x (batch, seq + 1) random tokens from a fixed generator: identical for every stage."""
    gen = torch.Generator().manual_seed(cfg.seed)
    return torch.randint(0, cfg.vocab, (N_BATCHES, cfg.batch, cfg.seq + 1), generator=gen).to(device)


def initial_state(cfg: BenchConfig) -> dict[str, torch.Tensor]:
    """The weights every stage starts from, made once on the CPU so they do not depend on the GPU."""
    torch.manual_seed(cfg.seed)
    net = gpt.build(
        vocab=cfg.vocab,
        seq=cfg.seq,
        d_model=cfg.d_model,
        layers=cfg.layers,
        heads=cfg.heads,
        norm=nn.LayerNorm,
    )
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def skip_reason(missing: list[ApexPart]) -> str:
    """`needs FusedAdam, FusedLayerNorm: <reason>`, one reason per distinct cause."""
    by_reason: dict[str, list[str]] = {}
    for part in missing:
        by_reason.setdefault(part.reason, []).append(part.feature)
    return "; ".join(f"needs {', '.join(features)}: {reason}" for reason, features in by_reason.items())


def _train(
    stage: Stage,
    cfg: BenchConfig,
    device: torch.device,
    state: dict[str, torch.Tensor],
    batches: torch.Tensor,
    apex: dict[str, ApexPart],
    run: StageRun,
) -> None:
    """Build, train and time one stage; its model and optimizer die with this frame."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with torch.device(device):
        net = gpt.build(
            vocab=cfg.vocab,
            seq=cfg.seq,
            d_model=cfg.d_model,
            layers=cfg.layers,
            heads=cfg.heads,
            norm=_norm_factory(stage, apex),
        )
    net.load_state_dict(state)
    net.train()
    opt = _optimizer(stage, list(net.parameters()), cfg.lr, apex)
    run.params = gpt.param_count(net)
    losses: list[torch.Tensor] = []
    forward = compiled_torch.compiled(net) if stage.compiled else net

    def train_step() -> None:
        tokens = batches[len(losses) % N_BATCHES]
        with _autocast(stage.precision, device):
            loss = gpt.lm_loss(forward(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad()  # FusedAdam.zero_grad takes no arguments; all three set grads to None
        losses.append(loss.detach())  # no .item(): a host sync would distort the timing

    warmup = max(cfg.warmup, COMPILED_MIN_WARMUP) if stage.compiled else cfg.warmup
    run.timing = measure(
        f"stage {stage.number} ({stage.title})", train_step, device=device, warmup=warmup, iters=cfg.steps
    )
    run.losses = torch.stack(losses).float().cpu().tolist()
    if device.type == "cuda":
        run.peak_mem_bytes = torch.cuda.max_memory_allocated(device)


def compile_skip(stage: Stage, device: torch.device, compile_on_cpu: bool = False) -> str:
    """Why a compiled stage does not run here ("" when it does): Inductor missing, or a CPU smoke run, where
    Inductor's C++ compile of the model costs minutes on a small host and times nothing about a GPU."""
    if not stage.compiled:
        return ""
    if device.type == "cpu" and not compile_on_cpu:
        return "compiled stages run on CUDA only (--device cpu is a smoke run)"
    problem = compiled_torch.inductor_problem(cuda=device.type == "cuda")
    return f"torch.compile cannot run here: {problem}" if problem else ""


def run_stage(
    stage: Stage,
    cfg: BenchConfig,
    device: torch.device,
    state: dict[str, torch.Tensor],
    batches: torch.Tensor,
    apex: dict[str, ApexPart],
    compile_on_cpu: bool = False,
) -> StageRun:
    missing = [apex[f] for f in stage.apex_features if not apex[f].usable]
    if missing:
        return StageRun(stage, "SKIP", skip_reason(missing))
    not_compiled = compile_skip(stage, device, compile_on_cpu)
    if not_compiled:
        return StageRun(stage, "SKIP", not_compiled)
    run = StageRun(stage, "OK")
    _release(device)  # the previous stage's memory must not count in this one's peak
    try:
        with precision_flags(stage.precision):
            _train(stage, cfg, device, state, batches, apex, run)
        if not all(math.isfinite(v) for v in run.losses):
            run.status, run.reason = "FAIL", "the loss is not finite (NaN/inf): this stage does not train"
    except Exception as exc:  # OOM, a kernel without an image for this GPU, ...: one FAIL, the rest runs
        run.status, run.reason = "FAIL", one_line_error(exc)
        run.timing = None
    finally:
        _release(device)
    return run


def _stage_json(run: StageRun, baseline: StageRun | None, cfg: BenchConfig) -> dict[str, object]:
    s = run.stage
    data: dict[str, object] = {
        "number": s.number,
        "key": s.key,
        "title": s.title,
        "optimizer": s.optimizer,
        "norm": s.norm,
        "precision": s.precision,
        "meaning": s.meaning,
        "compiled": s.compiled,
        "apex_features": list(s.apex_features),
        "status": run.status,
        "reason": run.reason,
        "figure": STAGE_FIGURE,
        "timing": run.timing.to_json() if run.timing else None,
        "params": run.params,
        "peak_mem_bytes": run.peak_mem_bytes,
        "peak_mem_gib": round(run.peak_mem_bytes / 1024**3, 3) if run.peak_mem_bytes is not None else None,
        "tokens_per_s": None,
        "speedup_vs_baseline": None,
        "loss_steps": len(run.losses),
        "loss_first": None,
        "loss_final": None,
        "losses": run.losses,
        "loss_rel_diff_vs_baseline": None,
        "loss_consistent": None,
    }
    if run.status != "OK" or run.timing is None:
        return data
    data["tokens_per_s"] = round(cfg.batch * cfg.seq / (run.timing.median_ms / 1e3), 1)
    data["loss_first"], data["loss_final"] = run.losses[0], run.losses[-1]
    if baseline is not None and baseline.timing is not None:
        data["speedup_vs_baseline"] = round(baseline.timing.median_ms / run.timing.median_ms, 4)
        rel = abs(run.losses[-1] - baseline.losses[-1]) / abs(baseline.losses[-1])
        data["loss_rel_diff_vs_baseline"] = round(rel, 6)
        data["loss_consistent"] = rel <= LOSS_REL_TOL
    return data


def _comparisons(runs: dict[str, StageRun]) -> list[dict[str, object]]:
    out = []
    for apex_key, native_key, what in COMPARISONS:
        a, n = runs.get(apex_key), runs.get(native_key)
        if a is None or n is None:
            continue  # a stage not selected with --stages
        item: dict[str, object] = {
            "what": what,
            "apex_stage": apex_key,
            "native_stage": native_key,
            "figure": STAGE_FIGURE,
            "speedup": None,
            "interval": None,
            "winner": None,
            "verdict": None,
            "comparison": None,
        }
        if a.timing is None or n.timing is None:
            missing = a if a.timing is None else n
            item["status"] = "SKIP"
            item["reason"] = f"stage {missing.stage.number} is {missing.status} (see its row)"
        else:
            # stages run one after the other (each builds its own model), so the steps are not interleaved
            v = timing_stats.decide_independent(
                STAGE_FIGURE, apex_key, native_key, a.timing.samples, n.timing.samples
            )
            item.update(
                status="OK",
                reason="",
                speedup=round(v.ratio, 4),
                interval=[round(v.interval[0], 4), round(v.interval[1], 4)],
                winner=v.winner,
                verdict=timing_stats.loop_phrase(v, "per training step"),
                comparison=v.to_json(),
            )
        out.append(item)
    return out


def run_stages(
    cfg: BenchConfig, device: torch.device, apex: dict[str, ApexPart], log: Callable[[str], None]
) -> dict[str, object]:
    """Run the selected stages in order; returns {"baseline", "stages": [...], "comparisons": [...]}."""
    selected = [stage_by_key(k) for k in cfg.stages]
    if not selected:
        return {"baseline": None, "loss_rel_tol": LOSS_REL_TOL, "stages": [], "comparisons": []}
    state = initial_state(cfg)
    batches = make_batches(cfg, device)
    runs: dict[str, StageRun] = {}
    for i, stage in enumerate(selected, 1):
        run = run_stage(stage, cfg, device, state, batches, apex)
        runs[stage.key] = run
        log(_progress_line(i, len(selected), run))
    # the speedup baseline is stage 1 when it ran, else the first stage that did
    ran = [r for r in runs.values() if r.status == "OK"]
    first = runs.get("adam-fp32")
    baseline = first if first is not None and first.status == "OK" else (ran[0] if ran else None)
    return {
        "baseline": baseline.stage.key if baseline else None,
        "loss_rel_tol": LOSS_REL_TOL,
        "stages": [_stage_json(r, baseline, cfg) for r in runs.values()],
        "comparisons": _comparisons(runs),
    }


def _progress_line(i: int, total: int, run: StageRun) -> str:
    head = f"[stage {i}/{total}] {run.stage.number}. {run.stage.title}:"
    if run.status != "OK" or run.timing is None:
        return f"{head} {run.status} ({run.reason})"
    t = run.timing
    mem = f", peak {run.peak_mem_bytes / 1024**3:.2f} GiB" if run.peak_mem_bytes is not None else ""
    return (
        f"{head} {t.median_ms:.2f} ms/iter (p10 {t.p10_ms:.2f}, p90 {t.p90_ms:.2f}){mem}, "
        f"loss {run.losses[0]:.4f} -> {run.losses[-1]:.4f} after {len(run.losses)} steps"
    )
