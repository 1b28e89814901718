"""The docker client that builds and the daemon behind it.

Which client: `docker buildx build` when the buildx plugin works; else a client older than 23 with
`DOCKER_BUILDKIT=1 docker build`, which drives the daemon's built-in BuildKit without buildx (Debian's
docker.io 20.10 in /usr/bin). Docker 23+ clients refuse BuildKit without buildx, so each client on
PATH is probed; `DOCKER_CLI=/path/to/docker` skips the probe. Whether a daemon answers, and an image
from its store, come through the Docker SDK.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import subprocess

from toolchain.errors import EnvironmentUnavailable, UsageError


@dataclasses.dataclass(frozen=True)
class DockerClient:
    path: str
    buildx: bool  # `docker buildx build`, else `DOCKER_BUILDKIT=1 docker build`
    version: str

    def build_prefix(self) -> list[str]:
        return [self.path, "buildx", "build", "--load"] if self.buildx else [self.path, "build"]


def _client_version(path: str) -> str | None:
    try:
        out = subprocess.run(
            [path, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"\d+\.\d+[\w.+~-]*", out.stdout)  # the client line prints even without a daemon
    return match.group(0) if match else None


def _has_buildx(path: str) -> bool:
    try:
        return subprocess.run([path, "buildx", "version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.lru_cache(maxsize=1)
def docker_client() -> DockerClient:
    """The first docker client that can build with BuildKit (see the module docstring)."""
    forced = os.environ.get("DOCKER_CLI")
    candidates = [forced] if forced else [shutil.which("docker"), "/usr/bin/docker", "/usr/local/bin/docker"]
    tried = []
    for path in dict.fromkeys(c for c in candidates if c):
        version = _client_version(path)
        if version is None:
            tried.append(f"{path} (does not run)")
            continue
        if _has_buildx(path):
            return DockerClient(path, True, version)
        if int(version.split(".")[0]) < 23:
            return DockerClient(path, False, version)
        tried.append(f"{path} {version} (no buildx plugin)")
    where = ", ".join(tried) or "no docker client on PATH"
    raise EnvironmentUnavailable(
        f"no docker client can build with BuildKit ({where}); install the buildx plugin (docker-buildx) "
        "or Debian's docker.io (20.10), or set DOCKER_CLI to a client that can"
    )


def local_image(client, tag: str):
    """The image `tag` from the local store. Not there, or a tag Docker rejects: UsageError (exit 2);
    the daemon unreachable mid-call: EnvironmentUnavailable (exit 3)."""
    from docker.errors import APIError, DockerException, ImageNotFound

    try:
        return client.images.get(tag)
    except ImageNotFound:
        raise UsageError(
            f"image {tag!r} is not in the local Docker store; build it (build.py image) or docker pull it"
        ) from None
    except APIError as err:  # e.g. `invalid reference format`: the daemon names what is wrong with the tag
        raise UsageError(f"image {tag!r}: {err.explanation or err}; pass a valid image tag or id") from None
    except (DockerException, OSError) as err:  # requests' ConnectionError / timeouts are OSErrors
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise EnvironmentUnavailable(
            f"the Docker daemon did not answer while looking up image {tag!r} ({reason}); "
            "check that it is running (scripts/ensure-docker.sh) or DOCKER_HOST"
        ) from None


def check_docker_host(value: str) -> None:
    """DOCKER_HOST's one check, before any client is made from it (every command pings first): the
    SDK's own parser, whose ValueError (`tcp://:::::`) is a UsageError naming the variable."""
    from docker.errors import DockerException
    from docker.utils import parse_host

    try:
        parse_host(value)
    except (ValueError, DockerException) as error:
        why = (str(error).splitlines() or [type(error).__name__])[0][:200]
        raise UsageError(
            f"DOCKER_HOST={value[:200]!r} is not a Docker host ({why}); unset it, or write "
            "unix:///var/run/docker.sock, tcp://HOST:2375 or ssh://USER@HOST"
        ) from None


def ping(timeout: int = 10) -> None:
    """Raise EnvironmentUnavailable (exit 3) with the fix when no daemon answers, via the Docker SDK."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        raise EnvironmentUnavailable("the Docker SDK is not installed; pip install 'docker>=7'") from None
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    check_docker_host(where)
    try:
        docker.from_env(timeout=timeout).ping()
    except (DockerException, OSError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        if "ermission denied" in reason:
            raise EnvironmentUnavailable(
                f"the Docker socket {where} is not permitted for this user ({reason}); add the user to the "
                "docker group (or run with sudo)"
            ) from None
        raise EnvironmentUnavailable(
            f"no Docker daemon answers at {where} ({reason}); start it (`sudo systemctl start docker`, "
            "`dockerd &`, or scripts/ensure-docker.sh) or set DOCKER_HOST"
        ) from None


def client_or_default() -> DockerClient:
    try:
        return docker_client()
    except EnvironmentUnavailable:  # `plan` shows the command even where no client can build
        return DockerClient("docker", False, "unknown")
