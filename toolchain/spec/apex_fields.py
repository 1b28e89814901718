"""The Apex fields: apex_flags and extras (against verify's module map, the one source of flags),
apex_repo and apex_ref (their grammar), and an Apex ref x torch x CUDA known not to compile
(toolchain/spec/apex_refs.py). Each adds its problems to `r`.
"""

from __future__ import annotations

from toolchain.spec import compat as compat_mod
from toolchain.spec.cell_values import CellValues
from toolchain.spec.compat import version_key
from verify.domain.extras import extra_flag, extra_name
from verify.domain.problem import ValueProblem
from verify.runtime.messages import did_you_mean, shown

# APEX_X=<one of these> in apex_flags means "off", which a list of flags to build cannot say.
_FLAG_OFF = frozenset({"0", "false", "no", "off", ""})


def extra_flag_names() -> dict[str, str]:
    """Contrib/deprecated extension names users write in EXTRAS -> their APEX_* flag."""
    from verify.layers import module_map  # the module map is the one source of flags

    return module_map.extra_names(compat_mod.load().apex_core_flags)


def resolve_flags(r: CellValues) -> tuple[list[str], list[str]]:
    from verify.layers import module_map

    known = module_map.known_flags()
    written = r.as_list("apex_flags")
    flags: list[str] = []
    if written is None:
        flags = list(r.facts.apex_core_flags)
    for item in written or []:
        flag = _flag_to_build(r, item, known)
        if flag is not None:
            flags.append(flag)
    extras_text = r.as_list("extras") or []
    by_name = extra_flag_names()
    extras: list[str] = []
    for extra in extras_text:
        try:
            extras.append(extra_name(extra_flag(extra, by_name), by_name))
        except ValueProblem as bad:
            r.problem(f"extras: {bad.problem}", bad.fix)
    extras = list(dict.fromkeys(extras))
    for extra in extras:
        flag = by_name[extra]
        if flag not in flags:
            flags.append(flag)
    return list(dict.fromkeys(flags)), extras


def _flag_to_build(r: CellValues, item: str, known: tuple[str, ...]) -> str | None:
    """One apex_flags entry as the flag it builds (FLAG or FLAG=1, any case); None, with the problem
    recorded, for a flag turned off, another value, or an unknown flag."""
    flag, is_set, value = (part.strip() for part in item.partition("="))
    flag = flag.upper()
    if is_set and value.lower() in _FLAG_OFF:
        # the list says what is built: APEX_CPP_EXT=0 in it would be read as "build it"
        r.problem(
            f"apex_flags: {shown(item)} turns a flag off, but apex_flags lists the flags to build",
            f"drop {flag} from apex_flags (a flag not listed is off)",
        )
        return None
    if is_set and value != "1":
        r.problem(f"apex_flags: {shown(item)} is not a flag to turn on", f"write {flag} (or {flag}=1)")
        return None
    if flag not in known:
        r.problem(
            f"apex_flags: unknown flag {shown(flag, quote=False)}",
            did_you_mean(flag, known) or f"use one of {', '.join(known)}",
        )
        return None
    return flag


def resolve_ref(r: CellValues) -> str | None:
    if "apex_ref" in r.invalid:
        return None
    ref = r.text("apex_ref") or r.facts.apex_default_ref
    return ref if r.grammar_ok("apex_ref", ref) else None


def resolve_repo(r: CellValues) -> str | None:
    """apex_repo: what git clones. A URL or a path, never something git could read as an option."""
    repo = r.text("apex_repo")
    return repo if r.grammar_ok("apex_repo", repo) else None


def check_apex_ref(
    r: CellValues, ref: str, torch: str, cuda: str, flags: list[str], release: compat_mod.TorchRelease
) -> None:
    """An Apex ref x torch x CUDA known not to compile, or extras the ref does not have (toolchain.spec.apex_refs)."""
    from toolchain.spec import apex_refs

    row = apex_refs.known_failure(ref, torch, cuda, flags, r.facts)
    if row is not None:
        fine = [c for c in release.cuda if not row.holds(ref, torch, c, flags)]
        fixes = (
            [f"use {r.how('cuda', max(fine, key=version_key))} (torch {release.minor} ships it)"]
            if fine
            else []
        )
        newer = [
            t for t in reversed(r.facts.torch_for_cuda(cuda)) if not row.holds(ref, t.version, cuda, flags)
        ]
        if row.torch_max and newer:  # a row about torch (Apex's own torch floor): a torch past it
            fixes.append(f"use {r.how('torch', newer[0].minor)} (the oldest past it with CUDA {cuda})")
        if row.fix_ref:
            fixes.append(f"use {r.how('apex_ref', row.fix_ref[:12])}")
        against = f"torch {torch}" if row.torch_max and not (row.cuda_min or row.cuda_max) else f"CUDA {cuda}"
        r.problem(
            f"Apex {ref} does not compile against {against} ({row.error}): {row.cause}",
            " or ".join(fixes or ["use an Apex ref or CUDA outside this known failure"])
            + f" [evidence: {row.evidence.split(' ', 1)[0].rstrip(':;,')}]",
        )
    for flag, why in apex_refs.absent_modules(ref, flags, r.facts.apex_default_ref):
        r.problem(
            f"apex_ref {ref} has no module for {flag} ({why})",
            "drop it from extras/apex_flags, or use an apex_ref that has it",
        )
