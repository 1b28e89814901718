"""Docker tier: the real Dockerfile's CUDA-free stages built by a real engine (see scripts/ensure-docker.sh).

Images are built once per session and shared: the local debootstrap base stands in for the CUDA
bases, torch comes from an offline wheelhouse made from the CPU wheel on disk, and the build is
given an extra CA (the host's bundle plus a throwaway test CA) as a BuildKit secret.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from toolchain.errors import EnvironmentUnavailable
from toolchain.image import buildkit_build, docker_host
from toolchain.spec.cell import Cell

BASE_IMAGE = os.environ.get("APEX_TEST_BASE_IMAGE", "apex-toolchain/base:bookworm")
TORCH_WHEEL = Path(
    os.environ.get(
        "APEX_TEST_TORCH_WHEEL", "/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    )
)
TORCH_VERSION = "2.13.0+cpu"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# the wheels the debian12 base can install (glibc 2.36, x86_64): what `pip download` fetches for it
_IMAGE_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
CI_TAG = "apex-ci-verify-torch2.13.0-cpu-py3.11-debian12"


def make_cell(tag: str = CI_TAG, torch: str = TORCH_VERSION) -> Cell:
    """A CPU cell for the CUDA-free stages (the matrix itself only holds CUDA cells)."""
    return Cell(
        id=tag, name=tag, cuda="cpu", torch=torch, python="3.11", os="debian12", gcc="12", archs=(),
        apex_repo="https://github.com/NVIDIA/apex.git", apex_ref="6424da3b4faa6c8f062da4a48c424fff3f02d42d",
        apex_flags={}, extras=(), base_devel=BASE_IMAGE, base_runtime=BASE_IMAGE,
        torch_index_url=TORCH_CPU_INDEX,
    )  # fmt: skip


@pytest.fixture(scope="session")
def docker_client():
    try:
        docker_host.ping()
        docker_host.docker_client()
    except EnvironmentUnavailable as error:
        pytest.skip(f"no usable Docker engine ({error}); run scripts/ensure-docker.sh")
    import docker

    client = docker.from_env(timeout=300)
    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"no base image {BASE_IMAGE}; run scripts/ensure-docker.sh")
    return client


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch's CPU wheel (the file at TORCH_WHEEL where there is one, else from PyTorch's CPU index) plus its
    dependencies and the build requirements, fetched on the host for the image's Python (not the host's)."""
    house = tmp_path_factory.mktemp("wheelhouse")
    torch = (
        [str(TORCH_WHEEL)]
        if TORCH_WHEEL.is_file()
        else ["--extra-index-url", TORCH_CPU_INDEX, f"torch=={TORCH_VERSION}"]
    )
    python = make_cell().python
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(house),
         "--python-version", python, "--implementation", "cp", "--abi", "cp" + python.replace(".", ""),
         *(f"--platform={p}" for p in _IMAGE_PLATFORMS), *torch, "setuptools>=70.1", "packaging", "ninja", "pip>=23.1"],
        check=True, timeout=600,
    )  # fmt: skip
    return house


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    """The extra-CA secret: the host's bundle (what PyPI needs here) + a unique throwaway CA whose
    text must never show up in an image layer."""
    where = tmp_path_factory.mktemp("ca")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         f"/CN=apex-toolchain-test-ca-{uuid.uuid4().hex[:8]}", "-keyout", str(where / "key.pem"),
         "-out", str(where / "ca.pem")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    unique = (where / "ca.pem").read_text()
    host = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
    bundle = where / "extra-ca.pem"
    bundle.write_text((host.read_text() if host.is_file() else "") + unique)
    body = [line for line in unique.splitlines() if line and not line.startswith("-----")]
    return {"bundle": bundle, "marker": body[len(body) // 2]}  # a line of base64 only this CA has


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("build-logs")


@pytest.fixture(scope="session")
def verify_image_tag(docker_client, wheelhouse: Path, test_ca: dict, logs: Path) -> str:
    """The verify-runtime target of the real Dockerfile, built once per session (cached after)."""
    result = buildkit_build.build_image(
        make_cell(), target="verify-runtime", log_path=logs / "verify-runtime.log", wheelhouse=wheelhouse,
        extra_ca=test_ca["bundle"], progress="plain",
    )  # fmt: skip
    assert result.ok, f"verify-runtime build failed in {result.stage_failed}:\n" + "\n".join(result.log_tail)
    return result.tag


@pytest.fixture(scope="session")
def torch_stage_tag(docker_client, wheelhouse: Path, test_ca: dict, logs: Path) -> str:
    """The torch stage itself: its layers hold the RUN steps that had the secret mounted."""
    result = buildkit_build.build_image(
        make_cell(CI_TAG + "-torch-stage"), target="torch", log_path=logs / "torch.log", wheelhouse=wheelhouse,
        extra_ca=test_ca["bundle"], progress="plain",
    )  # fmt: skip
    assert result.ok, "\n".join(result.log_tail)
    return result.tag


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    """The debootstrap base: a Debian with no Python at all."""
    return BASE_IMAGE


@pytest.fixture(scope="session")
def cell_factory():
    return make_cell


# An image like NGC PyTorch or a user's own: a Python with torch, and no verify, no toolchain labels.
_TORCH_ONLY_DOCKERFILE = """\
FROM {devel}
RUN --mount=type=bind,source=.,target=/wheels pip install --no-index --no-cache-dir --find-links /wheels torch \\
 && ! python -c "import verify" 2>/dev/null
"""


@pytest.fixture(scope="session")
def torch_only_image_tag(
    docker_client, wheelhouse: Path, logs: Path, tmp_path_factory: pytest.TempPathFactory
):
    """The local base + Python (the Dockerfile's devel stage) + torch from the wheelhouse; verify absent.
    Unique tags per session, removed afterwards (the daemon is shared)."""
    unique = uuid.uuid4().hex[:8]
    devel = make_cell(f"apex-ci-devel-{unique}")
    result = buildkit_build.build_image(devel, target="devel", log_path=logs / "devel.log", progress="plain")
    assert result.ok, "\n".join(result.log_tail)
    tag = f"apex-ci-torch-only-{unique}:latest"
    dockerfile = tmp_path_factory.mktemp("torch-only") / "Dockerfile"
    dockerfile.write_text(_TORCH_ONLY_DOCKERFILE.format(devel=devel.id))
    client = docker_host.docker_client()
    with open(logs / "torch-only.log", "w") as log:
        done = subprocess.run(
            [
                *client.build_prefix(),
                "--progress",
                "plain",
                "--file",
                str(dockerfile),
                "--tag",
                tag,
                str(wheelhouse),
            ],
            env=dict(os.environ, DOCKER_BUILDKIT="1"),
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=False,
        )
    assert done.returncode == 0, (logs / "torch-only.log").read_text()[-3000:]
    yield tag
    import docker

    for name in (tag, devel.id):
        try:
            docker_client.images.remove(name, noprune=False)
        except docker.errors.APIError:  # best effort: another test may still hold a container
            pass


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory):
    """A real distribution registry (Debian's docker-registry) on a free localhost port, storage in a temp
    dir; stopped at the end. {"host": "127.0.0.1:PORT", "storage": Path}. Docker treats 127.0.0.0/8 as
    an insecure (http) registry by default; podman is told so with APEX_PODMAN_TLS_VERIFY=false."""
    import shutil
    import signal
    import socket
    import time
    import urllib.request

    binary = shutil.which("docker-registry")
    if not binary:
        pytest.skip(
            "docker-registry is not installed; run scripts/ensure-docker.sh (apt-get install docker-registry)"
        )
    where = tmp_path_factory.mktemp("registry")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (where / "config.yml").write_text(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {where / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: apex-toolchain-tests\n"
    )
    log = open(where / "registry.log", "w")  # noqa: SIM115 - open for the registry's lifetime
    process = subprocess.Popen(
        [binary, "serve", str(where / "config.yml")], stdout=log, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail("docker-registry did not answer: " + (where / "registry.log").read_text()[-2000:])
        time.sleep(0.3)
    yield {"host": f"127.0.0.1:{port}", "storage": where / "data"}
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()
