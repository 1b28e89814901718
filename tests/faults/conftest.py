"""Fixtures of the fault-injection tier (see faultlib.py): the docker tier's session fixtures, re-exported
so that they apply here, and a second dockerd (the `faults` marker comes from the root conftest.py, by directory)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.faultlib import (  # noqa: F401 - fixtures are registered by being names of this module
    DOCKERD,
    SecondDaemon,
    cell_factory,
    docker_client,
    logs,
    test_ca,
    verify_image_tag,
    wheelhouse,
)


@pytest.fixture
def second_daemon(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecondDaemon]:
    request.getfixturevalue("docker_client")  # skips without the shared engine and its base image
    if os.geteuid() != 0 or not Path(DOCKERD).is_file():
        pytest.skip("a second dockerd needs root and Debian's docker.io")
    daemon = SecondDaemon(tmp_path_factory.mktemp("dockerd2", numbered=True))
    try:
        daemon.start()
        daemon.load_base()
        yield daemon
    finally:
        daemon.stop()
