"""`build.py publish --bake-metadata` (what CI's buildx push recorded) and the digest rules of `build.py
pull`, without a daemon: records, refusals of bad input (exit 2), and where the digest comes from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from verify.runtime import exit_codes

DIGEST = "sha256:" + "a" * 64
CONFIG = "sha256:" + "b" * 64


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "APEX_IMAGE_REGISTRY")}
    env["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"  # nothing here may need a daemon
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


@pytest.fixture()
def matrix(tmp_path: Path) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(
        '[defaults]\npython = "3.11"\narchs = ["9.0"]\n[cells."cu12.4"]\ncuda = "12.4"\ntag = "apex-t1"\n'
    )
    return path


def test_bake_metadata_becomes_the_publish_record(matrix: Path, tmp_path: Path) -> None:
    metadata = tmp_path / "bake-metadata.json"
    metadata.write_text(
        json.dumps(
            {
                "cu12_4": {
                    "containerimage.digest": DIGEST,
                    "containerimage.config.digest": CONFIG,
                    "image.name": "ghcr.io/acme/apex:apex-t1",
                }
            }
        )
    )
    done = run(
        "publish",
        "--matrix",
        str(matrix),
        "--cell",
        "cu12.4",
        "--registry",
        "ghcr.io/acme/apex",
        "--bake-metadata",
        str(metadata),
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "out" / "cells" / "apex-t1" / "published.json").read_text())
    assert record["ref"] == f"ghcr.io/acme/apex@{DIGEST}" and record["image_id"] == CONFIG
    assert record["pushed_by"] == "buildx bake" and record["cell"] == "apex-t1"
    assert f"ghcr.io/acme/apex@{DIGEST}" in done.stdout


@pytest.mark.parametrize(
    "content, message",
    [
        (
            {"other": {"containerimage.digest": DIGEST}},
            "no pushed digest for bake target 'cu12_4' (targets: other)",
        ),
        ({"cu12_4": {"containerimage.digest": "sha256:1234"}}, "not a sha256 image digest"),
        (
            {"cu12_4": {"containerimage.digest": [DIGEST]}},
            'cu12_4["containerimage.digest"]: expected a string, got a list',
        ),
        (
            {"cu12_4": {"containerimage.digest": DIGEST, "containerimage.config.digest": {}}},
            "expected a string",
        ),
        ("not json", "unreadable"),
    ],
)
def test_bad_bake_metadata_is_exit_2(matrix: Path, tmp_path: Path, content, message: str) -> None:
    metadata = tmp_path / "bake-metadata.json"
    metadata.write_text(content if isinstance(content, str) else json.dumps(content))
    done = run(
        "publish",
        "--matrix",
        str(matrix),
        "--cell",
        "cu12.4",
        "--registry",
        "ghcr.io/acme/apex",
        "--bake-metadata",
        str(metadata),
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == exit_codes.USAGE and message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "cells" / "apex-t1" / "published.json").exists()


def test_publish_needs_a_registry(matrix: Path, tmp_path: Path) -> None:
    done = run("publish", "--matrix", str(matrix), "--cell", "cu12.4", "--out", str(tmp_path))
    assert done.returncode == exit_codes.USAGE and "--registry" in done.stderr


def test_pull_digest_rules_before_any_engine(matrix: Path, tmp_path: Path) -> None:
    base = ("pull", "--matrix", str(matrix), "--cell", "cu12.4", "--out", str(tmp_path / "out"))
    missing = run(*base, "--registry", "ghcr.io/acme/apex", "--by-digest")
    assert missing.returncode == exit_codes.USAGE and "--by-digest: no digest for apex-t1" in missing.stderr
    bad = run(*base, "--registry", "ghcr.io/acme/apex", "--digest", "sha256:xyz")
    assert bad.returncode == exit_codes.USAGE and "not a sha256 image digest" in bad.stderr
    record = tmp_path / "out" / "cells" / "apex-t1" / "published.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"digest": "sha256:" + "c" * 63, "repository": "ghcr.io/acme/apex"}))
    tampered = run(*base, "--by-digest")
    assert tampered.returncode == exit_codes.USAGE and "published.json: digest" in tampered.stderr
    record.write_text(json.dumps({"digest": DIGEST, "repository": "ghcr.io/acme/apex"}))
    elsewhere = run(*base, "--registry", "registry.example/other", "--by-digest")
    assert (
        elsewhere.returncode == exit_codes.USAGE and "records a push to ghcr.io/acme/apex" in elsewhere.stderr
    )
    # a pull from a registry names its signature policy first (exit 2, all three ways named)
    unsigned = run(*base, "--by-digest")
    assert (
        unsigned.returncode == exit_codes.USAGE
        and "no signature policy for ghcr.io/acme/apex" in unsigned.stderr
    )
    assert all(
        way in unsigned.stderr for way in ("--signature-identity", "--signature-key", "--no-signature-check")
    )
    # with a good record the next thing needed is the engine: no daemon here, exit 3 (not a pull by tag)
    ready = run(*base, "--by-digest", "--no-signature-check")
    assert ready.returncode == exit_codes.ENVIRONMENT and "no Docker daemon answers" in ready.stderr
