"""The tier's real sm_90 wheel, delivered the way users install it: `build.py index --image TAG`, served on
127.0.0.1, installed by pip and by uv into the image's own torch 2.11 venv (Apex removed from it first) in
containers on the host network, `python -m verify --static` PASS from the wheel's own manifest; on this
machine's torch (another minor) pip and uv refuse it with their resolver errors. Then the publish path's
last steps on the same wheel: `pip install apex-verify --index-url INDEX/simple` and `apex-verify install
--index INDEX` in the image's venv (PASS), and an image built from the index instead of a compile
(`build.py image --apex-index INDEX`): the identical wheel, gated, with its build time beside the compile's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import wheel_builds as wb
from tests.support import REPO, run_build

STACK = "torch2.11-cu130"
VERSION = "0.1+g6424da3.cu130.torch2.11"
# the image's venv without its Apex, then the wheel from the index, then verify with no manifest named
INSTALL = """set -e
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip uninstall -y -q apex
{install}
python -c 'import importlib.metadata as m; print("installed apex", m.version("apex"))'
cd /tmp && env -u APEX_BUILD_MANIFEST python -m verify --static --json /tmp/report.json > /tmp/verify.log 2>&1 \
  || {{ tail -20 /tmp/verify.log; exit 1; }}
tail -1 /tmp/verify.log
python -c 'import json; r = json.load(open("/tmp/report.json")); print("REPORT", json.dumps({{"verdict": r["verdict"], "version": r["apex"]["distribution"]["version"], "origin": r["manifest"]["origin"]}}))'
"""


@pytest.fixture(scope="module")
def index_served(apex_image, tmp_path_factory):
    index = tmp_path_factory.mktemp("wheel-index-image") / "index"
    done = wb.run_index("--image", apex_image.tag, "--index", index, work=index.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolchain.index.serve", str(index), "--port", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    url = proc.stdout.readline().rsplit(" ", 1)[-1].strip()
    yield index, f"{url}{STACK}/simple", url
    proc.terminate()
    proc.wait(timeout=10)


def test_index_from_the_image_lists_the_stack_with_its_arch_commit_and_verdict(index_served) -> None:
    index, _, _ = index_served
    (row,) = json.loads((index / "stacks.json").read_text())["stacks"]
    assert row["stack"] == STACK and row["archs"] == ["9.0"] and row["verify"] == ["PASS"]
    assert row["apex_commits"] == ["6424da3b4faa6c8f062da4a48c424fff3f02d42d"]
    (wheel,) = row["wheels"]
    assert wheel.startswith(f"apex-{VERSION}-cp311-cp311-")
    (check,) = (index / STACK / "files").glob("*/wheel-check.json")
    needed = {lib for libs in json.loads(check.read_text())["needed_libraries"].values() for lib in libs}
    print(f"\nDT_NEEDED of the sm_90 wheel's modules: {sorted(needed)}")
    assert "libtorch.so" in needed or "libc10.so" in needed


def test_index_from_the_runs_out_folder_takes_the_same_wheel_from_the_cells_image(
    apex_image, index_served, tmp_path
):
    index, _, _ = index_served
    done = wb.run_index(apex_image.out, "--index", tmp_path / "index", work=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "index" / "stacks.json").read_bytes() == (index / "stacks.json").read_bytes()


def _install_in_image(docker_client, tag: str, install: str, volumes: dict | None = None) -> str:
    out = docker_client.containers.run(
        tag,
        ["bash", "-c", INSTALL.format(install=install)],
        user="0",
        network_mode="host",
        remove=True,
        volumes=volumes or {},
        stderr=True,
    )
    return out.decode(errors="replace")


def _report(output: str) -> dict:
    return json.loads(next(line for line in output.splitlines() if line.startswith("REPORT "))[7:])


def test_pip_installs_it_into_the_images_torch_and_verify_static_passes(
    apex_image, docker_client, index_served
):
    _, url, _ = index_served
    output = _install_in_image(
        docker_client, apex_image.tag, f"python -m pip install --no-cache-dir apex --index-url {url}"
    )
    assert f"installed apex {VERSION}" in output, output
    assert _report(output) == {"verdict": "PASS", "version": VERSION, "origin": "the installed wheel"}, output


def test_uv_installs_it_into_the_images_torch_and_verify_static_passes(
    apex_image, docker_client, index_served
):
    uv = wb.uv_binary()
    _, url, _ = index_served
    output = _install_in_image(
        docker_client,
        apex_image.tag,
        f"uv pip install --no-cache --python /opt/venv/bin/python apex --index-url {url}",
        {uv: {"bind": "/usr/local/bin/uv", "mode": "ro"}},
    )
    assert f"installed apex {VERSION}" in output, output
    assert _report(output)["verdict"] == "PASS", output


def test_pip_and_uv_refuse_it_on_this_machines_torch_minor(index_served, tmp_path: Path) -> None:
    import torch

    assert not torch.__version__.startswith("2.11.")
    _, url, _ = index_served
    python, env = wb.torch_venv(tmp_path / "venv"), wb.isolated_pip_env()
    pip = wb.pip_install_apex(python, url, env)
    print(f"\npip on torch {torch.__version__}:\n{pip.stderr.strip()}")
    assert pip.returncode == 1 and "No matching distribution found for torch==2.11.*" in pip.stderr, (
        pip.stderr
    )
    uv = wb.uv_pip_install(sys.executable, url, env, "--system", "--dry-run")
    print(f"uv on torch {torch.__version__}:\n{uv.stderr.strip()}")
    assert uv.returncode != 0 and "torch==2.11.*" in uv.stderr, uv.stderr


def test_apex_verify_install_from_the_served_index_passes_in_the_images_torch(
    apex_image, docker_client, index_served
):
    """What the README's two lines do: apex-verify from the index's own simple/ (no stack named), then the one
    command, which finds torch2.11-cu130 from the image's torch and installs its wheel with torch pinned."""
    _, _, root = index_served
    output = _install_in_image(
        docker_client,
        apex_image.tag,
        f"python -m pip install --no-cache-dir apex-verify --index-url {root}simple\n"
        f"apex-verify install --index {root}",
    )
    assert f"-> {STACK} (apex-{VERSION}-" in output, output
    assert "apex-verify install: PASS" in output and "torch 2.11.0" in output, output
    assert _report(output) == {"verdict": "PASS", "version": VERSION, "origin": "the installed wheel"}, output


def test_an_image_from_the_index_ships_the_identical_wheel_gated_without_a_compile(
    apex_image, docker_client, index_served, tmp_path
):
    """`build.py image --apex-index INDEX`: the same cell, its Apex taken from the index (no apex-src, no
    compile); the image's wheel is the index's byte for byte, its gate report PASS, `build.py verify` PASS."""
    import hashlib
    import shlex
    import time

    from tests.apex_image.conftest import BUILD_TIMEOUT_S, _host_ca_bundle, _run_bounded, no_registry_argv

    index, _, root = index_served
    argv = no_registry_argv(Path("unused"), tmp_path / "out", tmp_path / "logs", _host_ca_bundle())
    at = argv.index("--apex-src")
    argv[at : at + 2] = ["--apex-index", root]
    if "--tag" not in argv:  # beside the compiled image, not over it (the suite's cleanup knows apex-ci-*)
        argv += ["--tag", "apex-ci-from-index"]
    start = time.monotonic()
    code = _run_bounded(argv, tmp_path / "console.log", BUILD_TIMEOUT_S)
    wall = time.monotonic() - start
    console = (tmp_path / "console.log").read_text(errors="replace")
    print(
        f"\nimage from the index: `{shlex.join(argv[1:])}` exit {code} in {wall:.0f} s "
        f"(compiled: {apex_image.wall_s:.0f} s)"
    )
    assert code == 0, console[-3000:]
    (result,) = (tmp_path / "out" / "cells").glob("*/result.json")
    tag = json.loads(result.read_text())["build"]["tag"]
    (published,) = (index / STACK / "files").glob("*/apex-*.whl")
    script = (
        "cat /opt/apex/apex-build.log; sha256sum /opt/apex/apex-*.whl; "
        'python -c \'import json; print("GATE", json.load(open("/opt/apex/verify-static.json"))["verdict"])\''
    )
    out = docker_client.containers.run(tag, ["bash", "-c", script], remove=True).decode(errors="replace")
    assert "apex from an index (no compile)" in out, out
    assert hashlib.sha256(published.read_bytes()).hexdigest() in out, out
    assert "GATE PASS" in out, out
    verified = run_build("verify", tag, "--out", str(tmp_path / "verify"))
    assert verified.returncode == 0, verified.stdout + verified.stderr
