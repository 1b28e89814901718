"""verify.layers.manifest.BuildManifest: the one record the apex builder writes and verify reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import REPO
from verify.layers import manifest
from verify.runtime import field_types
from verify.runtime.atomic import write_json


def _record() -> manifest.BuildManifest:
    return manifest.BuildManifest(
        apex={"commit": "6424da3b" * 5, "ref": "6424da3b", "source": "dir:/src", "version": "0.1"},
        flags={"APEX_CUDA_EXT": "1"},
        expected_modules=("amp_C", "fused_layer_norm_cuda"),
        built_modules=("amp_C",),
        absent_at_ref=("fmhalib",),
        flag_style={"style": "env", "evidence": "setup.py reads os.environ"},
        skipped_extensions=({"module": "fused_layer_norm_cuda", "warning": "nvcc not found"},),
        arch_list="9.0",
        versions=manifest.Versions.from_json(
            {
                "torch": "2.13.0",
                "torch_cuda": None,
                "nvcc": None,
                "gcc": "12.2",
                "python": "3.11",
                "cxx11_abi": True,
            }
        ),
        parallelism=manifest.Parallelism.from_json(
            {"max_jobs": 2, "nvcc_threads": 1, "apex_parallel_build": 1, "reason": "2 cores"}
        ),
        build=manifest.BuildStats(wall_s=1.5),
        cell="apex-6424da3-torch2.13.0-cu13.0-py3.11-ubuntu22.04",
        inputs={"base_image": None, "base_image_digest": None, "torch_wheel_sha256": {}},
    )


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


def test_a_newer_builders_keys_are_not_read_and_a_sparse_manifest_reads() -> None:
    newer = {**_record().to_json(), "sbom": {"format": "spdx"}}
    record = manifest.BuildManifest.from_json(newer)
    assert record == _record() and "sbom" not in record.to_json()
    sparse = manifest.BuildManifest.from_json(
        {"manifest_version": "1", "expected_modules": ["amp_C"], "cell": None}
    )
    assert sparse.expected_modules == ("amp_C",) and sparse.commit is None and sparse.built_for_torch is None


def test_the_record_is_frozen() -> None:
    with pytest.raises(AttributeError):
        _record().cell = "other"  # type: ignore[misc]


def test_the_parts_are_typed_and_keep_every_key_in_its_place() -> None:
    record = _record()
    assert record.parallelism
    assert (record.versions.torch, record.versions.cxx11_abi, record.parallelism.max_jobs) == (
        "2.13.0",
        True,
        2,
    )
    newer = manifest.Versions.from_json({"torch": "2.13.0", "nvcc_source": "pypi", "gcc": None})
    assert newer.to_json() == {"torch": "2.13.0", "nvcc_source": "pypi", "gcc": None}
    assert list(newer.updated(gcc="12").to_json()) == ["torch", "nvcc_source", "gcc"]
    inside = record.build.updated(wheel="apex-0.1+x.whl", wheel_sha256=None)
    assert inside.wheel_sha256 is None and inside.to_json() == {
        "wall_s": 1.5,
        "wheel": "apex-0.1+x.whl",
        "wheel_sha256": None,
    }


EVIDENCE = REPO / "tests" / "fixtures" / "evidence" / "manifests"
MANIFESTS = sorted(EVIDENCE.glob("*.json"))


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_manifests_the_builder_wrote_read_and_write_back_unchanged(path: Path) -> None:
    """tests/fixtures/evidence holds manifests the apex builder wrote on real builds (H200, CPU CI); the
    older ones lack fields added since (absent_at_ref, flag_style, wheel_identity), written back as defaults."""
    data = manifest.load(path, "--manifest")
    record = manifest.BuildManifest.from_json(data)
    written = record.to_json()
    assert {k: written[k] for k in data} == data
    assert {k: written[k] for k in set(written) - set(data)} in ({}, *_defaults_of(set(written) - set(data)))
    assert isinstance(record.versions, manifest.Versions) and isinstance(record.build, manifest.BuildStats)


def _defaults_of(keys: set[str]) -> list[dict]:
    empty = manifest.BuildManifest().to_json()
    return [{k: empty[k] for k in keys}]
