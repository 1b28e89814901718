"""The names a cell gives images: its base images (references docker accepts), its tag (written, or the
cell id made from its values: apex-<ref>-torch<v>-cu<v>-py<v>-<os>[-<variant>]) and the variant suffix
that says how it differs from the defaults. Each adds its problems to `r`.
"""

from __future__ import annotations

import re

from toolchain.spec.apex_fields import extra_flag_names
from toolchain.spec.cell_fields import TAG_MAX, TAG_RE
from toolchain.spec.cell_id import CellId
from toolchain.spec.cell_values import CellValues
from verify.domain.arch import Arch, tag_suffix
from verify.domain.commit import short_ref
from verify.runtime.messages import shown


def check_image_ref(r: CellValues, key: str, ref: str | None) -> None:
    """base_devel / base_runtime, written or derived from the facts: an image reference docker accepts."""
    r.grammar_ok(key, ref)


def check_tag(r: CellValues) -> str | None:
    """An explicit tag, if it is one docker accepts (else a problem and None)."""
    explicit = r.text("tag")
    if explicit is None or TAG_RE.match(explicit):
        return explicit
    bad = sorted({ch for ch in explicit if not re.match(r"[A-Za-z0-9_.-]", ch)})
    why = f"has characters {''.join(bad)!r} a docker tag cannot hold" if bad else "is not a valid docker tag"
    if len(explicit) > TAG_MAX:
        why = f"is {len(explicit)} characters long (docker allows {TAG_MAX})"
    r.problem(
        f"tag {shown(explicit)} {why}",
        f"use only letters, digits, '_', '.', '-', at most {TAG_MAX} characters, not starting with '.' or '-'",
    )
    return None


def check_ref_fits_tag(r: CellValues, ref: str) -> None:
    """Without an explicit tag, the ref (or its short sha) becomes part of the image tag."""
    short = short_ref(ref)
    if r.missing("tag") and not re.fullmatch(r"[A-Za-z0-9_.-]+", short):
        r.problem(
            f"apex_ref {shown(ref)} cannot be part of an image tag (only letters, digits, '_', '.', '-')",
            f"use the commit sha as apex_ref, or set {r.how('tag', 'my-tag', like='apex_ref')}",
        )


def variant_of(
    r: CellValues,
    archs: list[Arch],
    default_archs: list[Arch],
    extras: list[str],
    flags: list[str],
    gcc: str | None,
    os_name: str | None,
) -> str:
    parts: list[str] = []
    if archs != default_archs:
        parts.append(tag_suffix(archs))
    if extras:
        parts.append("ext." + ".".join(sorted(extras)))
    core = list(r.facts.apex_core_flags)
    base_flags = [f for f in flags if f not in {extra_flag_names()[e] for e in extras}]
    if sorted(base_flags) != sorted(core):
        parts.append("flags." + ".".join(f.removeprefix("APEX_").lower() for f in sorted(base_flags)))
    os_facts = r.facts.os.get(os_name or "")
    if r.explicit("gcc") and gcc and os_facts is not None and gcc != os_facts.gcc_default:
        parts.append(f"gcc{gcc}")
    return "-".join(parts)


def make_cell_id(
    r: CellValues,
    explicit: str | None,
    apex_ref: str | None,
    torch: str,
    cuda: str,
    python: str | None,
    os_name: str | None,
    variant: str,
) -> CellId | str | None:
    """The explicit tag (already checked), else the id made from the cell's values (toolchain/spec/cell_id.py),
    as its record; None (with the problem recorded) when that id is no valid tag."""
    if explicit is not None:
        return explicit
    made = CellId.for_apex(apex_ref or "", torch, cuda, python or "None", os_name or "None", variant)
    cell_id = str(made)
    if not TAG_RE.match(cell_id):
        r.problem(
            f"the image tag {shown(cell_id)} would be invalid",
            f"set {r.how('tag', 'a-short-tag')} with letters, digits, '_', '.', '-'",
        )
        return None
    return made
