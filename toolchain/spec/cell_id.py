"""The cell id as a value: `apex-<ref>-torch<v>-cu<v>-py<v>-<os>[-<variant>]` for an image with Apex, and
`<target>-torch<v>-cu<v>|cpu-py<v>-<os>[-gcc<N>]` for a target without it (toolchain/spec/targets.py). One
record renders it (str); the Cell carries the record (`made_id`), so nothing reads an id back from its text.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

from toolchain.spec.cell_fields import TAG_MAX
from verify.domain.commit import short_ref

CPU = "cpu"  # where the CUDA version would be, for a CPU-only torch


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

    def without_apex(self, target: str, cuda: str, variant: str) -> CellId:
        """The id of `target` built from the same stack: no Apex ref, and of the variant only the parts that
        name the devel layers (a GCC choice); archs, extras and flags describe Apex."""
        gcc = "-".join(part for part in variant.split("-") if re.fullmatch(r"gcc[0-9]+", part))
        return dataclasses.replace(self, apex=None, target=target, cuda=cuda, variant=gcc)
