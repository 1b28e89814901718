"""docker/fetch-apex.sh (the apex-src stage) never hands git an option: it runs in a container of the
torch-stage image (it has git) against a real local git repository, with a valid URL, and with
`--upload-pack=...` as the repository or the ref."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import REPO


@pytest.fixture
def apex_git_repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "apex.git-src"
    (repo / "apex").mkdir(parents=True)
    (repo / "setup.py").write_text("# a stand-in tree: fetch-apex.sh only clones it\n")
    (repo / "apex" / "__init__.py").write_text("")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "tree"], check=True)
    sha = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return repo, sha


def _run_fetch(client, image: str, environment: dict[str, str], volumes: dict) -> tuple[int, str]:
    script = (
        "bash /run/apex-toolchain/docker/fetch-apex.sh; code=$?; "
        "if [ -e /tmp/pwned ]; then echo PWNED; fi; exit $code"
    )
    container = client.containers.create(
        image, ["bash", "-c", script], user="0", environment=environment, volumes=volumes
    )
    try:
        container.start()
        code = container.wait(timeout=120)["StatusCode"]
        return code, container.logs().decode("utf-8", errors="replace")
    finally:
        container.remove(force=True)


@pytest.mark.parametrize(
    ("repo_value", "ref_value", "ok"),
    [
        ("file:///repo", "{sha}", True),
        ("--upload-pack=touch /tmp/pwned", "{sha}", False),
        ("file:///repo", "--upload-pack=touch /tmp/pwned", False),
    ],
    ids=["valid-url", "option-as-repo", "option-as-ref"],
)
def test_fetch_apex_never_hands_git_an_option(
    docker_client,
    torch_stage_tag: str,
    apex_git_repo: tuple[Path, str],
    repo_value: str,
    ref_value: str,
    ok: bool,
) -> None:
    repo, sha = apex_git_repo
    code, logs = _run_fetch(
        docker_client,
        torch_stage_tag,
        {"APEX_REPO": repo_value, "APEX_REF": ref_value.format(sha=sha), "APEX_FLAGS": ""},
        {
            str(REPO / "docker"): {"bind": "/run/apex-toolchain/docker", "mode": "ro"},
            str(repo): {"bind": "/repo", "mode": "ro"},
        },
    )
    assert "PWNED" not in logs
    if ok:
        assert code == 0 and f"git+file:///repo@{sha}" in logs, logs
    else:
        assert code == 1 and "must not start with '-'" in logs, logs
