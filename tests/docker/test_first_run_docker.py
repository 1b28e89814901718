"""A newcomer's first run against a real engine: what a newcomer sees from build.py itself. A git host the build
cannot reach is exit 3 naming --apex-src; `build.py verify` prints the failing checks and says "not
installed" when there is no Apex; `build.py report` shows that run; an image without Apex (here with a
CPU-only torch) is tagged and labelled for what it holds."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO, run_build
from toolchain.image import buildkit_build, docker_host, inspect_image
from verify.runtime import exit_codes

LOCAL = ("--python", "3.11", "--os", "debian12", "--base-devel", "apex-toolchain/base:bookworm",
         "--base-runtime", "apex-toolchain/base:bookworm")  # fmt: skip


def _result(out: Path) -> dict:
    (path,) = out.glob("cells/*/result.json")
    return json.loads(path.read_text())


def test_an_unreachable_git_host_is_exit_3_naming_apex_src(docker_client, tmp_path: Path) -> None:
    """A git host on a port nothing listens on: the network check finds it before any stage runs; with
    --no-network-check, the apex-src stage's git fetch inside the build container says the same."""
    argv = ("image", "--cuda", "12.4", "--archs", "8.0", *LOCAL, "--apex-repo", "http://127.0.0.1:9/apex.git",
            "--target", "apex-src", "--progress", "plain", "--out", str(tmp_path / "out"), "--logs",
            str(tmp_path / "logs"))  # fmt: skip
    first = run_build(*argv, timeout=300)
    said = first.stdout + first.stderr
    assert first.returncode == exit_codes.ENVIRONMENT, said
    assert (
        "Apex source (git) http://127.0.0.1:9/apex.git cannot be reached" in said and "--apex-src DIR" in said
    )
    assert "nothing was built" in said and not (tmp_path / "logs").exists()
    done = run_build(*argv, "--no-network-check", timeout=900)
    said = done.stdout + done.stderr
    assert done.returncode == exit_codes.ENVIRONMENT, said
    assert "the Apex git host cannot be reached from the build" in said and "--apex-src DIR" in said
    assert "Traceback" not in said
    assert _result(tmp_path / "out")["status"] == "environment_unavailable"
    log = next((tmp_path / "logs").rglob("build.log")).read_text()
    assert "apex-src stage: cannot reach http://127.0.0.1:9/apex.git" in log
    assert log.count("$ ") == 1, "an unreachable git host is not retried"


def test_build_py_verify_lists_the_failing_checks_and_report_shows_them(
    verify_image_tag: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = run_build("verify", verify_image_tag, "--gpu", "none", "--out", str(out), timeout=600)
    assert done.returncode == exit_codes.FAILED, done.stdout + done.stderr
    assert f"{verify_image_tag}: verify exit 1" in done.stdout
    failing = [line.strip() for line in done.stdout.splitlines() if line.startswith("  FAIL  ")]
    assert failing, done.stdout
    # no Apex in this image: each expected module is "not installed", never a "Python-only fallback"
    amp = next(line for line in failing if line.startswith("FAIL  extensions.amp_C  "))
    assert "not installed: NVIDIA Apex is not installed" in amp and "fallback" not in done.stdout
    report = run_build("report", "--out", str(out))
    assert report.returncode == exit_codes.OK, report.stderr
    row = next(line for line in (out / "matrix-report.md").read_text().splitlines()
               if line.startswith(f"| {verify_image_tag} "))  # fmt: skip
    assert "FAIL (static" in row and "not installed" in row, row


def test_a_cpu_torch_image_without_apex_is_not_labelled_as_apex(
    docker_client, wheelhouse: Path, tmp_path: Path
) -> None:
    """build.py image --target verify-runtime for a CUDA cell whose wheelhouse holds the CPU torch."""
    out = tmp_path / "out"
    done = run_build("image", "--cuda", "13.0", "--torch", "2.13.0", *LOCAL, "--target", "verify-runtime",
                     "--wheelhouse", str(wheelhouse), "--progress", "plain", "--out", str(out), "--logs",
                     str(tmp_path / "logs"), timeout=1200)  # fmt: skip
    assert done.returncode == exit_codes.OK, done.stdout[-3000:] + done.stderr
    tag = _result(out)["build"]["tag"]
    assert tag == "verify-runtime-torch2.13.0-cpu-py3.11-debian12"
    info = inspect_image.inspect(tag)
    labels = info["labels"]
    assert labels["target"] == "verify-runtime" and labels["cuda"] == "cpu" and labels["cell"] == tag
    assert not {"archs", "apex.ref", "apex.flags"} & set(labels), labels
    assert "no Apex" in info["oci"]["title"] and info["manifest"] is None
    refused = run_build("image", "--cuda", "13.0", "--torch", "2.13.0", *LOCAL, "--target", "runtime-slim",
                        "--wheelhouse", str(wheelhouse), "--out", str(tmp_path / "out2"), "--logs",
                        str(tmp_path / "logs2"))  # fmt: skip
    assert refused.returncode == exit_codes.USAGE and "compiles Apex's CUDA extensions" in refused.stderr
    docker_client.images.remove(tag)


def test_a_tls_failure_in_the_build_names_extra_ca(docker_client, verify_image_tag: str) -> None:
    """pip in the image without the host's CA (on machines where PyPI needs it): the engine reads pip's real
    error as an environment fault whose fix is --extra-ca."""
    import docker

    script = "pip download --no-deps --retries 0 --timeout 20 --index-url https://pypi.org/simple -d /tmp/x packaging 1>&2"  # pip says it on stdout
    try:
        docker_client.containers.run(verify_image_tag, ["sh", "-c", script], remove=True)
        pytest.skip("PyPI's certificate verifies in containers here without the host's CA bundle")
    except docker.errors.ContainerError as error:
        said = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else str(error)
    if "CERTIFICATE_VERIFY_FAILED" not in said:
        pytest.skip(f"pip failed for another reason here (no network to PyPI?): {said[-300:]}")
    fault = buildkit_build.environment_fault(said)
    assert fault, said
    message, retry = fault
    assert "pass that CA bundle with --extra-ca PEM" in message and not retry


def test_a_plain_docker_build_of_runtime_slim_is_refused_naming_runtime_os(docker_client) -> None:
    """runtime-slim shares runtime-base with the other runtime targets, so on the default RUNTIME_OS it would
    stand on the CUDA runtime base: its slim-guard stage (run beside the Apex build) refuses, naming the arg;
    with RUNTIME_OS=slim, what build.py passes for that target, it passes."""
    prefix = docker_host.client_or_default().build_prefix()
    base = "apex-toolchain/base:bookworm"
    args = [f"--build-arg={k}={base}" for k in ("BASE_DEVEL_IMAGE", "BASE_RUNTIME_IMAGE", "BASE_SLIM_IMAGE")]
    command = [*prefix, "--file", buildkit_build.DOCKERFILE, "--target", "slim-guard", "--progress", "plain",
               *args, "--build-arg=PYTHON_VERSION=3.11", "."]  # fmt: skip
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    plain = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    said = plain.stdout + plain.stderr
    assert plain.returncode != 0, said
    assert "--target runtime-slim stands on BASE_SLIM_IMAGE" in said and "--build-arg RUNTIME_OS=slim" in said
    slim = subprocess.run(
        [*command[:-1], "--build-arg=RUNTIME_OS=slim", "."],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert slim.returncode == 0, slim.stdout + slim.stderr
