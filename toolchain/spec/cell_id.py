"""The cell id as a value: `apex-<ref>-torch<v>-cu<v>-py<v>-<os>[-<variant>]` for an image with Apex, and
`<target>-torch<v>-cu<v>|cpu-py<v>-<os>[-gcc<N>]` for a target without it (toolchain/spec/targets.py). One
record renders it (str) and reads it back (parse), so the two forms cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

from toolchain.spec.cell_fields import TAG_MAX
from verify.domain.commit import short_ref

CPU = "cpu"  # where the CUDA version would be, for a CPU-only torch
# A variant's parts (cell_naming.variant_of) each start like this; the hashed form when it is too long.
_VARIANT_PART = re.compile(r"sm[0-9].*|ext\..+|flags\..+|gcc[0-9]+|v[0-9a-f]{10}")
_ID = re.compile(
    r"(?:apex-(?P<apex>.+?)|(?P<target>[a-z][a-z0-9-]*?))"
    r"-torch(?P<torch>[^-]+)-(?:cu(?P<cuda>[^-]+)|(?P<cpu>cpu))-py(?P<python>[^-]+)-(?P<tail>.+)"
)


@dataclasses.dataclass(frozen=True)
class CellId:
    """One cell's id, field by field. `apex` is the ref as the id names it (a commit's short sha, or a
    tag); None for a target without Apex, which `target` names instead. `os` is the OS with the platform
    suffix ('ubuntu24.04-arm64'); `variant` the suffix as written (possibly its hashed 'v<10 hex>' form)."""

    torch: str
    cuda: str  # '13.0', or CPU
    python: str
    os: str
    apex: str | None = None
    target: str = ""
    variant: str = ""

    @classmethod
    def for_apex(cls, ref: str, torch: str, cuda: str, python: str, os: str, variant: str = "") -> CellId:
        """The id of a cell's Apex image; a variant that would make the tag too long goes in as its hash
        (the full variant is in the labels and the plan)."""
        cell = cls(torch=torch, cuda=cuda, python=python, os=os, apex=short_ref(ref), variant=variant)
        if variant and len(str(cell)) > TAG_MAX:
            cell = dataclasses.replace(cell, variant=f"v{hashlib.sha256(variant.encode()).hexdigest()[:10]}")
        return cell

    def __str__(self) -> str:
        head = f"apex-{self.apex}" if self.apex is not None else self.target
        cuda = CPU if self.cuda == CPU else f"cu{self.cuda}"
        text = f"{head}-torch{self.torch}-{cuda}-py{self.python}-{self.os}"
        return f"{text}-{self.variant}" if self.variant else text

    @classmethod
    def parse(cls, text: str) -> CellId | None:
        """The record an id was made from; None for text that is no automatic id (an explicit --tag)."""
        match = _ID.fullmatch(text)
        if not match:
            return None
        parts = match["tail"].split("-")
        at = next((i for i, part in enumerate(parts) if i and _VARIANT_PART.fullmatch(part)), len(parts))
        return cls(
            torch=match["torch"],
            cuda=CPU if match["cpu"] else match["cuda"],
            python=match["python"],
            os="-".join(parts[:at]),
            apex=match["apex"],
            target=match["target"] or "",
            variant="-".join(parts[at:]),
        )

    def without_apex(self, target: str, cuda: str, variant: str) -> CellId:
        """The id of `target` built from the same stack: no Apex ref, and of the variant only the parts that
        name the devel layers (a GCC choice); archs, extras and flags describe Apex."""
        gcc = "-".join(part for part in variant.split("-") if re.fullmatch(r"gcc[0-9]+", part))
        return dataclasses.replace(self, apex=None, target=target, cuda=cuda, variant=gcc)
