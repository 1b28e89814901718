"""Which Apex refs compile against which torch and CUDA (compat.toml [[apex.builds]]), and which
extension modules a ref has (the module map's since/until): the checks that refuse an impossible
Apex ref x torch x CUDA cell before anything is fetched or built.

A ref is known here only by its name: an NGC-style tag (YY.MM[.NN]) or a listed commit. A branch or an
unlisted commit matches nothing; the builder then reads the tree's setup.py itself (toolchain.builder.apex_setup).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from toolchain.spec import compat as compat_mod
from toolchain.spec import compat_shape
from toolchain.spec.compat import version_key
from toolchain.spec.toml_loader import load_toml
from verify.domain.commit import is_commit_sha
from verify.layers import module_map
from verify.runtime import input_files


@dataclasses.dataclass(frozen=True)
class BuildRow:
    status: str  # compiles | fails
    refs: tuple[str, ...]
    flags: tuple[str, ...]  # empty: any build
    torch_min: str | None
    torch_max: str | None
    cuda_min: str | None
    cuda_max: str | None
    evidence: str
    error: str | None = None
    cause: str | None = None
    fix_ref: str | None = None

    def matches_ref(self, ref: str) -> bool:
        return any(_ref_in(ref, spec) for spec in self.refs)

    def holds(self, ref: str, torch: str, cuda: str, flags: list[str]) -> bool:
        if not self.matches_ref(ref):
            return False
        if self.flags and not set(self.flags) & set(flags):
            return False
        return _within(compat_mod.minor_of(torch), self.torch_min, self.torch_max) and _within(
            cuda, self.cuda_min, self.cuda_max
        )

    def describe_refs(self) -> str:
        return ", ".join(f"tags {s.replace('..', '-')}" if ".." in s else s[:12] for s in self.refs)


def _within(value: str, low: str | None, high: str | None) -> bool:
    key = version_key(value)
    return (low is None or key >= version_key(low)) and (high is None or key <= version_key(high))


def _ref_in(ref: str, spec: str) -> bool:
    if ".." in spec:
        key, (low, high) = module_map.tag_key(ref), spec.split("..", 1)
        return key is not None and (module_map.tag_key(low) or ()) <= key <= (module_map.tag_key(high) or ())
    if is_commit_sha(spec) and is_commit_sha(ref.lower()):
        return spec.startswith(ref.lower())
    return ref == spec


def rows(facts: compat_mod.Compat | None = None) -> tuple[BuildRow, ...]:
    """The [[apex.builds]] rows of these facts' file (default: the live facts)."""
    return _rows(facts.source if facts is not None else compat_mod.DATA)


@functools.lru_cache(maxsize=4)
def _rows(path: Path) -> tuple[BuildRow, ...]:
    return tuple(
        BuildRow(
            status=row["status"],
            refs=tuple(row["refs"]),
            flags=tuple(row.get("flags", ())),
            torch_min=row.get("torch_min"),
            torch_max=row.get("torch_max"),
            cuda_min=row.get("cuda_min"),
            cuda_max=row.get("cuda_max"),
            evidence=row["evidence"],
            error=row.get("error"),
            cause=row.get("cause"),
            fix_ref=row.get("fix_ref"),
        )
        for row in compat_shape.check(load_toml(path, input_files.FACTS), path)["apex"].get("builds", [])
    )


def known_failure(
    ref: str, torch: str, cuda: str, flags: list[str], facts: compat_mod.Compat | None = None
) -> BuildRow | None:
    """The `fails` row this cell matches, if any."""
    return next(
        (row for row in rows(facts) if row.status == "fails" and row.holds(ref, torch, cuda, flags)), None
    )


def shown_to_compile(ref: str, facts: compat_mod.Compat | None = None) -> list[BuildRow]:
    return [row for row in rows(facts) if row.status == "compiles" and row.matches_ref(ref)]


def absent_modules(ref: str, flags: list[str], default_ref: str) -> list[tuple[str, str]]:
    """(flag, why) for each requested flag none of whose modules exists at this ref: known for NGC-style
    tags (the module map's since/until) and for the pinned default commit (upstream HEAD of the map)."""
    at_head = is_commit_sha(ref.lower()) and default_ref.startswith(ref.lower())
    if module_map.tag_key(ref) is None and not at_head:
        return []
    found = []
    for flag in flags:
        mods = [m for m in module_map.modules() if m.flag == flag]
        present = [m for m in mods if (m.until is None if at_head else module_map.in_tag(m.name, ref))]
        if mods and not present:
            why = "; ".join(
                f"{m.name} is in tags {m.since or '22.03'}-{m.until}"
                + (f", removed in {m.removed}" if m.removed else "")
                if m.until
                else f"{m.name} first appears in tag {m.since}"
                for m in mods
            )
            found.append((flag, why))
    return found
