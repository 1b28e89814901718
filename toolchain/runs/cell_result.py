"""The per-cell result: out/cells/<cell id>/result.json and each entry of out/matrix-report.json.

One frozen record shared by every writer (the run loop, `build.py pull`) and reader (the run loop's
summary and exit code, the matrix report). The build and verify parts stay plain JSON objects: their
fields are checked where they are read (toolchain/runs/matrix_report.py's shapes).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

RESULT_VERSION = "1"


class CellStatus(str, enum.Enum):
    """Where a cell stands; the value is what result.json holds."""

    PENDING = "pending"
    BUILDING = "building"
    BUILT = "built"
    VERIFIED = "verified"
    BUILD_FAILED = "build_failed"
    VERIFY_FAILED = "verify_failed"
    ENVIRONMENT_UNAVAILABLE = "environment_unavailable"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    SKIPPED = "skipped"
    NOT_RUN = "not_run"

    @property
    def failed(self) -> bool:
        """Counts as a failure of the run (exit 1)."""
        return self in _FAILED

    @property
    def placeholder(self) -> bool:
        """This run did not finish the cell: never worth more than another run's finished result."""
        return self in _PLACEHOLDERS


_FAILED = frozenset({CellStatus.BUILD_FAILED, CellStatus.VERIFY_FAILED, CellStatus.ERROR, CellStatus.INTERRUPTED})
_PLACEHOLDERS = frozenset({CellStatus.PENDING, CellStatus.NOT_RUN, CellStatus.INTERRUPTED})


@dataclasses.dataclass(frozen=True)
class CellResult:
    id: str
    name: str
    run_id: str | None
    cell: dict[str, Any]
    status: CellStatus
    build: dict[str, Any] | None = None
    verify: dict[str, Any] | None = None
    started_at: str | None = None
    finished_at: str | None = None

    def replace(self, **changes: Any) -> CellResult:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"result_version": RESULT_VERSION, "id": self.id, "name": self.name,
                                "run_id": self.run_id, "cell": self.cell, "status": self.status.value}
        if self.started_at is not None:
            data["started_at"] = self.started_at
        data.update(finished_at=self.finished_at, build=self.build, verify=self.verify)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellResult:
        """A result already checked against the matrix report's ENTRY_SHAPE; an unknown status is an error."""
        return cls(id=data["id"], name=data["name"], run_id=data.get("run_id"), cell=data.get("cell") or {},
                   status=CellStatus(data["status"]), build=data.get("build"), verify=data.get("verify"),
                   started_at=data.get("started_at"), finished_at=data.get("finished_at"))
