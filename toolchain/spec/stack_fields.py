"""The stack's fields, each resolved against the compatibility facts: CUDA, platform, torch, Python, OS,
GCC, GPU archs and the torch index. A value written in a cell or on the command line is checked strictly;
a value left out is chosen to fit (newest torch for the CUDA, the CUDA's default OS, the newest GCC the
OS ships and nvcc accepts, the default archs the toolkit can compile). Each adds its problems to `r`.
"""

from __future__ import annotations

import contextlib
import re

from toolchain.spec import compat as compat_mod
from toolchain.spec.cell_values import CellValues, nearest
from toolchain.spec.compat import version_key
from verify.domain.arch import Arch
from verify.domain.problem import ValueProblem
from verify.runtime.messages import did_you_mean, shown

# ASCII digits only: Python's \d also matches '１' and '٣', which no tool downstream reads as digits
_MAJOR_MINOR = re.compile(r"^[0-9]+\.[0-9]+$")
_FREE_THREADED = re.compile(r"^[0-9]+\.[0-9]+t$")  # PEP 703's ABI tag letter: python3.14t, cp314t
_TORCH_VERSION = re.compile(r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")
_CUDA_WHEEL_TAG = re.compile(r"^cu([0-9]{1,2})([0-9])$")  # PyTorch's spelling: cu124 is CUDA 12.4


def resolve_cuda(r: CellValues) -> str | None:
    text = r.text("cuda")
    known = r.facts.all_cuda_versions()
    if text is None:
        if r.missing("cuda"):
            r.problem("no CUDA version", f'set cuda = "{known[-1]}" (one of {", ".join(known)})')
        return None
    wheel_tag = _CUDA_WHEEL_TAG.match(text)
    if wheel_tag:  # cu124: PyTorch's index name, not a version; say which version it means
        meant = f"{int(wheel_tag[1])}.{wheel_tag[2]}"
        best = meant if meant in known else nearest(meant, known)
        r.problem(
            f"CUDA {shown(text)} is a PyTorch wheel tag, not a CUDA version",
            f"use {r.how('cuda', best)}"
            + ("" if best == meant else f" (CUDA {meant} has no PyTorch wheels)"),
        )
        return None
    cuda = text.removeprefix("cu")
    if re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", cuda):
        cuda = compat_mod.minor_of(cuda)  # 12.4.1 -> 12.4: wheels and toolkits are per minor
    if not _MAJOR_MINOR.match(cuda) or cuda not in known:
        r.problem(
            f"CUDA {shown(text)} has no PyTorch wheels in the compatibility facts",
            f"use {r.how('cuda', nearest(cuda, known))} (known: {', '.join(known)})",
        )
        return None
    return cuda


def resolve_platform(r: CellValues) -> str | None:
    text = r.text("platform")
    known = list(r.facts.platforms) or [compat_mod.DEFAULT_PLATFORM]
    if text is None:
        return known[0]
    if text not in known:
        hint = did_you_mean(text, known)
        r.problem(
            f"platform {shown(text)} is not one the facts know",
            (f"{hint} " if hint else "") + f"use {r.how('platform', known[0])} (one of {', '.join(known)})",
        )
        return None
    return text


def resolve_torch(r: CellValues, cuda: str | None, platform: str | None) -> compat_mod.TorchRelease | None:
    """The torch release; checked on its own (known minor, known patch) even when the CUDA is bad."""
    text = r.text("torch")
    machine = r.facts.platform(platform or "")
    on = "" if platform in (None, r.facts.default_platform) else f" {machine.machine}"
    shipping = r.facts.torch_for_cuda(cuda, platform) if cuda and platform else []
    if text is None:
        if cuda is None:
            return None
        if not shipping:
            with_wheels = sorted(
                {c for t in r.facts.torch.values() for c in t.cuda_for(machine)}, key=version_key
            )
            r.problem(
                f"no torch release ships{on} wheels for CUDA {cuda} in the compatibility facts",
                f"use {r.how('cuda', nearest(cuda, with_wheels))} (CUDA with{on} torch wheels: "
                f"{', '.join(with_wheels)})"
                if with_wheels
                else "pick another CUDA version",
            )
            return None
        return shipping[0]  # newest torch that ships this CUDA
    release = r.facts.torch_release(text) if _TORCH_VERSION.match(text) else None
    if release is None:
        known = sorted(r.facts.torch, key=version_key)
        best = shipping[0].minor if shipping else nearest(compat_mod.minor_of(text), known)
        r.problem(
            f"torch {shown(text)} is not in the compatibility facts",
            f"use {r.how('torch', best)} (known: {', '.join(known)})",
        )
        return None
    if text.count(".") >= 2 and text not in release.patches:
        r.problem(
            f"torch {text} is not a release in the compatibility facts (torch {release.minor}: "
            f"{', '.join(release.patches)})",
            f"use {r.how('torch', release.version)}, or {r.how('torch', release.minor)} for the pinned "
            f'patch; a newer patch goes into patches of [torch."{release.minor}"] in toolchain/data/compat.toml',
        )
        return None
    if cuda is None or platform is None:
        return release
    builds = release.cuda_for(machine)
    if cuda not in builds:
        if not builds:  # e.g. torch 2.6 on aarch64: PyPI had CPU-only wheels, no CUDA build recorded
            r.problem(
                f"torch {text} has no{on} CUDA wheels in the compatibility facts",
                f"use {r.how('torch', shipping[0].minor)} (newest with{on} CUDA {cuda} wheels)"
                if shipping
                else f"use {r.how('platform', r.facts.default_platform)}",
            )
            return None
        cu = ", ".join("cu" + c.replace(".", "") for c in builds)
        other_cuda = f"a CUDA it ships ({', '.join(builds)})"
        r.problem(
            f"torch {text} has no{on} wheel for CUDA {cuda} (it ships {cu})",
            (f"use {r.how('torch', shipping[0].minor)} (newest for CUDA {cuda}), or " if shipping else "use ")
            + other_cuda,
        )
        return None
    return release


def resolve_python(r: CellValues, release: compat_mod.TorchRelease | None, os_name: str | None) -> str | None:
    text = r.text("python")
    os_facts = r.facts.os.get(os_name or "")
    # what this cell could use: the OS's Pythons (when known) inside torch's range
    shipped = os_facts.python if os_facts else ()
    usable = [p for p in shipped if release is None or release.supports_python(p)]
    suggestion = max(usable, key=version_key) if usable else (release.python_max if release else "3.12")
    if text is None:
        if release is not None and r.missing("python"):
            r.problem("no Python version", f'set python = "{suggestion}" in [defaults] or the cell')
        return None
    if _FREE_THREADED.match(text):  # "3.14t": a value of the axis, refused up front while no base has one
        gil_build = text[:-1]
        refused = r.facts.free_threaded_refused or "the facts record no base with a free-threaded CPython"
        r.problem(
            f"Python {text} (free-threaded) cannot be built: {refused}",
            f"use {r.how('python', gil_build)} (the same Python with the GIL)",
        )
        return None
    if not _MAJOR_MINOR.match(text):
        r.problem(f"Python {shown(text)} is not a MAJOR.MINOR version", f"use {r.how('python', suggestion)}")
        return None
    if release is None:  # torch unknown: what the OS ships can still be checked
        _check_os_python(r, text, os_name, os_facts)
        return text
    fitting = usable if os_facts else [text] if release.supports_python(text) else []
    if not r.explicit("python"):
        # [defaults] python is a preference: where the OS or torch cannot have it, take the newest that fits
        if text in fitting:
            return text
        if fitting:
            return max(fitting, key=version_key)
    return _checked_python(r, text, release, usable, fitting, os_name, os_facts)


def _check_os_python(
    r: CellValues, text: str, os_name: str | None, os_facts: compat_mod.OsRelease | None
) -> None:
    """Without torch: a python written for this cell is one its OS ships."""
    if r.explicit("python") and os_facts is not None and text not in os_facts.python:
        r.problem(
            f"{os_name} has no python{text} package (it has {', '.join(os_facts.python)})",
            f"use {r.how('python', max(os_facts.python, key=version_key))} or another os",
        )


def _checked_python(
    r: CellValues,
    text: str,
    release: compat_mod.TorchRelease,
    usable: list[str],
    fitting: list[str],
    os_name: str | None,
    os_facts: compat_mod.OsRelease | None,
) -> str | None:
    """`text` when torch supports it and the OS ships it; else None, the problem naming one that fits."""
    if not release.supports_python(text):
        nearest = (
            release.python_min if version_key(text) < version_key(release.python_min) else release.python_max
        )
        if usable:  # a version the OS also ships, so the fix works on the first try
            nearest = min(usable, key=lambda p: abs(version_key(p)[1] - version_key(text)[1]))
        r.problem(
            f"Python {text} is outside torch {release.minor}'s range {release.python_min}-{release.python_max}",
            f"use {r.how('python', nearest)}",
        )
        return None
    if os_facts is not None and text not in os_facts.python:
        other_os = [o.name for o in r.facts.os.values() if text in o.python and _has_base(r, o.name)]
        alternative = f", or an os that has it ({', '.join(other_os)})" if other_os else ""
        best = max(fitting, key=version_key) if fitting else None
        r.problem(
            f"{os_name} has no python{text} package (it has {', '.join(os_facts.python)})",
            (f"use {r.how('python', best)}" if best else "use another os") + alternative,
        )
        return None
    return text


def _has_base(r: CellValues, os_name: str) -> bool:
    """Whether this cell's CUDA can stand on the OS: NVIDIA publishes its images there, or a local base
    is made of it (advice naming an OS with neither leads nowhere)."""
    cuda = r.text("cuda")
    published = r.facts.cuda[cuda].os if cuda in r.facts.cuda else ()
    return cuda not in r.facts.cuda or os_name in published or os_name in r.facts.local_bases


def resolve_os(r: CellValues, cuda: str | None) -> str | None:
    text = r.text("os")
    custom_bases = r.text("base_devel") and r.text("base_runtime")
    if not r.grammar_ok("os", text):
        return None
    if cuda is None:
        return text
    published = r.facts.cuda[cuda].os if cuda in r.facts.cuda else ()
    if text is None:
        return published[0] if published else None
    if custom_bases or text in published or text in r.facts.local_bases:
        return text
    if not r.explicit("os") and published:
        return published[0]  # [defaults] os that this CUDA lacks: use the CUDA's default OS
    r.problem(
        f"NVIDIA publishes no CUDA {cuda} images for {text}",
        f"use {r.how('os', published[0]) if published else 'another CUDA'}"
        + (f" (one of {', '.join(published)}), or set base_devel/base_runtime" if published else "")
        + (f"; or a local base: {', '.join(r.facts.local_bases)}" if r.facts.local_bases else ""),
    )
    return None


def check_host_clash(r: CellValues, os_name: str, cuda: str) -> None:
    """An OS whose glibc breaks nvcc's host pass (compat.toml [[host_clash]]): refused before any build."""
    clash = r.facts.host_clash(os_name, cuda)
    if clash is None:
        return
    newer = [t.nvcc[0] for t in r.facts.toolkits if version_key(t.nvcc[0]) > version_key(clash.nvcc_max)]
    older = [
        o.name for o in r.facts.os.values() if o.glibc and version_key(o.glibc) < version_key(clash.glibc_min)
    ]
    r.problem(
        f"{os_name} has glibc {r.facts.os[os_name].glibc}, whose C23 math declarations break host compiles "
        f"with nvcc up to {clash.nvcc_max}, this cell's {cuda} among them ({clash.error}; compat.toml [[host_clash]])",
        (f"use {r.how('cuda', newer[0])} or newer" if newer else "use another CUDA")
        + (f", or {r.how('os', older[-1])} (an older glibc)" if older else ""),
    )


def resolve_gcc(
    r: CellValues, cuda: str | None, toolkit: compat_mod.Toolkit | None, os_name: str | None
) -> str | None:
    text = r.text("gcc")
    os_facts = r.facts.os.get(os_name or "")
    limit = toolkit.gcc_max if toolkit else 99
    fit: str | None  # the GCC a fix suggests, or the cell gets
    if text is not None and r.explicit("gcc"):
        if not re.fullmatch(r"[0-9]+", text):
            fit = _gcc_fit(os_facts, limit) or (str(toolkit.gcc_max) if toolkit else "13")
            r.problem(f"GCC {shown(text)} is not a major version", f"use {r.how('gcc', fit)}")
            return None
        if toolkit is not None and int(text) > toolkit.gcc_max:
            newer = [t for t in r.facts.toolkits if t.gcc_max >= int(text)]
            hint = f", or CUDA {newer[0].nvcc[0]}+" if newer else ""
            # suggest a GCC the OS packages too, so the fix works on the first try
            packaged = (
                [g for g in os_facts.gcc if int(g) <= toolkit.gcc_max] if os_facts else [str(toolkit.gcc_max)]
            )
            fix = (
                f"use {r.how('gcc', max(packaged, key=int))}"
                if packaged
                else f"use another os than {os_name}"
            )
            r.problem(f"GCC {text} is newer than nvcc {cuda} allows (newest: {toolkit.gcc_max})", fix + hint)
            return None
        if os_facts is not None and text not in os_facts.gcc:
            fit = _gcc_fit(os_facts, limit)  # one the OS packages AND nvcc accepts
            r.problem(
                f"{os_name} has no gcc-{text} package (it has {', '.join(os_facts.gcc)})",
                f"use {r.how('gcc', fit)} or another os" if fit else "use another os",
            )
            return None
        return text
    if os_facts is None:
        return text  # custom base image: the image's own compiler unless one is named
    fit = _gcc_fit(os_facts, limit)
    if fit is None:
        r.problem(f"{os_name} has no GCC that nvcc {cuda} accepts (newest: {limit})", "use another os")
    return fit


def _gcc_fit(os_facts: compat_mod.OsRelease | None, limit: int) -> str | None:
    """The GCC a cell gets when it names none: the OS's default, else its newest one nvcc accepts."""
    if os_facts is None:
        return None
    if int(os_facts.gcc_default) <= limit:
        return os_facts.gcc_default
    fitting = [g for g in os_facts.gcc if int(g) <= limit]
    return max(fitting, key=int) if fitting else None


def _requested_archs(r: CellValues) -> list[str] | None:
    """archs as written; the problem is recorded when none are (and needed) or the list is empty."""
    requested = r.as_list("archs")
    if requested is None:
        if r.missing("archs"):
            r.problem("no GPU archs", 'set archs = ["8.0", "9.0"] in [defaults] or the cell')
        return None
    if not requested:  # archs = [] or --archs ';': the build would fail after the devel stage
        r.problem(
            "archs is empty", f"list at least one compute capability: {r.how('archs', '9.0')} (H100/H200)"
        )
    return requested


def resolve_archs(
    r: CellValues, cuda: str | None, toolkit: compat_mod.Toolkit | None
) -> tuple[list[Arch], list[Arch]]:
    """(archs to build, the defaults' archs for this toolkit), parsed once here: the second decides the
    tag variant."""
    entry = r.get("archs")
    from_defaults = entry is not None and entry.origin == "defaults"
    requested = _requested_archs(r)
    if not requested:  # none written, or an empty list: the problem is recorded
        return [], []
    parsed: list[Arch] = []
    for text in requested:
        try:
            parsed.append(Arch.parse(text))
        except ValueProblem as bad:
            r.problem(f"arch {bad.problem}", bad.fix)
    if toolkit is None:
        return parsed, list(parsed)
    fits = [a for a in parsed if a.number in toolkit.archs]
    if from_defaults:  # archs from [defaults]: keep those this toolkit compiles
        kept = _with_ptx(_sort_archs(fits), toolkit)
        if not kept and parsed:
            r.problem(
                f"none of the default archs {', '.join(requested)} can be compiled by nvcc {cuda}",
                f"set archs in [cells.{r.name}] to some of {', '.join(toolkit.archs)}",
            )
        return kept, kept
    for arch in parsed:
        if arch.number not in toolkit.archs:
            able = [t.nvcc for t in r.facts.toolkits if arch.number in t.archs]
            where = f"CUDA {able[0][0]}-{able[-1][-1]}" if able else "no CUDA in the facts"
            r.problem(
                f"arch {arch} cannot be compiled by nvcc {cuda} "
                f"(it compiles {toolkit.archs[0]}-{toolkit.archs[-1]})",
                f"drop {arch} from archs, or build it with {where}",
            )
    defaults = [a for a in _parsed_quietly(r.defaults_archs) if a.number in toolkit.archs]
    return _sort_archs(fits), _with_ptx(_sort_archs(defaults), toolkit)


def _parsed_quietly(texts: list[str]) -> list[Arch]:
    """The [defaults] archs that parse (the ones that do not are the defaults' own problems)."""
    archs = []
    for text in texts:
        with contextlib.suppress(ValueProblem):
            archs.append(Arch.parse(text))
    return archs


def _with_ptx(archs: list[Arch], toolkit: compat_mod.Toolkit) -> list[Arch]:
    """Default archs for a toolkit whose row says so end in PTX for the highest one (as PyTorch's
    CUDA 13 wheels: "...;12.0+PTX"), so a newer GPU JIT-compiles it instead of failing."""
    if not toolkit.ptx_on_highest or not archs or any(a.ptx for a in archs):
        return archs
    return [*archs[:-1], archs[-1].with_ptx()]


def _sort_archs(archs: list[Arch]) -> list[Arch]:
    """By capability, each arch once."""
    unique = list(dict.fromkeys(archs))
    return sorted(unique, key=lambda a: (a.capability, str(a)))


def resolve_index_url(r: CellValues) -> str | None:
    url = r.text("torch_index_url")
    return url if r.grammar_ok("torch_index_url", url) else None
