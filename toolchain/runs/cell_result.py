"""The per-cell result: out/cells/<cell id>/result.json and each entry of out/matrix-report.json.

One frozen record shared by every writer (the run loop, `build.py pull`) and reader (the run loop's
summary and exit code, the matrix report), its parts typed too: the cell as the run resolved it
(CellFields), how the build went (BuildRecord) and how verify went (VerifyRecord). Each is written by
its to_json and read by its from_json, after `read` has checked the decoded file against RESULT_SHAPE
(declared here, beside the records it guards). A build or verify field that is None is not written:
every reader takes an absent key and a null alike.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from verify.runtime import field_types as ft
from verify.runtime.messages import shown

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

    @property
    def ok(self) -> bool:
        """A cell the matrix report counts as ok."""
        return self in (CellStatus.BUILT, CellStatus.VERIFIED)


_FAILED = frozenset(
    {CellStatus.BUILD_FAILED, CellStatus.VERIFY_FAILED, CellStatus.ERROR, CellStatus.INTERRUPTED}
)
_PLACEHOLDERS = frozenset({CellStatus.PENDING, CellStatus.NOT_RUN, CellStatus.INTERRUPTED})
_STATUSES = tuple(s.value for s in CellStatus)


def _json_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {(k.value if isinstance(k, enum.Enum) else k): _json_value(v) for k, v in value.items()}
    return value


def _present(record: Any) -> dict[str, object]:
    """The record's fields that are set (not None), in declaration order."""
    return {
        f.name: _json_value(getattr(record, f.name))
        for f in dataclasses.fields(record)
        if getattr(record, f.name) is not None
    }


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The set keys of a decoded object that `cls` has a field for; a newer writer's other keys are not
    read (every field a reader uses is typed here)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names and v is not None}


@dataclasses.dataclass(frozen=True)
class CellFields:
    """The cell as the run resolved it (toolchain/spec/cell.Cell.to_json): the fields the matrix report
    reads, typed; every other key kept as written, in its place (`data`)."""

    cuda: str = ""
    torch: str = ""
    python: str = ""
    os: str = ""
    archs: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    data: Mapping[str, object] = dataclasses.field(default_factory=dict, repr=False)

    _TYPED = ("cuda", "torch", "python", "os", "archs", "extras")

    def __post_init__(self) -> None:  # made from its fields, it holds them in `data` too: one equality
        object.__setattr__(self, "data", self.to_json())

    def to_json(self) -> dict[str, object]:
        typed = {
            name: _json_value(getattr(self, name))
            for name in self._TYPED
            if name in self.data or getattr(self, name)
        }
        return {**self.data, **typed}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CellFields:
        given: dict[str, Any] = {
            k: (tuple(data[k]) if k in ("archs", "extras") else data[k]) for k in cls._TYPED if k in data
        }
        return cls(**given, data=dict(data))


@dataclasses.dataclass(frozen=True)
class BuildRecord:
    """How a cell's image build went: run_loop's build, the placeholders of a skipped, unavailable or
    interrupted cell, and `build.py pull`'s (the image it pulled: digest, pulled, image_id, signature)."""

    ok: bool = False
    tag: str | None = None
    target: str | None = None
    log_path: str | None = None
    ccache_carried: Mapping[str, object] | None = None  # --ccache-dir: the directory before and after
    stage_failed: str | None = None
    step_failed: str | None = None
    log_tail: tuple[str, ...] | None = None
    duration_s: float | None = None
    summary: str | None = None  # the log line that says why it failed
    status: CellStatus | None = (
        None  # the cell's status when it is not build_failed (environment_unavailable, error)
    )
    error: str | None = None
    exit_code: int | None = None
    interrupted: bool | None = None
    digest: str | None = None
    pulled: bool | None = None
    image_id: str | None = None
    signature: Mapping[str, object] | None = None

    def replace(self, **changes: Any) -> BuildRecord:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, object]:
        return _present(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BuildRecord:
        given = _known(cls, data)
        if "log_tail" in given:
            given["log_tail"] = tuple(given["log_tail"])
        if "status" in given:
            given["status"] = CellStatus(given["status"])
        return cls(**given)


@dataclasses.dataclass(frozen=True)
class VerifyRecord:
    """How verify went for a cell: run_loop's container verify, the build's gate report (--verify none) or
    `build.py pull`'s; verdict, mode and summary are the report's own (verify.report.VerifyReport)."""

    mode_requested: str | None = None  # auto, require, none
    out_dir: str | None = None
    source: str | None = None  # the gate's: where the report came from
    exit_code: int | None = None
    # where the verify report was written, as the writer named it (relative to the directory the run was
    # started in, or absolute); `build.py report` reads it there
    report_path: str | None = None
    verdict: str | None = None
    mode: str | None = None
    summary: Mapping[str, int] | None = None  # check counts by status word (PASS, FAIL, ...)
    error: str | None = None
    status: CellStatus | None = None

    def replace(self, **changes: Any) -> VerifyRecord:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, object]:
        return _present(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VerifyRecord:
        given = _known(cls, data)
        if "status" in given:
            given["status"] = CellStatus(given["status"])
        if "summary" in given:
            given["summary"] = dict(given["summary"])
        return cls(**given)


@dataclasses.dataclass(frozen=True)
class CellResult:
    id: str
    name: str
    run_id: str | None
    cell: CellFields
    status: CellStatus
    build: BuildRecord | None = None
    verify: VerifyRecord | None = None
    started_at: str | None = None
    finished_at: str | None = None

    def replace(self, **changes: Any) -> CellResult:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "result_version": RESULT_VERSION,
            "id": self.id,
            "name": self.name,
            "run_id": self.run_id,
            "cell": self.cell.to_json(),
            "status": self.status.value,
        }
        if self.started_at is not None:
            data["started_at"] = self.started_at
        data.update(
            finished_at=self.finished_at,
            build=self.build.to_json() if self.build else None,
            verify=self.verify.to_json() if self.verify else None,
        )
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CellResult:
        """A result already checked by problems() (read() does both); an unknown status is an error."""
        build, verify = data.get("build"), data.get("verify")
        return cls(
            id=data["id"],
            name=data["name"],
            run_id=data.get("run_id"),
            cell=CellFields.from_json(data.get("cell") or {}),
            status=CellStatus(data["status"]),
            build=BuildRecord.from_json(build) if build is not None else None,
            verify=VerifyRecord.from_json(verify) if verify is not None else None,
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
        )


# The fields the records above type, as the decoded file must hold them; other keys are allowed (within the
# checker's limits) and not read.
_TEXT = ft.Nullable(ft.STR)
_STATUS = ft.Nullable(
    ft.Str(pattern="|".join(_STATUSES), means=f"a cell status (one of {', '.join(_STATUSES)})")
)
_BUILD = ft.Record(
    {
        "ok": ft.BOOL,
        "tag": _TEXT,
        "target": _TEXT,
        "log_path": _TEXT,
        "ccache_carried": ft.Nullable(ft.MapOf(ft.ANY)),
        "stage_failed": _TEXT,
        "step_failed": _TEXT,
        "log_tail": ft.Nullable(ft.ListOf(ft.STR)),
        "duration_s": ft.Nullable(ft.FLOAT),
        "summary": _TEXT,
        "status": _STATUS,
        "error": _TEXT,
        "exit_code": ft.Nullable(ft.INT),
        "interrupted": ft.Nullable(ft.BOOL),
        "digest": _TEXT,
        "pulled": ft.Nullable(ft.BOOL),
        "image_id": _TEXT,
        "signature": ft.Nullable(ft.MapOf(ft.ANY)),
    }
)
_VERIFY = ft.Record(
    {
        "mode_requested": _TEXT,
        "out_dir": _TEXT,
        "source": _TEXT,
        "exit_code": ft.Nullable(ft.INT),
        "report_path": _TEXT,
        "verdict": _TEXT,
        "mode": _TEXT,
        "summary": ft.Nullable(ft.MapOf(ft.INT)),
        "error": _TEXT,
        "status": _STATUS,
    }
)
_CELL = ft.Record(
    {
        "cuda": ft.STR,
        "torch": ft.STR,
        "python": ft.STR,
        "os": ft.STR,
        "archs": ft.ListOf(ft.STR),
        "extras": ft.ListOf(ft.STR),
    }
)
RESULT_SHAPE = ft.Record(
    {
        "id": ft.STR,
        "name": ft.STR,
        "status": ft.STR,
        "run_id": _TEXT,
        "cell": _CELL,
        "build": ft.Nullable(_BUILD),
        "verify": ft.Nullable(_VERIFY),
        "started_at": _TEXT,
        "finished_at": _TEXT,
    },
    required=("id", "name", "status"),
)


def problems(entry: Any, where: str) -> list[ft.FieldProblem]:
    """What keeps a decoded result (or overview entry) from being a CellResult: a field of the wrong type,
    or a status that is none of CellStatus's."""
    found = ft.check(entry, RESULT_SHAPE, where)
    if not found and entry["status"] not in _STATUSES:
        found = [
            ft.FieldProblem(
                f"{where}.status",
                f"{shown(entry['status'])} is not a cell status (one of {', '.join(_STATUSES)})",
            )
        ]
    return found


def read(entry: Any, where: str) -> CellResult | list[ft.FieldProblem]:
    """The one reader of a decoded result: the record, or every problem found (nothing half-read)."""
    found = problems(entry, where)
    return found if found else CellResult.from_json(entry)
