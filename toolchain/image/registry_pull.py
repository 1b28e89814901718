"""What every engine's pull shares: a ref's parts, and retries that stop at a permanent error.

The bottom of the pull chain: `container_engine` (Docker, podman) pulls through `with_retries`,
`container_verify` runs verify through an engine, and `pull` (`build.py pull`) stands on both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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


def with_retries(
    ref: str,
    attempt: Callable[[], T],
    *,
    errors: tuple[type[BaseException], ...],
    attempts: int = PULL_ATTEMPTS,
    backoff_s: float = 5.0,
) -> T:
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
    hint = (
        "log in first (docker login) or check the registry/tag"
        if "unauthorized" in last.lower() or "denied" in last.lower()
        else "check the registry is reachable and the image was published"
    )
    raise PullFailed(f"pulling {ref} failed after {number} attempt(s) ({last}); {hint}", last)


class PullFailed(EnvironmentUnavailable):
    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason
