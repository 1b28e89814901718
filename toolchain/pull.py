"""`build.py pull`: for training clusters. Resolve a cell to its published image, pull it (by digest when
one was recorded by `build.py publish` or given), and run verify on this node's GPU before declaring the
image ready. Exit codes for scripts: 0 ready; 1 verify failed (e.g. a silent fallback: an expected
extension missing) or the registry does not hold the digest (tampered or deleted: refused); 2 bad cell,
arguments or digest; 3 no daemon, no GPU runtime, or the pull failed after retries."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from toolchain.errors import EnvironmentUnavailable, UsageError

PULL_ATTEMPTS = 3
# A missing image or a refused login does not get better by retrying; a dropped connection might.
_PERMANENT = ("not found", "manifest unknown", "unauthorized", "denied", "invalid reference")


def split_ref(ref: str) -> tuple[str, str]:
    """'ghcr.io:443/org/apex:tag' -> ('ghcr.io:443/org/apex', 'tag'); 'repo@sha256:..' -> ('repo', 'sha256:..')."""
    if "@" in ref:
        name, _, digest = ref.partition("@")
        return name, digest
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        raise UsageError(f"image {ref!r} has no tag; pass REPOSITORY:TAG or REPOSITORY@sha256:DIGEST")
    return name, tag


def with_retries(ref: str, attempt: Callable[[], object], *, errors: tuple[type[BaseException], ...],
                 attempts: int = PULL_ATTEMPTS, backoff_s: float = 5.0) -> object:
    """attempt() until it returns; a permanent error (missing image, refused login) is not retried.
    Raises EnvironmentUnavailable (exit 3) naming the ref and the last error."""
    last = ""
    for number in range(1, attempts + 1):
        try:
            return attempt()
        except errors as exc:
            lines = [line for line in str(exc).splitlines() if line.strip()]
            last = lines[-1] if lines else type(exc).__name__
            if any(word in last.lower() for word in _PERMANENT) or number == attempts:
                break
            time.sleep(backoff_s * number)
    hint = ("log in first (docker login) or check the registry/tag" if "unauthorized" in last.lower()
            or "denied" in last.lower() else "check the registry is reachable and the image was published")
    raise PullFailed(f"pulling {ref} failed after {number} attempt(s) ({last}); {hint}", last)


class PullFailed(EnvironmentUnavailable):
    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def pull(ref: str, *, attempts: int = PULL_ATTEMPTS, backoff_s: float = 5.0) -> str:
    """Pull `ref` with the Docker SDK; returns the image id. Raises EnvironmentUnavailable (exit 3)."""
    import docker
    from docker.errors import APIError, DockerException

    repository, tag = split_ref(ref)
    client = docker.from_env(timeout=600)
    return with_retries(ref, lambda: client.images.pull(repository, tag=tag).id,
                        errors=(APIError, DockerException, OSError), attempts=attempts, backoff_s=backoff_s)


def pull_and_verify(ref: str, *, out_dir: Path, gpu: str, pull_first: bool = True, engine: str | None = None,
                    ) -> tuple[int, Path, str | None]:
    """(verify exit code, report path, image id or None when the local image was used)."""
    from toolchain import container_engine, container_verify

    runtime = container_engine.get(engine)
    image_id = runtime.pull(ref).id if pull_first else None
    code, report_path = container_verify.verify_image(ref, out_dir=out_dir, gpu=gpu, engine=runtime)
    return code, Path(report_path), image_id
