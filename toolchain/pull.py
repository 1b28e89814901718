"""`build.py pull`: for training clusters. Resolve a cell to its published tag, pull it, and run verify on
this node's GPU before declaring the image ready. Exit codes for scripts: 0 ready; 1 verify failed
(e.g. a silent fallback: an expected extension missing); 2 bad cell or arguments; 3 no daemon, no GPU
runtime, or the pull failed after retries."""

from __future__ import annotations

import time
from pathlib import Path

from toolchain.errors import EnvironmentUnavailable, UsageError

PULL_ATTEMPTS = 3
# A missing image or a refused login does not get better by retrying; a dropped connection might.
_PERMANENT = ("not found", "manifest unknown", "unauthorized", "denied", "invalid reference")


def split_ref(ref: str) -> tuple[str, str]:
    """'ghcr.io:443/org/apex:tag' -> ('ghcr.io:443/org/apex', 'tag')."""
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        raise UsageError(f"image {ref!r} has no tag; pass REPOSITORY:TAG")
    return name, tag


def pull(ref: str, *, attempts: int = PULL_ATTEMPTS, backoff_s: float = 5.0) -> str:
    """Pull `ref` with the Docker SDK; returns the image id. Raises EnvironmentUnavailable (exit 3)."""
    import docker
    from docker.errors import APIError, DockerException

    repository, tag = split_ref(ref)
    client = docker.from_env(timeout=600)
    last = ""
    for attempt in range(1, attempts + 1):
        try:
            return client.images.pull(repository, tag=tag).id
        except (APIError, DockerException, OSError) as exc:
            last = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if any(word in last.lower() for word in _PERMANENT) or attempt == attempts:
                break
            time.sleep(backoff_s * attempt)
    hint = ("log in first (docker login) or check the registry/tag" if "unauthorized" in last.lower()
            or "denied" in last.lower() else "check the registry is reachable and the image was published")
    raise EnvironmentUnavailable(f"pulling {ref} failed after {attempt} attempt(s) ({last}); {hint}")


def pull_and_verify(ref: str, *, out_dir: Path, gpu: str, pull_first: bool = True) -> tuple[int, Path, str | None]:
    """(verify exit code, report path, image id or None when the local image was used)."""
    from toolchain import container_verify

    image_id = pull(ref) if pull_first else None
    code, report_path = container_verify.verify_image(ref, out_dir=out_dir, gpu=gpu)
    return code, Path(report_path), image_id
