"""The container engines that pull and verify images: Docker (through the SDK, a daemon) and podman
(through its CLI: no daemon, rootless where the user has subuids, root otherwise).

Both give the same few operations, so `build.py verify/pull --engine podman` runs the same code as
Docker: look an image up (id, repo digests, labels), pull it, and run one command in a fresh container
with files copied in before it starts and one directory copied out after it stops. The container is
always removed. GPU access is Docker's DeviceRequest or podman's CDI device `nvidia.com/gpu=all`; an
engine without a GPU runtime raises NoGpuRuntime, so the caller can fall back to --static.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from pathlib import Path

from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.image import docker_host
from toolchain.image.registry_pull import PULL_ATTEMPTS, split_ref, with_retries
from verify.runtime import input_files

ENGINES = ("docker", "podman")
ENGINE_ENV = "APEX_CONTAINER_ENGINE"
DEFAULT_ENGINE = "docker"
_DOCKER_NO_GPU = 'could not select device driver ""'
# podman without a CDI spec for the NVIDIA devices (the NVIDIA Container Toolkit writes one)
_PODMAN_NO_GPU = ("unresolvable CDI devices", "CDI device", "nvidia.com/gpu")


class NoGpuRuntime(Exception):
    """The engine cannot give a container the GPUs (no NVIDIA runtime / CDI spec)."""


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    ref: str  # what the user named
    id: str  # the image (config) digest, sha256:...
    repo_digests: tuple[str, ...]  # REPO@sha256:... of the manifests it was pulled or pushed as
    labels: dict[str, str]

    def digest_for(self, repository: str | None = None) -> str | None:
        """The manifest digest (sha256:...) this image has in `repository` (any, when None)."""
        for entry in self.repo_digests:
            repo, _, digest = entry.rpartition("@")
            if repository is None or repo == repository:
                return digest
        return None


@dataclasses.dataclass(frozen=True)
class RunResult:
    status: int
    log: str
    files: dict[str, bytes]  # basename -> content, from the copied-out directory
    timed_out: bool = False


def _tar_of(files: dict[str, bytes]) -> bytes:
    """A tar of {absolute path in the container: content}, world-readable, for any container user."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        dirs = sorted({str(Path(p).parent).lstrip("/") for p in files})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for path, data in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _files_of(tar_bytes: bytes) -> dict[str, bytes]:
    # each member's size checked from its header before it is read
    return {
        Path(member.name).name: data
        for member, data in input_files.tar_files(
            tar_bytes, "the archive copied out", input_files.ARCHIVE_STREAM
        )
    }


# ---------------------------------------------------------------- Docker (SDK)


class DockerEngine:
    name = "docker"

    def __init__(self) -> None:
        docker_host.ping()
        import docker

        self._client = docker.from_env(timeout=600)

    def image(self, ref: str) -> ImageInfo:
        image = docker_host.local_image(self._client, ref)
        return ImageInfo(
            ref,
            image.id,
            tuple(image.attrs.get("RepoDigests") or ()),
            dict((image.attrs.get("Config") or {}).get("Labels") or {}),
        )

    def pull(self, ref: str) -> ImageInfo:
        docker_pull(ref)  # retries, permanent-error wording
        return self.image(ref)

    def run(
        self,
        ref: str,
        command: list[str],
        *,
        gpu: bool,
        files_in: dict[str, bytes],
        collect: str,
        timeout_s: float,
    ) -> RunResult:
        from docker.errors import APIError, NotFound
        from docker.types import DeviceRequest

        requests = [DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpu else None
        try:
            container = self._client.containers.create(
                ref, command=command, device_requests=requests, detach=True
            )
        except APIError as error:
            raise EnvironmentUnavailable(
                f"the Docker daemon refused to create a container of {ref}: {error.explanation or error}"
            ) from None
        try:
            if files_in:
                container.put_archive("/", _tar_of(files_in))
            try:
                container.start()
            except APIError as error:
                if _DOCKER_NO_GPU in str(error):
                    raise NoGpuRuntime(error.explanation or str(error)) from None
                raise EnvironmentUnavailable(
                    f"the Docker daemon refused to run {ref}: {error.explanation or error}"
                ) from None
            timed_out = False
            try:
                status = container.wait(timeout=timeout_s)["StatusCode"]
            except Exception:  # requests' ReadTimeout: the run hung
                container.kill()
                status, timed_out = -1, True
            log = container.logs().decode("utf-8", errors="replace")
            try:
                stream, _ = container.get_archive(collect)
                collected = _files_of(b"".join(stream))
            except NotFound:
                collected = {}
            return RunResult(status, log, collected, timed_out)
        finally:
            container.remove(force=True)


def docker_pull(ref: str, *, attempts: int = PULL_ATTEMPTS, backoff_s: float = 5.0) -> str:
    """Pull `ref` with the Docker SDK; returns the image id. Raises EnvironmentUnavailable (exit 3)."""
    import docker
    from docker.errors import APIError, DockerException

    repository, tag = split_ref(ref)
    client = docker.from_env(timeout=600)

    def attempt() -> str:
        # the low-level stream: images.pull() drops the daemon's error event (e.g. "manifest verification
        # failed") and only then fails its own lookup with a 404 that hides why
        for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise _StreamError(str(event["error"]))
        return str(client.images.get(ref).id)

    return with_retries(
        ref,
        attempt,
        errors=(APIError, DockerException, OSError, _StreamError),
        attempts=attempts,
        backoff_s=backoff_s,
    )


class _StreamError(Exception):
    """An error event in the daemon's pull stream."""


# ---------------------------------------------------------------- podman (CLI, no daemon)


class PodmanEngine:
    name = "podman"

    def __init__(self, path: str | None = None) -> None:
        found = path or os.environ.get("PODMAN") or shutil.which("podman")
        if not found:
            raise EnvironmentUnavailable(
                "podman is not installed; install it (apt-get install podman) or use --engine docker"
            )
        self.path = found
        self.tls_verify = os.environ.get("APEX_PODMAN_TLS_VERIFY", "true")  # "false" for an http registry

    def _podman(
        self, *args: str, timeout: float = 600, check: bool = True, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess:
        try:
            done = subprocess.run([self.path, *args], input=stdin, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise EnvironmentUnavailable(f"podman {args[0]} did not finish within {timeout:.0f} s") from None
        if check and done.returncode != 0:
            raise _PodmanError(
                done.stderr.decode("utf-8", errors="replace").strip() or f"exit {done.returncode}"
            )
        return done

    def image(self, ref: str) -> ImageInfo:

        try:
            data = input_files.parse_json(
                self._podman("image", "inspect", ref, timeout=60).stdout,
                "podman image inspect",
                input_files.REGISTRY_ANSWER,
            )[0]
        except _PodmanError as error:
            raise UsageError(
                f"image {ref!r} is not in podman's local store ({error.first_line}); pull it "
                "(build.py pull --engine podman) or podman load it"
            ) from None
        return ImageInfo(
            ref,
            "sha256:" + data["Id"].removeprefix("sha256:"),
            tuple(data.get("RepoDigests") or ()),
            dict((data.get("Config") or {}).get("Labels") or data.get("Labels") or {}),
        )

    def pull(self, ref: str) -> ImageInfo:
        def attempt() -> None:
            self._podman("pull", "--quiet", f"--tls-verify={self.tls_verify}", ref, timeout=1800)

        with_retries(ref, attempt, errors=(_PodmanError,))
        return self.image(ref)

    def run(
        self,
        ref: str,
        command: list[str],
        *,
        gpu: bool,
        files_in: dict[str, bytes],
        collect: str,
        timeout_s: float,
    ) -> RunResult:
        name = f"apex-verify-{uuid.uuid4().hex[:12]}"
        # no network: verify needs none, and a node may have no CNI/netavark configured for podman
        create = ["create", "--name", name, "--network=none", *_own_ulimits()]
        if gpu:
            create += ["--device", "nvidia.com/gpu=all"]
        try:
            self._podman(*create, ref, *command, timeout=300)
        except _PodmanError as error:
            if gpu and any(word in str(error) for word in _PODMAN_NO_GPU):
                raise NoGpuRuntime(error.first_line) from None
            raise EnvironmentUnavailable(
                f"podman could not create a container of {ref}: {error.first_line}"
            ) from None
        try:
            if files_in:  # `podman cp -` takes a tar on stdin, like Docker's put_archive
                self._podman("cp", "-", f"{name}:/", stdin=_tar_of(files_in), timeout=120)
            status, timed_out = self._start_and_wait(ref, name, gpu=gpu, timeout_s=timeout_s)
            logs = self._podman("logs", name, timeout=60, check=False)
            log = (logs.stdout + logs.stderr).decode("utf-8", errors="replace")
            return RunResult(status, log, self._copied_out(name, collect), timed_out)
        finally:
            self._podman("rm", "--force", name, timeout=120, check=False)

    def _start_and_wait(self, ref: str, name: str, *, gpu: bool, timeout_s: float) -> tuple[int, bool]:
        """(exit status, timed out) of the created container `name`; -1 when it hung and was killed."""
        timed_out = False
        try:
            started = self._podman("start", "--attach", name, timeout=timeout_s, check=False)
            status = started.returncode
        except EnvironmentUnavailable:  # the run hung
            self._podman("kill", name, timeout=60, check=False)
            status, timed_out = -1, True
        if status == 125 and not timed_out:  # podman's own failure to start it (CDI devices resolve here)
            text = started.stderr.decode("utf-8", errors="replace").strip()
            line = text.splitlines()[-1] if text else "podman start failed (exit 125)"
            if gpu and any(word in text for word in _PODMAN_NO_GPU):
                raise NoGpuRuntime(line)
            raise EnvironmentUnavailable(f"podman could not start a container of {ref}: {line}")
        return status, timed_out

    def _copied_out(self, name: str, collect: str) -> dict[str, bytes]:
        """The files of directory `collect` in the stopped container (none when it is missing)."""
        with tempfile.TemporaryDirectory(prefix="apex-podman-cp.") as where:
            copied = self._podman("cp", f"{name}:{collect}", where, timeout=120, check=False)
            collected = {}
            if copied.returncode == 0:
                for path in Path(where).rglob("*"):
                    if path.is_file():
                        collected[path.name] = input_files.read_bytes(path, input_files.ARCHIVE_STREAM)
        return collected


# Root podman asks runc for nofile and nproc 1048576 by default; raising a limit above the hard one
# needs CAP_SYS_RESOURCE, which a CI sandbox or a locked-down node drops, and runc then fails with
# "error setting rlimit type 6/7: operation not permitted". So the container gets this process's
# open-file limit and a process limit of at most PODMAN_NPROC (the limit conmon ran with in this
# project's CI sandbox; verify starts a handful of processes). APEX_PODMAN_ULIMITS overrides both,
# e.g. "nofile=65536:65536,nproc=65536:65536".
PODMAN_NPROC = 32768


def _own_ulimits() -> list[str]:
    import resource

    override = os.environ.get("APEX_PODMAN_ULIMITS")
    if override:
        return [f"--ulimit={item.strip()}" for item in override.split(",") if item.strip()]
    soft_files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft_procs, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    files = 1048576 if soft_files == resource.RLIM_INFINITY else soft_files
    procs = PODMAN_NPROC if soft_procs == resource.RLIM_INFINITY else min(soft_procs, PODMAN_NPROC)
    return [f"--ulimit=nofile={files}:{files}", f"--ulimit=nproc={procs}:{procs}"]


class _PodmanError(Exception):
    @property
    def first_line(self) -> str:
        lines = [line for line in str(self).splitlines() if line.strip()]
        return lines[-1] if lines else "podman failed"


def choose(name: str | None) -> str:
    """--engine, else $APEX_CONTAINER_ENGINE, else docker; an unknown name is exit 2."""
    chosen = name or os.environ.get(ENGINE_ENV) or DEFAULT_ENGINE
    if chosen not in ENGINES:
        where = "--engine" if name else ENGINE_ENV
        raise UsageError(f"{where} {chosen!r}: unknown container engine; use one of {', '.join(ENGINES)}")
    return chosen


def get(name: str | None = None) -> DockerEngine | PodmanEngine:
    return PodmanEngine() if choose(name) == "podman" else DockerEngine()
