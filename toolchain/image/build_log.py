"""Reading a BuildKit build log (plain progress): the step that failed, and output that means the
environment is missing something (exit 3) rather than the cell being broken."""

from __future__ import annotations

import re

# The explicit form of a no-registry build (local Debian base, CUDA from NVIDIA's wheels, torch from PyPI):
# what CI's apex-image tier builds and the README quotes. `build.py image` takes this route by itself when
# a cell's NVIDIA base cannot be pulled (toolchain/image/base_route.py).
NO_REGISTRY_COMMAND = (
    "bash scripts/ensure-docker.sh && python3 build.py image --cuda 13.0 --torch 2.11.0 --os debian12 "
    "--python 3.11 --base-devel apex-toolchain/base:bookworm --base-runtime apex-toolchain/base:bookworm "
    "--torch-index-url https://pypi.org/simple --archs 9.0 --target runtime-slim"
)

# Output that means "the environment is missing something", not "this cell is broken": exit 3.
# (pattern, message, retry?) - a registry hiccup is worth one more try; a full disk is not.
_ENVIRONMENT_FAULTS: tuple[tuple[str, str, bool], ...] = (
    (
        r"Cannot connect to the Docker daemon",
        "no Docker daemon answers; start it (`dockerd &` or "
        "`sudo systemctl start docker`) or set DOCKER_HOST",
        False,
    ),
    (
        r"permission denied while trying to connect to the Docker daemon socket",
        "the Docker socket is not "
        "permitted for this user; add the user to the docker group (or run with sudo)",
        False,
    ),
    (
        r"no space left on device",
        "the disk is full (no space left on device); free space "
        "(`docker builder prune`, `docker image prune`) and retry",
        False,
    ),
    (
        r"pull access denied|failed to resolve source metadata|failed to do request|"
        r"TLS handshake timeout|i/o timeout|manifest unknown|not found: manifest",
        "a base image could not be pulled (no registry reachable, or no such image); load it (docker load), or "
        "build the same cell on the local Debian base with CUDA from the package index: the same command with "
        "--base local (make: BASE=local); without GitHub add --apex-src DIR (make: APEX_SRC=DIR)",
        True,
    ),
    (
        r"CERTIFICATE_VERIFY_FAILED",
        "a TLS certificate did not verify inside the build (a TLS-intercepting proxy, "
        "or a host whose own CA bundle is needed for the package index); pass that CA bundle with --extra-ca PEM "
        "(make: EXTRA_CA=PEM; $PIP_CERT is the default), e.g. the host's /etc/ssl/certs/ca-certificates.crt",
        False,
    ),
    (
        r"apex-src stage: cannot reach ",
        "the Apex git host cannot be reached from the build (no network to it); "
        "pass a local Apex checkout with --apex-src DIR (make: APEX_SRC=DIR)",
        False,
    ),
    (
        r"buildx component is missing or broken",
        "this docker client needs the buildx plugin for BuildKit; "
        "install docker-buildx, or point DOCKER_CLI at a client older than 23 (e.g. Debian's /usr/bin/docker)",
        False,
    ),
)
STEP = re.compile(r"^#(\d+) \[([\w.-]+) (\d+)/(\d+)\] (.*)$")
_STEP_ERROR = re.compile(r"^#(\d+) ERROR:")
_FAILED_STEP = re.compile(r"^ > \[([\w.-]+) \d+/\d+\]")


def failed_step(lines: list[str]) -> tuple[str | None, str | None]:
    """(stage, step) of the failing build step, from BuildKit's plain progress output."""
    headers: dict[str, tuple[str, str]] = {}
    for line in lines:
        match = STEP.match(line)
        if match:
            headers[match.group(1)] = (
                match.group(2),
                f"[{match.group(2)} {match.group(3)}/{match.group(4)}] {match.group(5)}",
            )
    for line in lines:
        match = _STEP_ERROR.match(line)
        if match and match.group(1) in headers:
            return headers[match.group(1)]
    for line in lines:  # the summary block BuildKit prints after "------"
        match = _FAILED_STEP.match(line)
        if match:
            return match.group(1), line.strip()[2:]
    return None, None


def environment_fault(text: str) -> tuple[str, bool] | None:
    for pattern, message, retry in _ENVIRONMENT_FAULTS:
        if re.search(pattern, text, re.IGNORECASE):
            return message, retry
    return None
