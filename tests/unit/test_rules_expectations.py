"""Layer 5's rules, each on both sides (fast, no probe): which names --require accepts and what they need,
why a feature is unusable (the first problem of each module, the entry point only when the modules are fine,
the arch fix only for a missing GPU code), and the manifest's expected modules (unknown ones a WARN, any
not usable a FAIL naming the build's warnings)."""

from __future__ import annotations

from typing import Any

import pytest

from verify.checks import Status
from verify.layers import expectations, module_map
from verify.layers.extensions import ExtensionResult
from verify.layers.manifest import BuildManifest


def _ext(module: str, status: str = "ok", **fields: Any) -> ExtensionResult:
    return ExtensionResult(
        module=module, flag="APEX_CUDA_EXT", kind="core", cuda=True, status=status, **fields
    )


def test_require_accepts_features_and_modules_in_any_case_once_each() -> None:
    assert expectations.parse_required(None) == module_map.default_required_features()
    assert expectations.parse_required(["fusedadam, amp_C", "FusedAdam", " ,FusedRMSNorm"]) == (
        "FusedAdam",
        "amp_C",
        "FusedRMSNorm",
    )
    assert expectations.parse_required([]) == ()
    with pytest.raises(expectations.RequireError) as caught:
        expectations.parse_required(["FusedAdamm"])
    assert str(caught.value) == (  # the two closest names, no more
        "--require FusedAdamm: unknown feature or module; did you mean 'FusedAdam' or 'FusedLAMB'? "
        "(see `verify --help` for the list)"
    )
    with pytest.raises(expectations.RequireError, match="known features: FusedAdam, FusedLayerNorm"):
        expectations.parse_required(["zzzzzz"])
    assert "FusedAdam" in expectations.known_names() and "amp_C" in expectations.known_names()


def test_what_the_required_names_need() -> None:
    assert expectations.modules_required(("FusedAdam", "fused_layer_norm_cuda")) == {
        "amp_C",
        "fused_layer_norm_cuda",
    }
    assert expectations.modules_required(()) == set()
    assert expectations.probe_targets(("FusedAdam", "amp_C")) == {"FusedAdam": "apex.optimizers.FusedAdam"}


def _one(required: str, exts: list[ExtensionResult], **kwargs: Any):
    (check,) = expectations.expectation_checks(
        (required,), exts, kwargs.pop("entry_points", {}), None, **kwargs
    )
    return check


def test_why_a_feature_is_unusable() -> None:
    assert _one("FusedAdam", []).summary == (
        "FusedAdam unusable: amp_C is missing (Python-only Apex build? rebuild with its build flag)"
    )
    assert "rebuild with APEX_CUDA_EXT=1" in _one("FusedAdam", [_ext("amp_C", "missing")]).summary
    other = _one("FusedAdam", [], apex_kind="pypi")
    assert other.status is Status.FAIL and other.summary.endswith(
        "amp_C is missing (NVIDIA Apex is not installed)"
    )
    broken = _one("FusedAdam", [_ext("amp_C", "undefined_symbol", demangled_symbol="c10::Error", error="x")])
    assert broken.summary.endswith("amp_C does not import (undefined_symbol: c10::Error)")
    assert _one("FusedAdam", [_ext("amp_C", "other", error="boom")]).summary.endswith("(other: boom)")
    no_code = _one(
        "FusedAdam",
        [_ext("amp_C", arch={"compatible": False, "sass": [], "ptx": []})],
        arch_fix="rebuild with TORCH_CUDA_ARCH_LIST=9.0",
    )
    assert no_code.summary == (
        "FusedAdam unusable: amp_C has no code for this GPU (built for no GPU code only); "
        "rebuild with TORCH_CUDA_ARCH_LIST=9.0"
    )
    sm80 = _one(
        "FusedAdam", [_ext("amp_C", arch={"compatible": False, "sass": ["sm_80"], "ptx": ["compute_80"]})]
    )
    assert sm80.summary.endswith("(built for sm_80, compute_80 only)")
    unknown_arch = _one("FusedAdam", [_ext("amp_C", arch={"compatible": None})])
    assert unknown_arch.status is Status.PASS  # no GPU to judge against: not a problem
    missing_fix = _one("FusedAdam", [], arch_fix="rebuild with TORCH_CUDA_ARCH_LIST=9.0")
    assert "TORCH_CUDA_ARCH_LIST" not in missing_fix.summary  # the arch fix only where GPU code is missing


def test_the_entry_point_counts_only_when_the_modules_are_fine() -> None:
    failed = {"FusedAdam": {"status": "error", "exc_type": "ImportError", "message": "no apex.optimizers"}}
    ok = [_ext("amp_C")]
    check = _one("FusedAdam", ok, entry_points=failed)
    assert check.status is Status.FAIL and check.summary == (
        "FusedAdam unusable: apex.optimizers.FusedAdam does not resolve (ImportError: no apex.optimizers)"
    )
    assert _one("FusedAdam", ok, entry_points={"FusedAdam": {"status": "ok"}}).status is Status.PASS
    both = _one("FusedAdam", [_ext("amp_C", "missing")], entry_points=failed)
    assert both.details["problems"] == [
        "amp_C is missing (Python-only Apex build? rebuild with APEX_CUDA_EXT=1)"
    ]
    usable = _one("amp_C", ok)
    assert (usable.status, usable.summary, usable.details) == (
        Status.PASS,
        "amp_C usable (amp_C)",
        {"modules": ["amp_C"]},
    )


def test_the_manifests_expected_modules() -> None:
    manifest = BuildManifest(
        expected_modules=("amp_C", "xentropy_cuda", "brand_new_cuda", "amp_C"),
        skipped_extensions=({"module": "xentropy_cuda", "warning": "cuDNN not found"}, "not a record"),  # type: ignore[arg-type]
    )
    checks = expectations.expectation_checks(
        (), [_ext("amp_C"), _ext("brand_new_cuda", "other")], {}, manifest
    )
    unknown, expected = checks
    assert (unknown.name, unknown.status) == ("manifest.unknown_modules", Status.WARN)
    assert unknown.summary.startswith(
        "the manifest expects modules this verify does not know: brand_new_cuda ("
    )
    assert expected.status is Status.FAIL and expected.summary == (
        "2 of 3 modules the build expected are not usable: xentropy_cuda (missing), brand_new_cuda (other); "
        "build warnings: xentropy_cuda: cuDNN not found"
    )
    assert expected.details["not_usable"] == {"xentropy_cuda": "missing", "brand_new_cuda": "other"}
    fine = expectations.expectation_checks(
        (), [_ext("amp_C")], {}, BuildManifest(expected_modules=("amp_C",))
    )
    assert [(c.name, c.status, c.summary) for c in fine] == [
        ("manifest.expected_modules", Status.PASS, "all 1 modules the build manifest expects import")
    ]
    quiet = expectations.expectation_checks((), [], {}, BuildManifest(expected_modules=("amp_C",)))
    assert quiet[0].summary == "1 of 1 modules the build expected are not usable: amp_C (missing)"


def _runtime(text: str) -> str:
    """`text` made at run time: equal to the literal, not the same object (as a status read from JSON is)."""
    return "".join(list(text))


def test_statuses_and_kinds_are_compared_by_value_whichever_way_they_sort() -> None:
    not_installed = _one("FusedAdam", [_ext("amp_C", "missing")], apex_kind="not_installed")  # sorts first
    assert not_installed.summary.endswith("amp_C is missing (NVIDIA Apex is not installed)")
    assert _one("FusedAdam", [_ext("amp_C")], apex_kind="pypi").status is Status.PASS  # present: usable
    nvidia = _one("FusedAdam", [_ext("amp_C", _runtime("missing"))], apex_kind=_runtime("nvidia"))
    assert nvidia.summary.endswith("(Python-only Apex build? rebuild with APEX_CUDA_EXT=1)")
    elsewhere = _one("FusedAdam", [_ext("amp_C", _runtime("missing"))], apex_kind="pypi")
    assert elsewhere.summary.endswith("amp_C is missing (NVIDIA Apex is not installed)")
    assert _one("FusedAdam", [_ext("amp_C", _runtime("ok"))]).status is Status.PASS
    cuda = _one(
        "FusedAdam", [_ext("amp_C", "missing_cuda_library", error="libcudart.so.13")]
    )  # sorts before ok
    assert cuda.summary.endswith("amp_C does not import (missing_cuda_library: libcudart.so.13)")
    for status in ("timeout", "error"):  # either side of "ok"
        entry = {"FusedAdam": {"status": status, "exc_type": "E", "message": "m"}}
        assert _one("FusedAdam", [_ext("amp_C")], entry_points=entry).status is Status.FAIL
    fine = {"FusedAdam": {"status": _runtime("ok")}}
    assert _one("FusedAdam", [_ext("amp_C")], entry_points=fine).status is Status.PASS
    read = expectations.expectation_checks(
        (), [_ext("amp_C", _runtime("ok"))], {}, BuildManifest(expected_modules=("amp_C",))
    )
    assert read[0].status is Status.PASS
