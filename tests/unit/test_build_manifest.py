"""verify.layers.manifest.BuildManifest: the one record the apex builder writes and verify reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verify.layers import manifest
from verify.runtime import field_types
from verify.runtime.atomic import write_json


def _record() -> manifest.BuildManifest:
    return manifest.BuildManifest(
        apex={"commit": "6424da3b" * 5, "ref": "6424da3b", "source": "dir:/src", "version": "0.1"},
        flags={"APEX_CUDA_EXT": "1"}, expected_modules=("amp_C", "fused_layer_norm_cuda"), built_modules=("amp_C",),
        absent_at_ref=("fmhalib",), flag_style={"style": "env", "evidence": "setup.py reads os.environ"},
        skipped_extensions=({"module": "fused_layer_norm_cuda", "warning": "nvcc not found"},), arch_list="9.0",
        versions={"torch": "2.13.0", "torch_cuda": None, "nvcc": None, "gcc": "12.2", "python": "3.11",
                  "cxx11_abi": True},
        parallelism={"max_jobs": 2, "nvcc_threads": 1, "apex_parallel_build": 1, "reason": "2 cores"},
        build={"wall_s": 1.5}, cell="apex-6424da3-torch2.13.0-cu13.0-py3.11-ubuntu22.04",
        inputs={"base_image": None, "base_image_digest": None, "torch_wheel_sha256": {}})


def test_what_the_writer_writes_the_reader_loads_into_the_same_record(tmp_path: Path) -> None:
    record = _record()
    data = record.to_json()
    assert list(data)[:4] == ["manifest_version", "apex", "flags", "expected_modules"]  # the builder's order
    assert field_types.check(data, manifest.SHAPE, "manifest") == []
    path = write_json(tmp_path / "build-manifest.json", data)
    loaded = manifest.load(path, "--manifest")
    assert loaded == json.loads(json.dumps(data))
    assert manifest.BuildManifest.from_json(loaded) == record
    assert record.commit == "6424da3b" * 5 and record.built_for_torch == "2.13.0"


def test_a_newer_builders_keys_ride_along_and_a_sparse_manifest_reads() -> None:
    newer = {**_record().to_json(), "sbom": {"format": "spdx"}}
    record = manifest.BuildManifest.from_json(newer)
    assert record.extra == {"sbom": {"format": "spdx"}} and record.to_json() == newer
    sparse = manifest.BuildManifest.from_json({"manifest_version": "1", "expected_modules": ["amp_C"], "cell": None})
    assert sparse.expected_modules == ("amp_C",) and sparse.commit is None and sparse.built_for_torch is None


def test_the_record_is_frozen() -> None:
    with pytest.raises(AttributeError):
        _record().cell = "other"  # type: ignore[misc]
