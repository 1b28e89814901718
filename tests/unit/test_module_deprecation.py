"""Upstream deprecations in the module map: `nccl_allocator` from NVIDIA/apex#2019's commit on (as
`fused_adam_cuda` at every ref), so verify's wording holds at the pinned commit and past it."""

from __future__ import annotations

import pytest

from verify.checks import Status
from verify.layers import extensions, module_map

PIN = "6424da3b4faa6c8f062da4a48c424fff3f02d42d"  # upstream HEAD 2026-07-08, before #2019
DEPRECATING = "152d2745e241afa7071bbfb53f9a6b7688f9ff2e"  # "Deprecate nccl_allocator", NVIDIA/apex#2019


@pytest.mark.parametrize(
    ("ref", "deprecated"),
    [
        (PIN, False),
        (PIN[:8], False),
        ("25.09", False),  # every NGC tag so far predates it
        ("25.04", False),
        (DEPRECATING, True),
        (DEPRECATING[:8], True),
        ("9e3568a6", True),  # master after #2018 and #2019
        ("26.01", True),  # a tag after 25.09 carries it
    ],
)
def test_nccl_allocator_is_deprecated_from_the_commit_that_deprecates_it(ref: str, deprecated: bool) -> None:
    said = module_map.module("_apex_nccl_allocator").deprecated_at(ref)
    assert (said is not None) == deprecated, (ref, said)
    if said:
        assert said.startswith("deprecated upstream in 152d2745 (#2019") and "not known" not in said


def test_an_unknown_commit_gets_the_wording_and_says_it_is_not_known() -> None:
    said = module_map.module("_apex_nccl_allocator").deprecated_at("0123456789ab")
    assert said and said.endswith("(whether commit 0123456789ab includes that is not known here)")


def test_fused_adam_cuda_is_deprecated_at_every_ref_and_core_modules_never() -> None:
    for ref in (PIN, "22.03", DEPRECATING, None):
        assert "at every ref" in (module_map.module("fused_adam_cuda").deprecated_at(ref) or "")
        assert module_map.module("amp_C").deprecated_at(ref) is None


def _ok(name: str) -> extensions.ExtensionResult:
    return extensions.classify(name, {"status": "ok", "file": f"/site/{name}.so"})


def test_verify_says_deprecated_where_the_module_imports_at_a_commit_past_2019() -> None:
    results = [_ok("amp_C"), _ok("_apex_nccl_allocator")]
    at_pin = {c.name: c for c in extensions.extension_checks(results, set(), apex_commit=PIN)}
    past = {c.name: c for c in extensions.extension_checks(results, set(), apex_commit=DEPRECATING)}
    assert at_pin["_apex_nccl_allocator"].summary == "imports from /site/_apex_nccl_allocator.so"
    assert "deprecated" not in at_pin["_apex_nccl_allocator"].details
    assert past["_apex_nccl_allocator"].status is Status.PASS
    assert "deprecated upstream in 152d2745 (#2019" in past["_apex_nccl_allocator"].summary
    assert past["_apex_nccl_allocator"].details["deprecated"].startswith("deprecated upstream")
    assert past["amp_C"].summary == at_pin["amp_C"].summary == "imports from /site/amp_C.so"
