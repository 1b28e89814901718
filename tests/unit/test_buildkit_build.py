"""The BuildKit build's command, context and log reading, without a daemon (the docker tier builds for real)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.image import build_log, buildkit_build, docker_host
from toolchain.spec import image_labels
from toolchain.spec.cell import Cell
from verify.domain.arch import Arch

# BuildKit's plain progress for a step that failed (shape of a real 20.10 log).
FAILED_LOG = """\
#9 [torch 1/5] RUN --mount=type=cache,target=/root/.cache/pip sh with-extra-ca.sh bash install-torch.sh
#9 0.512 torch stage: offline from the wheelhouse wheelhouse
#9 1.204 ERROR: No matching distribution found for torch==0.0.1
#9 ERROR: executor failed running [/bin/bash -o pipefail -c sh with-extra-ca.sh bash install-torch.sh]: exit code: 1
------
 > [torch 1/5] RUN --mount=type=cache,target=/root/.cache/pip sh with-extra-ca.sh bash install-torch.sh:
------
error: failed to solve: executor failed running [/bin/bash -o pipefail -c ...]: exit code: 1
""".splitlines()


def cell(**overrides: object) -> Cell:
    values: dict[str, Any] = dict(
        id="apex-6424da3-torch2.11.0-cu13.0-py3.12-ubuntu24.04", name="cu130", cuda="13.0", torch="2.11.0",
        python="3.12", os="ubuntu24.04", gcc="13", archs=(Arch(9, 0),), apex_repo="https://github.com/NVIDIA/apex.git",
        apex_ref="6424da3b4faa6c8f062da4a48c424fff3f02d42d", apex_flags={"APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1"},
        extras=(), base_devel="nvidia/cuda:13.0.0-devel-ubuntu24.04", base_runtime="nvidia/cuda:13.0.0-runtime-ubuntu24.04",
        torch_index_url="https://download.pytorch.org/whl/cu130",
    )  # fmt: skip
    values.update(overrides)
    return Cell(**values)


def test_command_carries_target_args_secret_and_tag(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    client = docker_host.DockerClient("/usr/bin/docker", False, "20.10.24")
    command = buildkit_build.build_command(
        cell(), target="runtime", extra_ca=ca, wheelhouse=tmp_path, client=client
    )
    assert command[:2] == ["/usr/bin/docker", "build"] and command[-1] == "."
    assert command[command.index("--target") + 1] == "runtime"
    assert command[command.index("--progress") + 1] == "plain"
    assert command[command.index("--tag") + 1] == cell().id
    assert "TORCH_CUDA_ARCH_LIST=9.0" in command and "TORCH_WHEELHOUSE=wheelhouse" in command
    assert f"id=extra_ca,src={ca.resolve()}" in command
    buildx = buildkit_build.build_command(cell(), client=docker_host.DockerClient("docker", True, "28.2.2"))
    assert buildx[:4] == ["docker", "buildx", "build", "--load"]


def _pairs(command: list[str], option: str) -> dict[str, str]:
    return dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == option)


def test_command_carries_the_targets_labels_and_no_label_only_build_arg() -> None:
    client = docker_host.DockerClient("/usr/bin/docker", False, "20.10.24")
    # what build_image adds to the cell's args
    provenance = {"BUILD_DATE": "2026-12-01T00:00:00+00:00", "SOURCE_REVISION": "abc123",
                  "BASE_DEVEL_DIGEST": "sha256:d", "BASE_RUNTIME_DIGEST": "sha256:r"}  # fmt: skip
    for target in ("runtime", "runtime-slim", "verify-runtime"):
        command = buildkit_build.build_command(cell(), target=target, extra_args=provenance, client=client)
        build_args = _pairs(command, "--build-arg")
        assert _pairs(command, "--label") == image_labels.for_image(
            target, {**build_args, **provenance, "BASE_ROUTE": cell().base_route}
        )
        assert set(_pairs(command, "--label")) == image_labels.BY_TARGET[target]
        assert (
            not image_labels.LABEL_ONLY_ARGS & set(build_args)
            and build_args["BASE_DEVEL_DIGEST"] == "sha256:d"
        )
    runtime = _pairs(buildkit_build.build_command(cell(), extra_args=provenance, client=client), "--label")
    assert runtime[image_labels.OCI + "created"] == "2026-12-01T00:00:00+00:00"
    assert runtime[image_labels.CELL] == cell().id
    assert runtime[image_labels.OCI + "base.digest"] == "sha256:r"
    torch_stage = buildkit_build.build_command(
        cell(), target="torch", client=client
    )  # a stage, not a shipped image
    assert "--label" not in torch_stage


def test_a_ca_path_with_commas_stays_one_secret_field(tmp_path: Path) -> None:
    ca = tmp_path / 'corp,env=HOME,"x".pem'  # --secret is a CSV line to docker: a comma would start a field
    ca.write_text("x")
    command = buildkit_build.build_command(
        cell(), extra_ca=ca, client=docker_host.DockerClient("/usr/bin/docker", False, "20.10")
    )
    fields = next(csv.reader([command[command.index("--secret") + 1]]))
    assert fields == ["id=extra_ca", f"src={ca.resolve()}"]


def test_unknown_target_and_progress_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="no such Dockerfile stage"):
        buildkit_build.build_command(cell(), target="runtim")
    with pytest.raises(UsageError, match="--progress"):
        buildkit_build.build_command(cell(), progress="fancy")


def test_every_target_is_a_stage_of_the_dockerfile() -> None:
    text = (buildkit_build.REPO_ROOT / buildkit_build.DOCKERFILE).read_text()
    for target in buildkit_build.TARGETS:
        assert f" AS {target}\n" in text


def test_failed_step_is_read_from_the_log() -> None:
    stage, step = build_log.failed_step(FAILED_LOG)
    assert stage == "torch" and step and step.startswith("[torch 1/5] RUN")
    assert build_log.failed_step(["#1 [internal] load build definition"]) == (None, None)


@pytest.mark.parametrize(
    ("text", "needle", "retry"),
    [
        (
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
            "no Docker daemon",
            False,
        ),
        (
            "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock",
            "not permitted",
            False,
        ),
        ("#7 12.3 OSError: [Errno 28] No space left on device", "disk is full", False),
        (
            "failed to solve: failed to resolve source metadata for docker.io/nvidia/cuda:13.0.0-devel-ubuntu24.04",
            "base image",
            True,
        ),
        ("pull access denied for apex-toolchain/base, repository does not exist", "base image", True),
    ],
)
def test_environment_faults_are_recognised(text: str, needle: str, retry: bool) -> None:
    fault = build_log.environment_fault(text)
    assert fault, text
    message, retryable = fault
    assert needle in message and retryable is retry
    assert build_log.environment_fault("\n".join(FAILED_LOG)) is None


def test_private_context_holds_only_what_the_dockerfile_reads(tmp_path: Path) -> None:
    house = tmp_path / "house"
    house.mkdir()
    (house / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"wheel")
    context = buildkit_build.stage_context(tmp_path / "ctx", wheelhouse=house)
    assert (context / "docker" / "Dockerfile").is_file() and (context / "verify" / "cli.py").is_file()
    assert (context / "docker/build-inputs/wheelhouse").is_dir() and not (context / "tests").exists()
    with pytest.raises(UsageError, match="no .whl files"):
        buildkit_build.stage_context(tmp_path / "ctx2", wheelhouse=tmp_path / "ctx")
    with pytest.raises(UsageError, match="not an Apex source tree"):
        buildkit_build.stage_context(tmp_path / "ctx3", apex_src=tmp_path)


def _daemon_answers() -> bool:
    try:
        docker_host.ping(timeout=5)
    except EnvironmentUnavailable:
        return False
    return True


@pytest.mark.skipif(not _daemon_answers(), reason="no Docker daemon answers here")
def test_a_tag_docker_rejects_is_a_usage_error_naming_the_tag() -> None:
    import docker

    # a read-only lookup: the daemon answers 400 (invalid reference format), an APIError, not ImageNotFound
    with pytest.raises(UsageError, match=r"image 'Bad::Tag': .*invalid reference format"):
        docker_host.local_image(docker.from_env(timeout=10), "Bad::Tag")


def test_an_unreachable_daemon_during_the_lookup_is_exit_3(tmp_path: Path) -> None:
    import docker

    # a fixed API version: the client would otherwise ask the (absent) daemon for it at construction
    client = docker.DockerClient(base_url=f"unix://{tmp_path / 'no-daemon.sock'}", version="1.41", timeout=5)
    with pytest.raises(EnvironmentUnavailable, match="did not answer while looking up image 'x:y'") as err:
        docker_host.local_image(client, "x:y")
    assert err.value.exit_code == 3


def test_the_apex_ref_label_may_be_a_tag_or_branch() -> None:
    from toolchain.image import inspect_image

    commit = "6424da3b4faa6c8f062da4a48c424fff3f02d42d"
    label = inspect_image.NAMESPACE + "apex.ref"
    for ref in ("master", "v25.09", "6424da3b"):  # a branch, a tag, a short commit
        manifest = {"apex": {"ref": ref, "commit": commit}}
        assert inspect_image._consistency({label: ref}, manifest) == []
    assert inspect_image._consistency({label: "6424da3b"}, {"apex": {"ref": None, "commit": commit}}) == []
    other = inspect_image._consistency({label: "v25.09"}, {"apex": {"ref": "master", "commit": commit}})
    assert other == [f"label apex.ref v25.09 != manifest apex ref master (commit {commit})"]


def test_an_unreachable_git_host_is_an_environment_fault(tmp_path) -> None:
    """The apex-src stage's real script (its /src moved under tmp) against a port nothing listens on: git
    fails to connect, the script says it cannot reach the host, and the engine reads that as exit 3."""
    import os
    import subprocess

    script = (
        (Path(buildkit_build.REPO_ROOT) / "docker" / "fetch-apex.sh")
        .read_text()
        .replace("/src", str(tmp_path / "src"))
    )
    (tmp_path / "fetch.sh").write_text(script)
    done = subprocess.run(
        ["bash", str(tmp_path / "fetch.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "APEX_REPO": "http://127.0.0.1:1/apex.git",
            "APEX_REF": "6424da3b",
        },
    )
    assert done.returncode == 1 and "cannot reach http://127.0.0.1:1/apex.git" in done.stderr
    fault = build_log.environment_fault(done.stderr)
    assert fault, done.stderr
    message, retry = fault
    assert "git host cannot be reached" in message and "--apex-src" in message and not retry
