"""`build.py facts check` beyond PyPI: NVIDIA's image tags, PyTorch's index, Apex upstream. Their answers
are served from tests/fixtures/upstream-2026-12-03 by a server on 127.0.0.1 (only PyPI answers from here);
setup.py at HEAD comes from the upstream archive in ../shared/fixtures, never from this repository."""

from __future__ import annotations

import base64
import dataclasses
import http.server
import json
import tarfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import APEX_FIXTURES, FROZEN_FACTS, REPO, local_server, run_build
from toolchain.spec import compat, facts_check, upstream_facts
from verify.runtime import exit_codes

ANSWERS = REPO / "tests" / "fixtures" / "upstream-2026-12-03"
PIN_ARCHIVE = APEX_FIXTURES / "apex-6424da3b.tar.gz"
FETCH = facts_check.urllib_fetcher(timeout_s=10)


def _pinned_setup_py() -> str:
    if not PIN_ARCHIVE.is_file():
        pytest.skip(f"{PIN_ARCHIVE} is absent (bash scripts/apex-fixtures.sh DIR makes it from GitHub)")
    with tarfile.open(PIN_ARCHIVE) as archive:
        member = archive.extractfile("apex/setup.py")
        assert member is not None
        return member.read().decode()


class _Sources(http.server.BaseHTTPRequestHandler):
    """Docker Hub's tag pages, PyTorch's whl/cuXYZ/torch/ pages and GitHub's API, from ANSWERS."""

    setup_py = ""
    tags_file = ANSWERS / "github" / "tags.json"

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        parts = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        base = f"http://127.0.0.1:{self.server.server_address[1]!s}"  # type: ignore[index]
        body: bytes | None = None
        if parts.path == "/v2/repositories/nvidia/cuda/tags":
            page = ANSWERS / "registry" / f"{query['name'].rstrip('.')}.page{query.get('page', '1')}.json"
            text = page.read_text() if page.is_file() else '{"count": 0, "next": null, "results": []}'
            body = text.replace("{base}", base).encode()
        elif parts.path.startswith("/whl/") and parts.path.endswith("/torch/"):
            page = ANSWERS / "torch-index" / f"{parts.path.split('/')[2]}.html"
            body = page.read_bytes() if page.is_file() else None
        elif parts.path == "/repos/NVIDIA/apex/commits/HEAD":
            body = (ANSWERS / "github" / "head.json").read_bytes()
        elif parts.path == "/repos/NVIDIA/apex/tags":
            body = self.tags_file.read_bytes()
        elif parts.path == "/repos/NVIDIA/apex/contents/setup.py":
            content = base64.b64encode(self.setup_py.encode()).decode()
            body = json.dumps({"encoding": "base64", "content": content}).encode()
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def sources() -> Iterator[str]:
    _Sources.setup_py = _pinned_setup_py()
    with local_server(_Sources) as url:
        yield url


def _facts() -> compat.Compat:
    """The live facts of CUDA 13.0/13.2 and torch 2.12-2.15, as they stood before CUDA 13.0.3 was recorded."""
    live = compat.load()
    return dataclasses.replace(
        live,
        torch={m: live.torch[m] for m in ("2.12", "2.13", "2.14", "2.15")},
        cuda={
            "13.0": dataclasses.replace(live.cuda["13.0"], full="13.0.2"),
            "13.2": live.cuda["13.2"],
        },
    )


def test_image_tags_name_the_newer_patch_a_missing_os_and_a_cuda_without_a_row(sources: str) -> None:
    found, compared = upstream_facts.image_tags(_facts(), FETCH, sources)
    said = [(f.kind, f.subject, f.fix) for f in found]
    assert ("wrong", "cuda 13.0", 'set full = "13.0.3" in [cuda."13.0"]') in said  # read across two pages
    assert ("missing", "cuda 13.2", 'add "ubuntu26.04" to os in [cuda."13.2"]') in said
    assert any(k == "missing" and s == "cuda 13.5" and 'add [cuda."13.5"]' in fix for k, s, fix in said)
    # the [[toolkit]] nvcc minors without a [cuda] row are asked too (13.1, 13.3, 13.4: no tags served)
    assert len(found) == 3 and compared == "nvidia/cuda tags of CUDA 13.0, 13.1, 13.2, 13.3, 13.4, 13.5"
    # the live facts carry 13.0.3: that finding is gone
    live = dataclasses.replace(_facts(), cuda={"13.0": compat.load().cuda["13.0"]})
    assert upstream_facts.image_tags(live, FETCH, sources)[0][:1] != found[:1]


def test_torch_index_builds_name_the_row_to_change(sources: str) -> None:
    found, _ = upstream_facts.torch_index_builds(_facts(), FETCH, sources)
    said = {(f.kind, f.subject, f.fix) for f in found}
    # 2.15 on whl/cu130: the lead of RFC pytorch/pytorch#190385, a fact once the index answers
    assert ("missing", "torch 2.15", 'add "13.0" to cuda in [torch."2.15"]') in said
    assert ("missing", "torch 2.15", 'add "13.0" to aarch64_cuda in [torch."2.15"]') in said
    assert len(said) == 2  # every other build the facts list is on the index, and nothing more


def test_a_build_the_facts_list_but_the_index_lacks_is_wrong(sources: str) -> None:
    facts = _facts()
    claims = dataclasses.replace(facts.torch["2.12"], cuda=("12.6", "12.8", "13.0", "13.2"))
    found, _ = upstream_facts.torch_index_builds(
        dataclasses.replace(facts, torch={**facts.torch, "2.12": claims}), FETCH, sources
    )
    assert any(f.kind == "wrong" and f.fix == 'remove "12.8" from cuda in [torch."2.12"]' for f in found)


def test_apex_upstream_past_the_pin_is_behind_with_the_row_to_move(sources: str) -> None:
    found, compared = upstream_facts.apex_head(_facts(), FETCH, sources)
    assert [(f.kind, f.subject) for f in found] == [("behind", "apex HEAD")]  # setup.py: same style, modules
    assert "9e3568a6 (2026-07-20); the facts pin 6424da3b" in found[0].problem
    assert "default_ref in [apex]" in found[0].fix and compared.startswith("NVIDIA/apex HEAD 9e3568a6")


def test_a_new_tag_and_a_rewritten_setup_py_are_named(sources: str, tmp_path: Path) -> None:
    tags = tmp_path / "tags.json"
    tags.write_text(json.dumps([{"name": "26.01"}, *json.loads(_Sources.tags_file.read_text())]))
    _Sources.tags_file = tags
    # the open upstream rewrite (NVIDIA/apex#1996) drops ENV_TO_FLAG for op_builder/ and APEX_BUILD_*_OPS
    _Sources.setup_py = _pinned_setup_py().replace("ENV_TO_FLAG", "OPS_TO_BUILD") + "\n# op_builder\n"
    try:
        found, _ = upstream_facts.apex_head(_facts(), FETCH, sources)
    finally:
        _Sources.tags_file = ANSWERS / "github" / "tags.json"
    by_subject = {f.subject: f for f in found}
    assert (
        by_subject["apex tag 26.01"].kind == "missing" and "(25.09)" in by_subject["apex tag 26.01"].problem
    )
    rewrite = by_subject["apex setup.py"]
    assert rewrite.kind == "wrong" and "op_builder" in rewrite.problem and "apex_setup.py" in rewrite.fix


def test_an_unreachable_source_is_said_so_and_the_others_still_compare(sources: str) -> None:
    results = upstream_facts.check_all(_facts(), FETCH, "http://127.0.0.1:9", sources, sources)
    registry, index, apex = results
    assert registry.unreachable and "127.0.0.1:9" in registry.unreachable and not registry.findings
    assert index.unreachable is None and apex.unreachable is None and apex.findings


def test_a_source_answering_something_else_is_unreachable_not_drift(sources: str) -> None:
    # PyTorch's index asked where GitHub's API is: no such pages -> no JSON; an HTML page is no tag list
    results = upstream_facts.check_all(_facts(), FETCH, sources + "/whl", sources, sources + "/v2")
    assert (
        results[0].unreachable and results[2].unreachable and "no such repository" in results[2].unreachable
    )


def test_the_command_says_unreachable_never_current(sources: str, tmp_path: Path) -> None:
    pypi = (REPO / "tests" / "fixtures" / "pypi-2026-12-01").as_uri()
    closed = "http://127.0.0.1:9"
    proc = run_build(
        "facts", "check", "--index", pypi, "--facts", str(FROZEN_FACTS),
        "--registry", closed, "--torch-index", sources, "--apex-upstream", closed,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == exit_codes.FAILED, out + proc.stderr
    assert "[UNREACH] NVIDIA image registry (http://127.0.0.1:9): unreachable, not compared" in out
    assert "[UNREACH] Apex upstream" in out and "[ SEEN ] PyTorch index" in out
    assert "current" not in out.splitlines()[-1]
    assert out.splitlines()[-1].endswith(
        "unreachable, not compared: NVIDIA image registry, Apex upstream - exit 1"
    )
    # the frozen facts lack 2.15's cu130 build: the index's drift names the row
    assert "[DRIFT ] missing: torch 2.15: PyTorch's index has linux x86_64 wheels of torch 2.15" in out


def test_a_bad_source_url_is_a_usage_error_naming_the_option() -> None:
    proc = run_build("facts", "check", "--registry", "ftp://example.org")
    assert proc.returncode == exit_codes.USAGE
    assert proc.stderr.strip().startswith("error: --registry 'ftp://example.org': has the scheme ftp:")
    assert "Docker Hub's API" in proc.stderr


# --- the CUDA wheels' cuda-toolkit pins, against PyPI's cuda-toolkit releases ---------------------


def test_every_cuda_toolkit_minor_on_pypi_has_its_newest_release_recorded() -> None:
    pypi = (REPO / "tests" / "fixtures" / "pypi-2026-12-01").as_uri()
    assert facts_check._compare_toolkit_pins(FETCH, pypi) == []


def test_a_newer_cuda_toolkit_release_names_the_pins_to_record(tmp_path: Path) -> None:
    import shutil

    mirror = tmp_path / "pypi-mirror"
    shutil.copytree(REPO / "tests" / "fixtures" / "pypi-2026-12-01" / "pypi", mirror / "pypi")
    answer = mirror / "pypi" / "cuda-toolkit" / "json"
    data = json.loads(answer.read_text())
    for version in ("13.5.1", "13.6.0"):
        data["releases"][version] = [
            {"filename": f"cuda_toolkit-{version}-py2.py3-none-any.whl", "yanked": False}
        ]
    answer.write_text(json.dumps(data))
    found = {f.subject: f for f in facts_check._compare_toolkit_pins(FETCH, mirror.as_uri())}
    assert set(found) == {"cuda-toolkit 13.5", "cuda-toolkit 13.6"}
    assert (
        found["cuda-toolkit 13.5"].kind == "wrong" and "records 13.5.0" in found["cuda-toolkit 13.5"].problem
    )
    assert found["cuda-toolkit 13.6"].kind == "missing" and "has no row" in found["cuda-toolkit 13.6"].problem
    assert "toolchain/data/cuda_wheels.json" in found["cuda-toolkit 13.6"].fix
