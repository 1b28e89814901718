"""The unit every verify layer produces: one named check with a status and a reason."""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verify.domain.report_json import CheckJSON


class Status(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    WARN = "WARN"
    SKIP = "SKIP"
    INFO = "INFO"


LAYERS = (
    "environment",
    "identity",
    "extensions",
    "arch",
    "expectations",
    "parity",
    "compile",
    "timing",
    "large",
    "distributed",
)


@dataclasses.dataclass
class Check:
    layer: str  # one of LAYERS
    name: str  # stable id inside the layer, e.g. "amp_C" or "fused_adam.adamw.bf16"
    status: Status
    summary: str  # one line a human reads in a CI log: what happened and, on FAIL, the fix
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def id(self) -> str:
        return f"{self.layer}.{self.name}"

    def to_json(self) -> CheckJSON:
        return {
            "id": self.id,
            "layer": self.layer,
            "name": self.name,
            "status": self.status.value,
            "summary": self.summary,
            "details": self.details,
            "duration_s": round(self.duration_s, 4),
        }

    @classmethod
    def from_json(cls, data: CheckJSON) -> Check:
        return cls(
            layer=data["layer"],
            name=data["name"],
            status=Status(data["status"]),
            summary=data["summary"],
            details=data.get("details", {}),
            duration_s=data.get("duration_s", 0.0),
        )
