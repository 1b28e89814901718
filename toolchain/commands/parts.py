"""What a command needs from its environment, asked before it starts: a toolchain part (the Docker SDK
behind image/), a daemon that answers, the engine verify and pull use, a registry name that parses."""

from __future__ import annotations

import argparse
import os
import types

from toolchain.errors import EnvironmentUnavailable
from toolchain.spec import ci_matrix


def load_part(name: str) -> types.ModuleType:
    """A toolchain module (`image.buildkit_build`) another part provides, imported when a command needs it."""
    import importlib

    try:
        return importlib.import_module(f"toolchain.{name}")
    except ImportError as err:
        if getattr(err, "name", None) == "docker":
            raise EnvironmentUnavailable(
                "the Docker SDK is not installed; pip install -e '.[build]'"
            ) from None
        raise EnvironmentUnavailable(f"toolchain.{name} is not available in this checkout ({err})") from None


def preflight(verify_mode: str) -> None:
    """Before the first cell: the parts a build needs are here and a daemon answers (else exit 3)."""
    load_part("image.buildkit_build")
    if verify_mode != "none":
        load_part("image.container_verify")
    require_docker()


def require_docker() -> None:
    """Fail fast (exit 3) when no Docker daemon answers, before any cell starts."""
    load_part("image.docker_host").ping()


def require_engine(name: str | None) -> None:
    """The engine verify/pull use: Docker needs its daemon (exit 3 without); podman needs only its CLI."""
    from toolchain.image import container_engine

    if container_engine.choose(name) == "docker":
        require_docker()
    else:
        container_engine.PodmanEngine()  # exit 3 when podman is not installed


def check_registry(args: argparse.Namespace) -> None:
    from_env = args.registry is not None and args.registry == os.environ.get("APEX_IMAGE_REGISTRY")
    ci_matrix.check_repository(args.registry, "$APEX_IMAGE_REGISTRY" if from_env else "--registry")
    ci_matrix.check_repository(getattr(args, "cache_ref", None), "--cache-ref")
