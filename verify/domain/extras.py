"""The contrib extras: one grammar for matrix.toml's `extras`, `build.py plan --extras` and `wheel --extras`."""

from __future__ import annotations

from collections.abc import Mapping

from verify.domain.problem import ValueProblem
from verify.runtime.messages import closest, did_you_mean, shown


def extra_flag(name: str, names: Mapping[str, str]) -> str:
    """One `extras` entry -> its APEX_* flag, by the table of names (verify.module_map.extra_names): a
    name ('xentropy', 'all', a module name, any case) or the flag itself ('APEX_XENTROPY'). The one
    grammar of matrix.toml's extras, `build.py plan --extras` and `build.py wheel --extras`."""
    text = name.strip()
    key = text.lower()
    if key in names:
        return names[key]
    flags = set(names.values())
    upper = text.upper()
    flag = upper if upper.startswith("APEX_") else "APEX_" + upper
    if flag in flags:
        return flag
    near = closest(key.removeprefix("apex_"), names)
    if near:
        raise ValueProblem(
            f"unknown contrib extension {shown(text)}",
            f"{did_you_mean(key.removeprefix('apex_'), names)} (the flag {names[near[0]]})",
        )
    short = [n for n in names if not n.endswith(("_cuda", "_lib"))]
    raise ValueProblem(f"unknown contrib extension {shown(text)}", f"use some of {', '.join(short)}")


def extra_name(flag: str, names: Mapping[str, str]) -> str:
    """The canonical name of an extra's flag: the first name the table gives it ('xentropy')."""
    return next(n for n, f in names.items() if f == flag)
