"""Apex's extension modules, build flags and features, read from data/apex_modules.json."""

from __future__ import annotations

import dataclasses
import functools
import json

from verify import resources

_DATA = "data/apex_modules.json"  # inside the package (a directory or a zipapp)


@dataclasses.dataclass(frozen=True)
class ExtensionModule:
    name: str
    flag: str
    kind: str  # core | contrib | deprecated
    cuda: bool
    features: tuple[str, ...]
    requires: str | None = None


@functools.lru_cache(maxsize=1)
def _raw() -> dict:
    return json.loads(resources.read_text(_DATA))


def modules() -> tuple[ExtensionModule, ...]:
    return tuple(
        ExtensionModule(
            name=m["name"],
            flag=m["flag"],
            kind=m["kind"],
            cuda=m["cuda"],
            features=tuple(m["features"]),
            requires=m.get("requires"),
        )
        for m in _raw()["modules"]
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
