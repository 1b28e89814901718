"""`build.py clean` (make clean-images): which images and cache records are the project's (the engine's API
answers, as it writes them), and the command against a small Docker API server on 127.0.0.1 through the real
SDK: --dry-run removes nothing, a run removes exactly ours."""

from __future__ import annotations

import http.server
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolchain.cli import main
from toolchain.image import clean

IMAGES = [
    {"Id": "sha256:aaa", "RepoTags": ["apex-6424da3-torch2.6.0-cu12.4-py3.13-debian13"], "Size": 6_000_000_000,
     "Labels": {"io.apex-toolchain.cell": "cli"}},
    {"Id": "sha256:bbb", "RepoTags": ["apex-toolchain/base:trixie"], "Size": 80_000_000, "Labels": None},
    {"Id": "sha256:ccc", "RepoTags": ["postgres:16"], "Size": 400_000_000, "Labels": {"maintainer": "x"}},
]  # fmt: skip
CACHE = [
    {"ID": "pip1", "Type": "exec.cachemount", "InUse": False, "Size": 3_500_000_000,
     "Description": 'cached mount /root/.cache/pip from exec /bin/sh -c sh /run/apex-toolchain/docker/with-extra-ca.sh bash /run/apex-toolchain/docker/install-torch.sh with id "/apex-toolchain-pip"'},
    {"ID": "torch1", "Type": "regular", "InUse": False, "Size": 3_000_000_000,
     "Description": "mount / from exec /bin/sh -c sh /run/apex-toolchain/docker/with-extra-ca.sh bash /run/apex-toolchain/docker/install-torch.sh"},
    {"ID": "busy1", "Type": "exec.cachemount", "InUse": True, "Size": 1, "Description": 'cached mount with id "/apex-toolchain-ccache"'},
    {"ID": "other1", "Type": "regular", "InUse": False, "Size": 5, "Description": "mount / from exec /bin/sh -c npm ci"},
]  # fmt: skip
BASES = ["apex-toolchain/base:bookworm", "apex-toolchain/base:trixie"]


def test_ours_are_the_labelled_images_the_local_bases_and_the_cache_naming_the_project() -> None:
    plan = clean.select(IMAGES, CACHE, BASES)
    assert [i.id for i in plan.images] == ["sha256:aaa", "sha256:bbb"]
    assert [r.id for r in plan.cache] == ["pip1", "torch1"]  # not the one in use, not another project's
    assert plan.size == 6_000_000_000 + 80_000_000 + 6_500_000_000


def test_an_image_that_cannot_be_removed_is_named_and_the_rest_still_goes() -> None:
    def refuse(image: str) -> None:
        if image == "sha256:aaa":
            raise RuntimeError("conflict: image is being used by running container 1f2e")

    freed, problems = clean.remove(clean.select(IMAGES, CACHE, BASES), refuse, lambda record: 10)
    assert freed == 20 and len(problems) == 1 and "being used" in problems[0]


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A Docker API server on 127.0.0.1 answering what clean asks; yields the requests that change state."""
    changes: list[str] = []

    class Api(http.server.BaseHTTPRequestHandler):
        def _send(self, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path = re.sub(r"^/v[\d.]+", "", self.path.split("?")[0])
            answers = {"/_ping": "OK", "/version": {"ApiVersion": "1.41", "Version": "20.10.24"},
                       "/images/json": IMAGES, "/system/df": {"BuildCache": CACHE, "Images": [], "Containers": [], "Volumes": []}}  # fmt: skip
            self._send(answers[path])

        def do_DELETE(self) -> None:
            changes.append("DELETE " + re.sub(r"^/v[\d.]+", "", self.path.split("?")[0]))
            self._send([{"Deleted": "x"}])

        def do_POST(self) -> None:
            changes.append("POST " + re.sub(r"^/v[\d.]+", "", self.path))
            self._send({"CachesDeleted": ["x"], "SpaceReclaimed": 1_000_000_000})

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{httpd.server_address[1]}")
    yield changes
    httpd.shutdown()
    httpd.server_close()


def test_dry_run_lists_and_removes_nothing(engine: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clean", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "apex-toolchain/base:trixie" in out and "postgres" not in out and "nothing removed" in out
    assert engine == []


def test_clean_removes_exactly_ours(
    engine: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["clean"]) == 0
    assert [c for c in engine if c.startswith("DELETE")] == [
        "DELETE /images/sha256:aaa",
        "DELETE /images/sha256:bbb",
    ]
    pruned = [urllib.parse.unquote_plus(c) for c in engine if c.startswith("POST /build/prune")]
    filters = [re.search(r"filters=(\{.*?\})(&|$)", c) for c in pruned]
    assert all(filters), pruned
    assert [json.loads(f[1])["id"] for f in filters if f] == [
        ["pip1"],
        ["torch1"],
    ]
    assert all(re.search(r"all=(1|true|True)", c) for c in pruned)
