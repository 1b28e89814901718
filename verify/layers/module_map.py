"""Apex's extension modules, build flags and features, read from data/apex_modules.json."""

from __future__ import annotations

import dataclasses
import functools

from verify.runtime import resources

_DATA = "data/apex_modules.json"  # inside the package (a directory or a zipapp)


@dataclasses.dataclass(frozen=True)
class ExtensionModule:
    name: str
    flag: str
    kind: str  # core | contrib | deprecated
    cuda: bool
    features: tuple[str, ...]
    requires: str | None = None
    since: str | None = None  # first tag whose setup.py builds it (None: 22.03 or earlier)
    until: str | None = None  # last tag that has it (None: still at upstream HEAD)
    removed: str | None = None  # the upstream commit that dropped it
    deprecated: Deprecation | None = None  # where upstream deprecated it (it still builds)

    @property
    def switch(self) -> str:
        return switch_for(self.flag)

    def deprecated_at(self, ref: str | None) -> str | None:
        """The deprecation wording when Apex at `ref` (a commit or an NGC tag) has it deprecated; None when
        it predates the deprecation. A commit not known either way gets the wording with that said."""
        found = self.deprecated
        if found is None:
            return None
        said = f"deprecated upstream {found.upstream}; use {found.use}"
        if not found.commits and not found.after_tag:  # deprecated at every ref (kind "deprecated")
            return said
        ref = (ref or "").lower()
        key = tag_key(ref)
        if key is not None:
            return said if found.after_tag and key > (tag_key(found.after_tag) or ()) else None
        if len(ref) >= 7 and any(c.startswith(ref) or ref.startswith(c) for c in found.before):
            return None
        if len(ref) >= 7 and any(c.startswith(ref) or ref.startswith(c) for c in found.commits):
            return said
        what = f"commit {ref[:12]}" if ref else "this Apex (commit unknown)"
        return f"{said} (whether {what} includes that is not known here)"


@dataclasses.dataclass(frozen=True)
class Deprecation:
    upstream: str  # "in COMMIT (#PR, date): what it does", or "at every ref: ..."
    use: str  # what to move to
    commits: tuple[str, ...] = ()  # refs known to include it (full or short shas)
    before: tuple[str, ...] = ()  # refs known to predate it
    after_tag: str | None = None  # the newest NGC-style tag that predates it (later tags include it)


@functools.lru_cache(maxsize=1)
def _raw() -> dict:
    return resources.read_json(_DATA)


def modules() -> tuple[ExtensionModule, ...]:
    return tuple(
        ExtensionModule(
            name=m["name"],
            flag=m["flag"],
            kind=m["kind"],
            cuda=m["cuda"],
            features=tuple(m["features"]),
            requires=m.get("requires"),
            since=m.get("since"),
            until=m.get("until"),
            removed=m.get("removed"),
            deprecated=_deprecation(m.get("deprecated")),
        )
        for m in _raw()["modules"]
    )


def _deprecation(raw: dict | None) -> Deprecation | None:
    if raw is None:
        return None
    return Deprecation(
        upstream=raw["upstream"],
        use=raw["use"],
        commits=tuple(c.lower() for c in raw.get("commits", ())),
        before=tuple(c.lower() for c in raw.get("before", ())),
        after_tag=raw.get("after_tag"),
    )


def module(name: str) -> ExtensionModule:
    for m in modules():
        if m.name == name:
            return m
    raise KeyError(name)


def feature_names() -> tuple[str, ...]:
    names: list[str] = []
    for m in modules():
        names.extend(f for f in m.features if f not in names)
    return tuple(names)


def modules_for_feature(feature: str) -> tuple[str, ...]:
    return tuple(m.name for m in modules() if feature in m.features)


def feature_import_path(feature: str) -> str | None:
    return _raw()["features"].get(feature)


def modules_for_flags(flags: dict[str, str]) -> tuple[str, ...]:
    """Modules that Apex's setup.py builds for these environment flags (APEX_*=1)."""
    on = {k for k, v in flags.items() if str(v) == "1"}
    all_contrib = _raw()["contrib_all_flag"] in on
    return tuple(
        m.name
        for m in modules()
        if m.flag in on or (all_contrib and m.kind != "core")  # setup.py: every non-core flag
    )


def default_required_features() -> tuple[str, ...]:
    return tuple(_raw()["default_required_features"])


def legacy_apis() -> dict[str, str]:
    return dict(_raw()["legacy_apis"])


def known_flags() -> tuple[str, ...]:
    flags: list[str] = []
    for m in modules():
        if m.flag not in flags:
            flags.append(m.flag)
    return tuple(flags) + (_raw()["contrib_all_flag"],)


def extra_names(core_flags: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
    """The names users write in --extras / `extras` -> their APEX_* flag: a flag's lower-case name
    without APEX_ ("xentropy"), "all" for every contrib extension, and each module's name. The one
    table for `build.py plan` (the cell's extras) and `build.py wheel` (the builder's --extras)."""
    names: dict[str, str] = {}
    core = set(core_flags)
    for flag in known_flags():
        if flag not in core:
            names[flag.removeprefix("APEX_").lower()] = flag
    names["all"] = names.pop(
        _raw()["contrib_all_flag"].removeprefix("APEX_").lower(), _raw()["contrib_all_flag"]
    )
    for module in modules():
        if module.flag not in core:
            names.setdefault(module.name, module.flag)
    return names


def switch_for(flag: str) -> str:
    """setup.py's argv switch for a flag: APEX_CUDA_EXT -> --cuda_ext (the pairs of Apex's ENV_TO_FLAG)."""
    return "--" + flag.removeprefix("APEX_").lower()


def flag_styles() -> dict[str, dict[str, str]]:
    """How setup.py takes its switches, per era: 'env' (APEX_* variables) and 'argv' (--switch)."""
    return {name: dict(style) for name, style in _raw()["flag_styles"].items()}


def tag_key(tag: str) -> tuple[int, ...] | None:
    """'24.04.01' -> (24, 4, 1); None when the ref is not an NGC-style YY.MM[.NN] tag."""
    parts = tag.split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() and len(p) == 2 for p in parts):
        return None
    return tuple(int(p) for p in parts)


def in_tag(module_name: str, tag: str) -> bool | None:
    """Whether Apex at this NGC-style tag has the module (from since/until); None for a ref that is no tag."""
    key = tag_key(tag)
    if key is None:
        return None
    m = module(module_name)
    if m.since and key < (tag_key(m.since) or ()):
        return False
    return not (m.until and key > (tag_key(m.until) or ()))


def contrib_all_flag() -> str:
    """APEX_ALL_CONTRIB_EXT: every non-core flag at once (env-style setup.py only)."""
    return str(_raw()["contrib_all_flag"])
