"""What an Apex source tree's setup.py speaks, read from its text (never from the ref's name).

- its flag style: `env` (it defines ENV_TO_FLAG and reads APEX_* variables; upstream from tag 25.09) or
  `argv` (it tests `"--cpp_ext" in sys.argv`, ...; every tag 22.03 ... 25.08);
- its switches, and the extension modules each switch's top-level `if` block builds;
- the GPU archs a block hard-codes (`-gencode arch=compute_70,...`) outside any `<` version guard, which an
  nvcc that dropped them rejects (`nvcc fatal : Unsupported gpu architecture 'compute_70'`);
- how it takes its parallelism (APEX_PARALLEL_BUILD, or `--parallel N` on its argv, or not at all).

Standard library only: it runs inside the build image (Python 3.10).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from toolchain.errors import UsageError
from verify.domain.arch import Arch
from verify.layers import module_map
from verify.runtime import input_files

ENV, ARGV, UNKNOWN = "env", "argv", "unknown"

_ENV_TO_FLAG = re.compile(r"^ENV_TO_FLAG\s*=\s*\{(?P<body>.*?)^\}", re.S | re.M)
_PAIR = re.compile(r"""["'](APEX_[A-Z0-9_]+)["']\s*:\s*["'](--[a-z0-9_]+)["']""")
_SWITCH = re.compile(r"""["'](--[a-z0-9_]+)["']""")
_ARGV_TEST = re.compile(r"""["']--(?:cpp|cuda)_ext["']\s+in\s+sys\.argv""")
# CUDAExtension(name="amp_C", ...), CppExtension("apex_C", [...]), name='permutation_search_cuda'
_MODULE = re.compile(r"""(?:\bname\s*=\s*|\b(?:Cpp|CUDA)?Extension\(\s*)["']([A-Za-z_][A-Za-z0-9_]*)["']""")
_COMPUTE = re.compile(r"compute_[0-9]+")  # nvcc's names (verify.domain.arch.Arch.from_nvcc_name reads them)
_ARCH_LOOP = re.compile(r"for\s+(\w+)\s+in\s+\[([\d,\s]+)\]")
# setup.py's own helpers, not extensions
_NOT_MODULES = {"apex", "_nccl_version_getter"}


@dataclasses.dataclass(frozen=True)
class SwitchBlock:
    """One top-level `if` of setup.py that tests switches, e.g. `if has_flag("--cuda_ext", "APEX_CUDA_EXT"):`."""

    switches: tuple[str, ...]
    line: int  # 1-based line of the `if`
    modules: tuple[str, ...]
    # (arch, line): hard-coded `compute_NN` targets not under a `<` guard ("7.0", 361)
    hardcoded_archs: tuple[tuple[str, int], ...]


@dataclasses.dataclass(frozen=True)
class SetupPy:
    path: Path
    style: str  # env | argv | unknown
    evidence: str  # why: "setup.py line 24 defines ENV_TO_FLAG"
    env_vars: tuple[str, ...]  # the APEX_* names of ENV_TO_FLAG (env style)
    blocks: tuple[SwitchBlock, ...]
    parallel: str  # env (APEX_PARALLEL_BUILD) | argv (--parallel N) | none

    def speaks(self, flag: str, switch: str) -> bool:
        """Whether this setup.py builds anything for a flag (APEX_X, read as --x on the argv era)."""
        if self.style == ENV:
            return flag in self.env_vars
        return any(switch in b.switches and b.modules for b in self.blocks)

    def modules(self, switch: str) -> tuple[str, ...]:
        found: list[str] = []
        for block in self.blocks:
            if switch in block.switches:
                found.extend(m for m in block.modules if m not in found)
        return tuple(found)

    def all_modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for b in self.blocks for m in b.modules))

    def dropped_archs(self, switch: str, supported: set[str]) -> list[tuple[str, int]]:
        """Archs the switch's blocks hard-code that are older than every arch this nvcc compiles."""
        if not supported:
            return []
        oldest = min(_arch_key(a) for a in supported)
        return [
            (arch, line)
            for block in self.blocks
            if switch in block.switches
            for arch, line in block.hardcoded_archs
            if _arch_key(arch) < oldest
        ]


def _arch_key(arch: str) -> tuple[int, int]:
    return Arch.parse(arch).capability


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _top_level_blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(start, end) line indexes of every top-level `if` statement, its body included."""
    spans, i = [], 0
    while i < len(lines):
        if lines[i].startswith("if "):
            j = i + 1
            while j < len(lines) and (
                not lines[j].strip() or lines[j][0] in " \t#" or lines[j].startswith(("elif", "else"))
            ):
                j += 1
            spans.append((i, j))
            i = j
        else:
            i += 1
    return spans


def _guarded(lines: list[str], start: int, at: int) -> bool:
    """Whether line `at` sits under an `if ... <` / `else` inside the block (a guard for older toolkits)."""
    level = _indent(lines[at])
    for k in range(at - 1, start, -1):
        text = lines[k].strip()
        if not text or _indent(lines[k]) >= level:
            continue
        level = _indent(lines[k])
        if text.startswith("else") or (text.startswith(("if ", "elif ")) and "<" in text):
            return True
    return False


def _hardcoded(lines: list[str], start: int, end: int) -> tuple[tuple[str, int], ...]:
    found: dict[str, int] = {}
    loops = {m.group(1): m.group(2) for m in _ARCH_LOOP.finditer("\n".join(lines[start:end]))}
    for k in range(start, end):
        line = lines[k]
        names = _COMPUTE.findall(line)
        for var, numbers in loops.items():  # for arch in [70, 75, ...]: f"arch=compute_{arch},..."
            if "compute_{" + var + "}" in line:
                names += ["compute_" + n for n in re.findall(r"[0-9]+", numbers)]
        if names and not _guarded(lines, start, k):
            for arch in filter(None, map(Arch.from_nvcc_name, names)):
                found.setdefault(arch.number, k + 1)
    return tuple(found.items())


def read(src: Path) -> SetupPy:
    """Parse SRC/setup.py (the caller has checked that it exists)."""
    path = src / "setup.py"
    return parse(input_files.read_text_lenient(path, input_files.SOURCE_FILE), path)


def parse(text: str, path: Path) -> SetupPy:
    """A setup.py's text (from a tree, or fetched from upstream by `build.py facts check`); `path` names it
    in the evidence."""
    lines = text.splitlines()
    env_match = _ENV_TO_FLAG.search(text)
    env_vars: tuple[str, ...] = ()
    if env_match:
        env_vars = tuple(var for var, _switch in _PAIR.findall(env_match.group("body")))
        style = ENV
        evidence = f"{path} line {text[: env_match.start()].count(chr(10)) + 1} defines ENV_TO_FLAG (APEX_* variables)"
    else:
        argv_line = next((i for i, line in enumerate(lines, 1) if _ARGV_TEST.search(line)), None)
        if argv_line:
            style, evidence = ARGV, f"{path} line {argv_line} reads '--cpp_ext'/'--cuda_ext' from sys.argv"
        else:
            style, evidence = (
                UNKNOWN,
                f"{path} has no ENV_TO_FLAG and never tests '--cpp_ext' or '--cuda_ext' in sys.argv",
            )
    blocks = []
    for start, end in _top_level_blocks(lines):
        switches = tuple(dict.fromkeys(_SWITCH.findall(lines[start])))
        if not switches or switches == ("--parallel",):
            continue
        body = "\n".join(lines[start:end])
        modules = tuple(dict.fromkeys(m for m in _MODULE.findall(body) if m not in _NOT_MODULES))
        blocks.append(SwitchBlock(switches, start + 1, modules, _hardcoded(lines, start, end)))
    if "APEX_PARALLEL_BUILD" in text:
        parallel = ENV
    elif re.search(r"""["']--parallel["']\s+in\s+sys\.argv""", text):
        parallel = ARGV
    else:
        parallel = "none"
    return SetupPy(path, style, evidence, env_vars, tuple(blocks), parallel)


# ---------------------------------------------------------------- what to pass, and what to refuse


def flag_switches(setup: SetupPy, flags: dict[str, str]) -> list[str]:
    """The argv switches for the flags asked for; APEX_ALL_CONTRIB_EXT becomes every non-core switch that
    builds something at this ref (the argv era has no such switch)."""
    core = {m.flag for m in module_map.modules() if m.kind == "core"}
    switches: list[str] = []
    for flag in flags:
        if flag == module_map.contrib_all_flag():
            switches += [
                module_map.switch_for(f)
                for f in module_map.known_flags()
                if f not in core and f != flag and setup.speaks(f, module_map.switch_for(f))
            ]
        else:
            switches.append(module_map.switch_for(flag))
    return list(dict.fromkeys(switches))


def check_flags(setup: SetupPy, flags: dict[str, str], src: Path) -> None:
    """Every flag asked for must build something at this ref, else exit 2 naming it."""
    for flag in flags:
        if flag == module_map.contrib_all_flag():
            continue
        switch = module_map.switch_for(flag)
        if setup.speaks(flag, switch):
            continue
        mods = [m for m in module_map.modules() if m.flag == flag]
        history = "; ".join(
            f"{m.name}: "
            + (f"first in tag {m.since}" if m.since else "")
            + (f"{', ' if m.since else ''}last in tag {m.until}, removed in {m.removed}" if m.until else "")
            for m in mods
            if m.since or m.until
        )
        spoken = (
            f"ENV_TO_FLAG has no {flag}" if setup.style == ENV else f"no block tests {switch!r} in sys.argv"
        )
        raise UsageError(
            f"{flag} ({switch}): Apex at --apex-src {src} cannot build it: its setup.py reads {describe(setup)} and "
            f"{spoken}{f' ({history})' if history else ''}; drop it from --flags/--extras or use an Apex ref that has it"
        )


def check_archs(
    setup: SetupPy, switches: list[str], supported: set[str], nvcc_release: str, src: Path
) -> None:
    """Refuse (exit 2) a build whose setup.py hard-codes a GPU arch this nvcc no longer compiles: nvcc would
    stop with "Unsupported gpu architecture" minutes into the build."""
    for switch in switches:
        dropped = setup.dropped_archs(switch, supported)
        if dropped:
            arch, line = dropped[0]
            oldest = min(supported, key=_arch_key)
            compute = Arch.parse(arch).compute
            raise UsageError(
                f"--apex-src {src}: setup.py line {line} hard-codes -gencode arch={compute} for "
                f"{switch}, which nvcc {nvcc_release} cannot compile (its oldest arch is {oldest}), so the build would "
                f"fail with \"nvcc fatal : Unsupported gpu architecture '{compute}'\"; build this "
                "Apex ref with an older CUDA toolkit (and a torch built for it), or use a newer Apex ref whose setup.py "
                "does not hard-code it (upstream master); --ignore-hardcoded-archs builds anyway"
            )


def describe(setup: SetupPy) -> str:
    return {ENV: "APEX_* environment variables", ARGV: "argv switches"}.get(
        setup.style, "no known flag style"
    )


def check_style(setup: SetupPy, src: Path) -> None:
    if setup.style == UNKNOWN:
        raise UsageError(
            f"--apex-src {src}: {setup.evidence}, so this builder cannot tell how to ask it for extensions (it knows "
            "APEX_* environment variables, upstream from tag 25.09, and --cpp_ext/--cuda_ext argv switches, tags "
            "22.03-25.08); pass an NVIDIA/apex checkout of one of those"
        )


def pip_options(
    setup: SetupPy, switches: list[str], parallel: int, compression: str = "deflated"
) -> list[str]:
    """pip wheel options that hand the switches to setup.py: none for the env style (the variables do it);
    for the argv style `--config-settings=--build-option=SWITCH`, one setting per switch (pip >= 23.1 keeps
    repeated keys as a list, which setuptools appends to `setup.py bdist_wheel`). `--parallel N` goes the
    same way where setup.py reads it from its argv and not from APEX_PARALLEL_BUILD. compression "stored":
    bdist_wheel's --compression=stored, the same way (packing the wheel was 7.4 s of an 18.7 s warm
    rebuild: 157 MB of .so deflated to 43 MB; reports/h200-2026-12-01-buildspeed-i16)."""
    options: list[str] = []
    if setup.style == ARGV or compression != "deflated":
        options.append(
            "--use-pep517"
        )  # tags before 23.07 have no pyproject.toml: config settings need PEP 517
    if setup.style == ARGV:
        options += [f"--config-settings=--build-option={switch}" for switch in switches]
    if setup.parallel == ARGV and parallel > 1:
        options += [
            "--config-settings=--build-option=--parallel",
            f"--config-settings=--build-option={parallel}",
        ]
    if compression != "deflated":
        options.append(f"--config-settings=--build-option=--compression={compression}")
    return options
