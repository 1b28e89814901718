"""The build manifest's expected modules reach the extensions layer of a real static run (the probe child
imports each module on this machine, which has no Apex), not only the expectations layer."""

from __future__ import annotations

from pathlib import Path

from verify import pipeline
from verify.checks import Status


def test_a_module_the_manifest_expects_is_a_fail_in_the_extensions_layer_of_a_real_static_run(
    tmp_path: Path,
) -> None:
    """No Apex here: every module is missing. Nobody but the manifest asks for xentropy_cuda (a contrib
    module) or for a module this verify does not know, so only the manifest can make them FAIL."""
    data = {"manifest_version": 1, "expected_modules": ["xentropy_cuda", "brand_new_cuda"]}
    request = pipeline.VerifyRequest(
        static=True,
        required=("FusedAdam",),
        manifest=pipeline.LoadedManifest(tmp_path / "m.json", "--manifest", data),
        seed=0,
        check_timeout_s=120,
        require_gpu=False,
        distributed=False,
    )
    layers = pipeline.static_layers(request)
    ext = {c.name: c for c in layers.checks if c.layer == "extensions"}
    assert ext["xentropy_cuda"].status is Status.FAIL and ext["xentropy_cuda"].summary.startswith("missing")
    assert ext["brand_new_cuda"].status is Status.FAIL
    assert ext["amp_C"].status is Status.FAIL  # FusedAdam's module, expected through the feature
    skipped = ext["not_built"].details["by_flag"]
    assert "xentropy_cuda" not in str(skipped) and "fused_layer_norm_cuda" in str(skipped)
