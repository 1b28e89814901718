"""The labels an image built here carries: their names, and which target carries which.

docker/Dockerfile sets them, one LABEL block per shipped target: a LABEL belongs to its stage, and the
targets stand on different bases (devel, CUDA runtime, plain OS), so no stage is a parent of all of
them. This table is what the code reads (`build.py inspect`, `build.py verify`) and what a unit test holds
each of those blocks to, so a label added to one target and forgotten in another fails the suite.
"""

from __future__ import annotations

NAMESPACE = "io.apex-toolchain."
OCI = "org.opencontainers.image."
CELL = NAMESPACE + "cell"  # every image built here: it ships verify in its venv

_STACK = ("cell", "target", "torch", "cuda", "python")
_APEX = ("apex.repo", "apex.ref", "apex.flags", "archs", "manifest")
_OCI = ("title", "description", "version", "created", "revision", "source", "base.name", "base.digest")


def _names(own: tuple[str, ...], oci: tuple[str, ...]) -> frozenset[str]:
    return frozenset(NAMESPACE + n for n in own) | frozenset(OCI + n for n in oci)


# runtime-slim's base is a plain OS image named by tag (BASE_SLIM_IMAGE), whose digest build.py does not look up
BY_TARGET: dict[str, frozenset[str]] = {
    "runtime": _names(_STACK + _APEX, _OCI),
    "runtime-devel": _names(_STACK + _APEX, _OCI),
    "runtime-slim": _names(_STACK + _APEX, tuple(n for n in _OCI if n != "base.digest")),
    "verify-runtime": _names(_STACK, _OCI),
}
