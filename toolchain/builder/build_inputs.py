"""What goes into one build, checked before anything runs: the Apex source tree, the APEX_* flags, the
arch list, and the modules those flags build at this ref (build_outputs.py reads what came out).

Standard library only: it runs inside the build image (Python 3.10).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from pathlib import Path

from toolchain.builder import apex_setup
from toolchain.builder.request import BuildRequest
from toolchain.errors import UsageError
from verify.domain.apex_tree import check_apex_tree
from verify.domain.arch import Arch, parse_arch_list, split_arch_list
from verify.domain.extras import extra_flag
from verify.domain.problem import ValueProblem
from verify.layers import module_map
from verify.runtime.messages import did_you_mean, shown


@dataclasses.dataclass(frozen=True)
class BuildInputs:
    """The checked inputs: the source tree, how its setup.py takes switches, the flags and the archs."""

    src: Path
    setup: apex_setup.SetupPy
    flags: dict[str, str]
    archs: (
        tuple[Arch, ...] | None
    )  # None: no TORCH_CUDA_ARCH_LIST (a Python-only build, or --naive without --archs)

    @classmethod
    def of(
        cls,
        src: Path,
        flags: dict[str, str],
        archs: Sequence[Arch] | None = None,
        setup: apex_setup.SetupPy | None = None,
    ) -> BuildInputs:
        return cls(
            src=src,
            setup=setup or apex_setup.read(src),
            flags=dict(flags),
            archs=tuple(archs) if archs else None,
        )

    @property
    def expected(self) -> list[str]:
        return expected_modules(self.setup, self.flags)[0]

    @property
    def absent(self) -> list[str]:
        return expected_modules(self.setup, self.flags)[1]

    @property
    def switches(self) -> list[str]:
        return apex_setup.flag_switches(self.setup, self.flags)


def resolve(request: BuildRequest) -> BuildInputs:
    """Every check of the request's own values, in the order a user reads them: the source tree, its
    setup.py, the flags, the numbers, the archs. Raises UsageError (exit 2) naming the option."""
    src = request.src_dir
    check_apex_source(src)
    setup = apex_setup.read(src)
    apex_setup.check_style(setup, src)
    flags = parse_flags(request.flags, request.extras)
    apex_setup.check_flags(setup, flags, src)
    expected, _ = expected_modules(setup, flags)
    needs_cuda = any(module_map.module(m).cuda for m in expected)
    for name, value in (
        ("--jobs", request.jobs),
        ("--nvcc-threads", request.nvcc_threads),
        ("--memory-gib", request.memory_gib),
    ):
        if value is not None and not value >= 1:
            raise UsageError(f"{name} {value}: must be 1 or more")
    arch_text = request.archs or os.environ.get("TORCH_CUDA_ARCH_LIST")
    if arch_text:  # --naive too: the comparison is for the same archs
        archs = parse_archs(arch_text)
    elif needs_cuda and not request.naive:
        raise UsageError(
            "--archs is required for CUDA extensions (setup.py would guess 7+ archs); e.g. --archs 9.0",
        )
    else:
        archs = None
    return BuildInputs.of(src, flags, archs, setup)


def parse_flags(text: str | None, extras: str | None) -> dict[str, str]:
    """`--flags "APEX_CPP_EXT=1,APEX_XENTROPY=1"` (comma or space separated, `=1` optional, `none`
    for a Python-only build) plus `--extras xentropy,fast_layer_norm` (contrib flags). No --flags at all
    is exit 2: the default set is a fact of compat.toml, which the caller hands in (request.parse)."""
    known = module_map.known_flags()
    flags: dict[str, str] = {}
    if text is None:
        raise UsageError(
            "--flags not given, and the builder run directly has no default set of Apex flags; pass --flags "
            "(e.g. --flags none for a Python-only build), or run it through build.py wheel, which fills in "
            "the core flags from toolchain/data/compat.toml",
        )
    if text.strip().lower() not in ("none", ""):
        for item in re.split(r"[,\s]+", text.strip()):
            key, _, value = item.partition("=")
            value = value or "1"
            if value not in ("0", "1"):
                raise UsageError(f"--flags: {shown(item)} must be KEY=1 or KEY=0")
            flags[_known_flag(key, known, "--flags")] = value
    by_name = module_map.extra_names()  # the grammar `build.py plan --extras` reads ("all", "xentropy")
    for item in re.split(r"[,\s]+", (extras or "").strip()):
        if item:
            try:
                flags[extra_flag(item, by_name)] = "1"
            except ValueProblem as bad:
                raise UsageError(f"--extras: {bad.problem}; {bad.fix}") from None
    return {k: v for k, v in flags.items() if v == "1"}


def _known_flag(key: str, known: tuple[str, ...], option: str) -> str:
    if key in known:
        return key
    hint = did_you_mean(key, known) or f"known flags: {', '.join(known)}"
    raise UsageError(f"{option}: unknown Apex flag {shown(key)}; {hint}")


def parse_archs(text: str) -> tuple[Arch, ...]:
    """`9.0`, `8.0;9.0`, `8.0 9.0+PTX`, `8.0,9.0` -> (Arch(8, 0), Arch(9, 0, ptx=True)), parsed once here and
    carried as such; bad entries exit 2."""
    if not split_arch_list(text):
        raise UsageError(
            "--archs is empty; give compute capabilities such as --archs 9.0 or --archs '8.0;9.0'",
        )
    try:
        return parse_arch_list(text)
    except ValueProblem as bad:
        raise UsageError(f"--archs: {bad.problem}; {bad.fix}") from None


def check_apex_source(src: Path) -> None:
    """--apex-src by the one source-tree rule (verify.domain.apex_tree.check_apex_tree); exit 2 naming the option."""
    try:
        check_apex_tree(src)
    except ValueProblem as bad:
        raise UsageError(f"--apex-src {src}: {bad}") from None


def expected_modules(setup: apex_setup.SetupPy, flags: dict[str, str]) -> tuple[list[str], list[str]]:
    """(modules the flags build at this ref, modules of those flags that this setup.py does not have):
    older tags lack some core modules (fused_rotary_positional_embedding is there from 24.02)."""
    expected: list[str] = []
    absent: list[str] = []
    for name in module_map.modules_for_flags(flags):
        (expected if name in setup.modules(module_map.module(name).switch) else absent).append(name)
    return expected, absent
