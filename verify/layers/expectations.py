"""Layer 5: what this install must provide: the required features (default FusedAdam, FusedLayerNorm,
FusedRMSNorm; `--require` changes the set) and the build manifest's expected modules.

A feature is usable when every module it needs imports, carries code for this GPU (when one is
visible), and its Python entry point resolves. Anything expected and not usable is a FAIL.
"""

from __future__ import annotations

from typing import Any

from verify.checks import Check, Status
from verify.layers import module_map
from verify.layers.extensions import ExtensionResult
from verify.layers.manifest import BuildManifest
from verify.runtime.messages import did_you_mean, shown


class RequireError(ValueError):
    """An unknown --require name; the message is one line with the closest known names."""


def known_names() -> tuple[str, ...]:
    """Names --require accepts: features (FusedAdam) and module names (amp_C)."""
    return module_map.feature_names() + tuple(m.name for m in module_map.modules())


def parse_required(values: list[str] | None) -> tuple[str, ...]:
    """--require values (comma-separated, repeatable) -> names; None -> the default feature set."""
    if values is None:
        return module_map.default_required_features()
    names: list[str] = []
    for value in values:
        names.extend(n.strip() for n in value.split(",") if n.strip())
    known = known_names()
    lowered = {k.lower(): k for k in known}
    resolved: list[str] = []
    for name in names:
        if name in known:
            resolved.append(name)
        elif name.lower() in lowered:  # be forgiving about case: fusedadam -> FusedAdam
            resolved.append(lowered[name.lower()])
        else:
            hint = did_you_mean(name, known, n=2) or (
                f"known features: {', '.join(module_map.default_required_features())}, ..."
            )
            raise RequireError(
                f"--require {shown(name, quote=False)}: unknown feature or module; {hint}"
                " (see `verify --help` for the list)"
            )
    return tuple(dict.fromkeys(resolved))


def modules_required(required: tuple[str, ...]) -> set[str]:
    """The extension modules the required features (or named modules) need."""
    names = {m.name for m in module_map.modules()}
    needed: set[str] = set()
    for item in required:
        needed.update([item] if item in names else module_map.modules_for_feature(item))
    return needed


def probe_targets(required: tuple[str, ...]) -> dict[str, str]:
    """Feature -> Python entry point to resolve in the import probe (features that have one)."""
    return {f: path for f in required if (path := module_map.feature_import_path(f))}


def _module_problem(ext: ExtensionResult | None, name: str, apex_kind: str) -> str | None:
    if (ext is None or ext.status == "missing") and apex_kind != "nvidia":
        return f"{name} is missing (NVIDIA Apex is not installed)"
    if ext is None or ext.status == "missing":
        flag = f"{ext.flag}=1" if ext and ext.flag else "its build flag"
        return f"{name} is missing (Python-only Apex build? rebuild with {flag})"
    if ext.status != "ok":
        return f"{name} does not import ({ext.status}: {ext.demangled_symbol or ext.error})"
    if ext.arch and ext.arch.get("compatible") is False:
        built = ", ".join(ext.arch["sass"] + ext.arch["ptx"]) or "no GPU code"
        return f"{name} has no code for this GPU (built for {built} only)"
    return None


def expectation_checks(
    required: tuple[str, ...],
    extensions: list[ExtensionResult],
    entry_points: dict[str, dict[str, Any]],
    manifest: BuildManifest | None,
    arch_fix: str | None = None,
    apex_kind: str = "nvidia",
) -> list[Check]:
    """entry_points: feature -> import-probe result for its Python entry point."""
    by_name = {e.module: e for e in extensions}
    module_names = {m.name for m in module_map.modules()}
    checks: list[Check] = []
    for item in required:
        mods = (item,) if item in module_names else module_map.modules_for_feature(item)
        problems = [p for m in mods if (p := _module_problem(by_name.get(m), m, apex_kind))]
        entry = entry_points.get(item)
        if entry is not None and entry.get("status") != "ok" and not problems:
            problems.append(
                f"{module_map.feature_import_path(item)} does not resolve"
                f" ({entry.get('exc_type')}: {entry.get('message')})"
            )
        if problems:
            fix = f"; {arch_fix}" if arch_fix and any("no code for this GPU" in p for p in problems) else ""
            checks.append(
                Check(
                    "expectations",
                    f"feature.{item}",
                    Status.FAIL,
                    f"{item} unusable: {'; '.join(problems)}{fix}",
                    details={"modules": list(mods), "problems": problems},
                )
            )
        else:
            checks.append(
                Check(
                    "expectations",
                    f"feature.{item}",
                    Status.PASS,
                    f"{item} usable ({', '.join(mods)})",
                    details={"modules": list(mods)},
                )
            )
    if manifest is not None:
        checks.extend(_manifest_checks(manifest, by_name))
    return checks


def _manifest_checks(manifest: BuildManifest, by_name: dict[str, ExtensionResult]) -> list[Check]:
    checks: list[Check] = []
    expected = list(dict.fromkeys(manifest.expected_modules))
    known = {m.name for m in module_map.modules()}
    unknown = [m for m in expected if m not in known]
    if unknown:
        checks.append(
            Check(
                "expectations",
                "manifest.unknown_modules",
                Status.WARN,
                f"the manifest expects modules this verify does not know: {', '.join(unknown)}"
                " (a newer Apex? they are still import-checked)",
            )
        )
    bad = {m: by_name[m].status if m in by_name else "missing" for m in expected}
    bad = {m: s for m, s in bad.items() if s != "ok"}
    skipped = manifest.skipped_extensions
    if bad:
        listed = ", ".join(f"{m} ({s})" for m, s in bad.items())
        reasons = "; ".join(f"{s.get('module')}: {s.get('warning')}" for s in skipped if isinstance(s, dict))
        checks.append(
            Check(
                "expectations",
                "manifest.expected_modules",
                Status.FAIL,
                f"{len(bad)} of {len(expected)} modules the build expected are not usable: {listed}"
                + (f"; build warnings: {reasons}" if reasons else ""),
                details={"expected": expected, "not_usable": bad},
            )
        )
    else:
        checks.append(
            Check(
                "expectations",
                "manifest.expected_modules",
                Status.PASS,
                f"all {len(expected)} modules the build manifest expects import",
                details={"expected": expected},
            )
        )
    return checks
