"""Compare a fused result with its torch reference: NaN/Inf never pass, tolerances come per dtype.

Everything is measured in fp32 on the tensors' own device, then reduced to a few numbers a report
can carry: how many elements are off, the worst one and where it is, and how much of the tolerance
the worst element used (tol_used <= 1 passes).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from verify.gpu.tolerances import Tolerance


@dataclasses.dataclass
class Comparison:
    what: str
    ok: bool
    numel: int
    mismatched: int = 0
    nonfinite_actual: int = 0
    nonfinite_expected: int = 0
    max_abs: float = 0.0
    tol_used: float = 0.0  # worst |diff| / (atol + rtol*|expected|) over finite elements
    worst: dict[str, Any] = dataclasses.field(default_factory=dict)
    tol: Tolerance | None = None
    problem: str = ""  # set when the comparison could not even be made (shape/dtype)

    def describe(self) -> str:
        """One line: what is wrong (or how close it came)."""
        if self.problem:
            return f"{self.what}: {self.problem}"
        if self.nonfinite_actual:
            return f"{self.what}: {self.nonfinite_actual} NaN/Inf element(s) in the fused result"
        if self.nonfinite_expected:
            return f"{self.what}: {self.nonfinite_expected} NaN/Inf element(s) in the torch reference"
        tol = f"atol {self.tol.atol:g} rtol {self.tol.rtol:g}" if self.tol else ""
        if not self.ok:
            w = self.worst
            return (
                f"{self.what}: {self.mismatched}/{self.numel} elements off ({tol}); worst at {w.get('index')}: "
                f"{w.get('actual'):.6g} vs {w.get('expected'):.6g}, {self.tol_used:.3g}x the tolerance"
            )
        return f"{self.what}: max |diff| {self.max_abs:.3g}, {self.tol_used:.2f} of tolerance ({tol})"

    def to_json(self) -> dict[str, object]:
        data = {
            "what": self.what,
            "ok": self.ok,
            "numel": self.numel,
            "mismatched": self.mismatched,
            "nonfinite_actual": self.nonfinite_actual,
            "nonfinite_expected": self.nonfinite_expected,
            "max_abs": json_number(self.max_abs),
            "tol_used": json_number(self.tol_used),
        }
        if self.worst:
            data["worst"] = {k: json_number(v) for k, v in self.worst.items()}
        if self.tol:
            data["tol"] = self.tol.to_json()
        if self.problem:
            data["problem"] = self.problem
        return data


def json_number(value: Any) -> Any:
    """JSON has no NaN/Inf: name them instead of writing an invalid report."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def compare(
    what: str, actual: torch.Tensor | None, expected: torch.Tensor | None, tol: Tolerance
) -> Comparison:
    if actual is None or expected is None:  # a .grad that backward never filled: a failure, not a crash
        side = "fused result" if actual is None else "torch reference"
        return Comparison(
            what, False, 0, tol=tol, problem=f"no tensor (None) for the {side}: no gradient reached it"
        )
    if tuple(actual.shape) != tuple(expected.shape):
        return Comparison(
            what,
            False,
            actual.numel(),
            tol=tol,
            problem=f"shape {tuple(actual.shape)} vs reference {tuple(expected.shape)}",
        )
    a = actual.detach().to(torch.float32)
    e = expected.detach().to(torch.float32).to(a.device)
    numel = a.numel()
    finite_a = torch.isfinite(a)
    finite_e = torch.isfinite(e)
    nonfinite_a = int((~finite_a).sum().item())
    nonfinite_e = int((~finite_e).sum().item())
    both = finite_a & finite_e
    diff = torch.where(both, (a - e).abs(), torch.zeros_like(a))
    allowed = tol.atol + tol.rtol * torch.where(both, e.abs(), torch.zeros_like(e))
    used = torch.where(diff == 0, torch.zeros_like(diff), diff / allowed)  # 0/0 (atol 0) is a match, not NaN
    bad = (used > 1.0) | ~both
    mismatched = int(bad.sum().item())
    result = Comparison(
        what,
        ok=mismatched == 0 and numel > 0,
        numel=numel,
        mismatched=mismatched,
        nonfinite_actual=nonfinite_a,
        nonfinite_expected=nonfinite_e,
        tol=tol,
    )
    if numel == 0:
        result.problem = "empty tensor: nothing was compared"
        return result
    result.max_abs = float(diff.max().item())
    result.tol_used = float(used.max().item())
    # the worst element: the first non-finite one, else the one using most of its tolerance
    flat = (
        int(torch.argmax((~both).to(torch.float32)).item())
        if not bool(both.all())
        else int(used.argmax().item())
    )
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) if a.dim() else ()
    result.worst = {
        "index": list(index),
        "actual": float(a.reshape(-1)[flat].item()),
        "expected": float(e.reshape(-1)[flat].item()),
    }
    return result


def relative_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """||actual - expected|| / ||expected||, in fp32; inf when expected is all zero and actual is not."""
    a = actual.detach().to(torch.float32)
    e = expected.detach().to(torch.float32).to(a.device)
    num = float(torch.linalg.vector_norm(a - e).item())
    den = float(torch.linalg.vector_norm(e).item())
    if not (math.isfinite(num) and math.isfinite(den)):
        return float("nan")
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def all_finite(tensors: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t.detach()).all().item()) for t in tensors)
