"""`build.py pull`: for training clusters. Resolve a cell to its published image, pull it (by digest when
one was recorded by `build.py publish` or given), and run verify on this node's GPU before declaring the
image ready. Exit codes for scripts: 0 ready; 1 verify failed (e.g. a silent fallback: an expected
extension missing) or the registry does not hold the digest (tampered or deleted: refused); 2 bad cell,
arguments or digest; 3 no daemon, no GPU runtime, or the pull failed after retries."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from toolchain.errors import EnvironmentUnavailable, UsageError

PULL_ATTEMPTS = 3
T = TypeVar("T")
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


def with_retries(ref: str, attempt: Callable[[], T], *, errors: tuple[type[BaseException], ...],
                 attempts: int = PULL_ATTEMPTS, backoff_s: float = 5.0) -> T:
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

    def attempt() -> str:
        # the low-level stream: images.pull() drops the daemon's error event (e.g. "manifest verification
        # failed") and only then fails its own lookup with a 404 that hides why
        for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise _StreamError(str(event["error"]))
        return str(client.images.get(ref).id)

    return with_retries(ref, attempt, errors=(APIError, DockerException, OSError, _StreamError), attempts=attempts,
                        backoff_s=backoff_s)


class _StreamError(Exception):
    """An error event in the daemon's pull stream."""


def resolve(cell_id: str, registry: str | None, *, digest: str | None, by_digest: bool, out: Path
            ) -> tuple[str, str | None, dict | None]:
    """(ref to pull, digest or None, publish record or None). The digest comes from --digest, else from
    the cell's publish record (out/cells/<id>/published.json); --by-digest makes one mandatory."""
    from toolchain.image import publish

    record = publish.read_record(out, cell_id)
    if digest:
        publish.check_digest(digest, "--digest")
    elif record:
        if registry and record["repository"] != registry.rstrip("/"):
            raise UsageError(f"{publish.record_path(out, cell_id)} records a push to {record['repository']}, not "
                             f"--registry {registry}; pass that registry, or --digest for this one")
        digest, registry = record["digest"], record["repository"]
    if by_digest and not digest:
        raise UsageError(f"--by-digest: no digest for {cell_id} (no {publish.record_path(out, cell_id)}); run "
                         "build.py publish first, or pass --digest sha256:...")
    if not registry:
        raise UsageError("pull: no registry; pass --registry ghcr.io/OWNER/apex (or set APEX_IMAGE_REGISTRY)")
    repository = registry.rstrip("/")
    return (f"{repository}@{digest}" if digest else f"{repository}:{cell_id}"), digest, record


def pull_and_verify(ref: str, *, out_dir: Path, gpu: str, pull_first: bool = True, engine: str | None = None,
                    expected_image_id: str | None = None) -> tuple[int, Path, str | None]:
    """(verify exit code, report path, image id or None when the local image was used). A ref by digest
    is checked after the pull: the engine must list it among the image's repo digests, and the image id
    must be the published one (when known)."""
    from toolchain.image import container_engine, container_verify, publish

    runtime = container_engine.get(engine)
    image_id = None
    if pull_first:
        try:
            info = runtime.pull(ref)
        except PullFailed as failure:
            refused = publish.refusal(failure.reason, ref) if "@sha256:" in ref else None
            if refused:
                raise refused from None
            raise
        image_id = info.id
        if "@" in ref:
            repository, _, digest = ref.partition("@")
            if f"{repository}@{digest}" not in info.repo_digests:  # pulled by platform and index digest: both
                raise publish.DigestRefused(f"refusing {ref}: the pulled image does not carry this digest "
                                            f"(repo digests: {', '.join(info.repo_digests) or 'none'})")
            if expected_image_id and info.id != expected_image_id:
                raise publish.DigestRefused(f"refusing {ref}: its image id {info.id} is not the published "
                                            f"{expected_image_id}")
    code, report_path = container_verify.verify_image(ref, out_dir=out_dir, gpu=gpu, engine=runtime)
    return code, Path(report_path), image_id
