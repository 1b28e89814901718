"""The README's no-registry command, run for real: an image with Apex compiled for sm_90 from a local Debian
base, CUDA from NVIDIA's wheels and torch's CUDA wheel, gated in the build, slim, and verified by build.py."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.support import REPO, run_build
from toolchain.image import inspect_image
from verify.layers import fatbin
from verify.runtime import exit_codes

CUDA_FLAG = "APEX_CUDA_EXT"  # the core CUDA modules: amp_C, fused_layer_norm_cuda, syncbn, mlp_cuda, ...


def _file_from_image(client, tag: str, path: str, dest: Path) -> Path:
    container = client.containers.create(tag)  # created, never started: only its filesystem is read
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            member = next(m for m in archive.getmembers() if m.isfile())
            extracted = archive.extractfile(member)
            assert extracted, member.name  # a regular file's member has contents
            dest.write_bytes(extracted.read())
    finally:
        container.remove(force=True)
    return dest


def _in_image(client, tag: str, script: str) -> str:
    return client.containers.run(tag, ["bash", "-c", script], remove=True).decode()


def test_the_image_is_labelled_for_what_it_holds(apex_image) -> None:
    info = inspect_image.inspect(apex_image.tag)
    labels = info["labels"]
    assert labels["target"] == "runtime-slim" and labels["archs"] == "9.0" and labels["cuda"] == "13.0"
    assert labels["torch"] == "2.11.0" and labels["apex.flags"] == "APEX_CPP_EXT=1 APEX_CUDA_EXT=1"
    assert info["oci"]["base.name"] == "apex-toolchain/base:bookworm"
    assert info["user"] == "10001" and info["cmd"] == ["python", "-m", "verify"]
    assert info["consistency_problems"] == []
    manifest = info["manifest"]
    assert manifest["arch_list"] == "9.0" and manifest["apex"]["source"] == "dir:apex-src"
    versions = manifest["versions"]
    # nvcc came from the package index (the base has none), the toolkit torch's CUDA asks for
    assert versions["nvcc_source"] == "pypi", versions
    assert versions["torch"].startswith("2.11.0") and versions["torch_cuda"].startswith("13.0")
    assert versions["nvcc"].startswith("13.0.")
    assert manifest["build"]["cuda_from_pypi"]["cuda_home"].startswith("/opt/cuda-from-pypi/13.0-")
    assert versions["cuda_wheels"]["nvidia-cuda-nvcc"].startswith("13.0."), versions["cuda_wheels"]


def test_the_in_build_gate_passed_on_compiled_modules(apex_image) -> None:
    info = inspect_image.inspect(apex_image.tag)
    report, expected = info["static_report"], info["manifest"]["expected_modules"]
    assert report["mode"] == "static" and report["verdict"] == "PASS", [
        (c["id"], c["summary"]) for c in report["checks"] if c["status"] == "FAIL"
    ]
    assert {"apex_C", "amp_C", "fused_layer_norm_cuda"} <= set(expected)
    by_module = {e["module"]: e for e in report["extensions"]}
    for module in expected:
        ext = by_module[module]
        assert ext["status"] == "ok" and ext["path"].endswith(".so"), ext
        if ext["flag"] == CUDA_FLAG:  # the gate read each CUDA module's fatbin: native SASS for sm_90 only
            assert ext["arch"]["sass"] == ["sm_90"] and ext["arch"]["ptx"] == [], ext


def test_fatbin_reader_finds_sm90_sass_in_every_cuda_module(
    apex_image, docker_client, tmp_path: Path
) -> None:
    """The modules copied out of the image and read here by verify's fatbin reader, not by the image's verify."""
    info = inspect_image.inspect(apex_image.tag)
    cuda_modules = [
        e
        for e in info["static_report"]["extensions"]
        if e["flag"] == CUDA_FLAG and e["module"] in info["manifest"]["expected_modules"]
    ]
    assert len(cuda_modules) >= 10, [e["module"] for e in cuda_modules]  # the core set, not a stray one
    for ext in cuda_modules:
        so = _file_from_image(docker_client, apex_image.tag, ext["path"], tmp_path / Path(ext["path"]).name)
        targets = fatbin.read_targets(so)
        assert targets is not None and targets.sass == ["sm_90"] and targets.ptx == [], (
            ext["module"],
            targets,
        )
        assert (
            fatbin.compatibility(targets, (9, 0)).compatible
            and not fatbin.compatibility(targets, (8, 0)).compatible
        )


def test_the_slim_image_has_no_second_cuda(apex_image, docker_client) -> None:
    """runtime-slim: the CUDA libraries come only with torch's wheels in the venv; no toolkit, no CUDA base."""
    outside = _in_image(
        docker_client,
        apex_image.tag,
        "find / -xdev \\( -name 'libcudart.so*' -o -name 'libcublas.so*' -o -name nvcc -o -name 'cuda.h' \\) "
        "-not -path '/opt/venv/*' 2>/dev/null; ls -d /usr/local/cuda /opt/cuda-from-pypi 2>/dev/null; true",
    )
    assert outside.split() == [], outside
    inside = _in_image(docker_client, apex_image.tag, "find /opt/venv -name 'libcudart.so*' | head -1")
    assert "/site-packages/nvidia/" in inside
    # what lies outside the venv (OS, Python, /opt/apex) is small: a CUDA runtime base would add gigabytes
    venv = int(_in_image(docker_client, apex_image.tag, "du -sb /opt/venv | cut -f1"))
    size = docker_client.images.get(apex_image.tag).attrs["Size"]
    print(
        f"\nruntime-slim {apex_image.tag}: image {size / 1e9:.2f} GB, venv {venv / 1e9:.2f} GB, "
        f"the rest {(size - venv) / 1e6:.0f} MB; built in {apex_image.wall_s:.0f} s"
    )
    assert size - venv < 600e6, (size, venv)


def test_the_gate_ran_again_in_the_slim_stage(apex_image, docker_client, tmp_path: Path) -> None:
    slim = json.loads(
        _file_from_image(
            docker_client, apex_image.tag, "/opt/apex/verify-static-slim.json", tmp_path / "slim.json"
        ).read_text()
    )
    assert slim["verdict"] == "PASS" and slim["environment"]["python"]["executable"].startswith("/opt/venv/")


def test_build_py_verify_passes_and_report_shows_it(apex_image, tmp_path: Path) -> None:
    """`build.py verify IMAGE` on this GPU-less daemon runs verify --static in the image: PASS, exit 0; then
    `build.py report` gives the image its row."""
    out = tmp_path / "out"
    done = run_build("verify", apex_image.tag, "--gpu", "none", "--out", str(out), timeout=600)
    assert done.returncode == exit_codes.OK, done.stdout + done.stderr
    assert f"{apex_image.tag}: verify exit 0" in done.stdout and "FAIL  " not in done.stdout
    report = json.loads(next(out.rglob("report.json")).read_text())
    assert (
        report["verdict"] == "PASS" and report["mode"] == "static" and report["host"]["in_container"] is True
    )
    table = subprocess.run(
        [sys.executable, "build.py", "report", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert table.returncode == 0, table.stderr
    row = next(
        line
        for line in (out / "matrix-report.md").read_text().splitlines()
        if line.startswith(f"| {apex_image.tag} ")
    )
    assert "PASS (static" in row and "2.11.0" in row, row
