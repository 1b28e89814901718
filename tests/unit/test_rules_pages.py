"""The index's pages, on published entries (no wheel, no torch: fast): every link's PEP 658 metadata hash, in
the legacy `data-dist-info-metadata` attribute as in `data-core-metadata` (PEP 714) and in the JSON's both
keys, is the sha256 of the .metadata file; each project sits at its PEP 503 normalised name; one row per stack
with the glibc every wheel of it needs; verify's own pages. The wheel's rules: tests/unit/test_rules_index.py."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import pytest

from tests import wheel_builds as wb
from toolchain.builder import wheel_identity
from toolchain.index import pages, publish

STACK = "torch2.11-cu130"
COMMIT = "6424da3b4faa6c8f062da4a48c424fff3f02d42d"


def pep503(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _entry(name: str, metadata: bytes, stack: str = STACK) -> pages.Entry:
    return pages.Entry(
        stack=stack,
        name=name,
        folder="0123456789abcdef",
        sha256=hashlib.sha256(name.encode()).hexdigest(),
        size=1000,
        version=name.split("-")[1],
        metadata_sha256=hashlib.sha256(metadata).hexdigest(),
        requires_python=">=3.10",
        built_at="2026-12-01T20:00:00+00:00",
        commit=COMMIT,
        archs="9.0",
        verdict="PASS",
    )


def test_every_link_carries_the_metadata_hash_under_both_names_and_the_wheels_own_hash() -> None:
    metadata = {
        "apex-0.1+g6424da3.cu130.torch2.11-cp312-cp312-manylinux_2_28_x86_64.whl": b"Metadata-Version: 2.1\n",
        "apex-0.1+g6424da3.cu130.torch2.11-cp313-cp313-manylinux_2_28_x86_64.whl": b"Name: apex\n",
    }
    entries = [_entry(name, data) for name, data in metadata.items()]
    links = wb.anchors(pages.project_html(entries))
    assert len(links) == 2
    for link in links:
        name = next(
            n
            for n in metadata
            if (link["href"] or "").endswith(
                n.replace("+", "%2B") + "#sha256=" + hashlib.sha256(n.encode()).hexdigest()
            )
        )
        want = "sha256=" + hashlib.sha256(metadata[name]).hexdigest()
        assert link["data-dist-info-metadata"] == want and link["data-core-metadata"] == want
        assert link["data-requires-python"] == ">=3.10"
    files = json.loads(pages.project_json(entries))["files"]
    for file in files:
        want_hash = hashlib.sha256(metadata[file["filename"]]).hexdigest()
        assert file["core-metadata"] == file["dist-info-metadata"] == {"sha256": want_hash}
        assert file["hashes"] == {"sha256": hashlib.sha256(file["filename"].encode()).hexdigest()}


def test_each_project_sits_at_its_pep503_name_and_links_to_it(tmp_path: Path) -> None:
    tool = pages.ToolFile("apex_verify-0.1.0-py3-none-any.whl", "ab" * 32, 10, "0.1.0")
    tools = pages.Tools(wheel=tool, zipapp=pages.ToolFile("verify.pyz", "cd" * 32, 10, "0"))
    entry = _entry("apex-0.1+cpu.torch2.13-cp312-cp312-manylinux_2_5_x86_64.whl", b"x")
    publish.write_pages(tmp_path, [entry], tools)
    simple = tmp_path / STACK / "simple"
    projects = sorted(p.name for p in simple.iterdir() if p.is_dir())
    assert projects == [pep503(pages.PROJECT), pep503(pages.TOOL_PROJECT)]
    assert [pep503(wheel_identity.parse_name(tool.name)[0])] == [p for p in projects if "verify" in p]
    root_links = [a["href"] for a in wb.anchors((simple / "index.html").read_text())]
    assert root_links == [f"{p}/" for p in projects]
    assert [p["name"] for p in json.loads((simple / "index.json").read_text())["projects"]] == projects
    assert json.loads((simple / pages.TOOL_PROJECT / "index.json").read_text())["name"] == pep503(
        pages.TOOL_PROJECT
    )


def _stacked(stack: str, name: str, **fields: object) -> pages.Entry:
    return dataclasses.replace(_entry(name, b"m", stack), **fields)  # type: ignore[arg-type]


def test_the_top_page_rows_one_per_stack_with_the_glibc_every_wheel_needs() -> None:
    entries = [
        _stacked("torch2.11-cu130", "apex-0.1+a-cp312-x.whl", glibc="2.5", built_at="2026-12-01T20:00:00"),
        _stacked("torch2.11-cu130", "apex-0.1+a-cp313-x.whl", glibc="2.28", built_at="2026-12-02T08:00:00"),
        _stacked("torch2.11-cu130", "apex-0.1+a-cp311-x.whl", glibc="2.17", archs=None, commit=None),
        _stacked("torch2.9-cu128", "apex-0.1+b-cp312-x.whl", glibc=None, verdict="WARN"),
    ]
    entries[1] = dataclasses.replace(
        entries[1], stack="".join(["torch2.11", "-cu130"])
    )  # equal, not the same
    rows = pages.stack_rows(entries)
    assert [r["stack"] for r in rows] == ["torch2.11-cu130", "torch2.9-cu128"]
    first, second = rows
    assert first["glibc"] == "2.28"  # by version, not by text ("2.5" > "2.28" as text)
    assert first["built"] == "2026-12-02" and first["simple"] == "torch2.11-cu130/simple/"
    assert first["archs"] == ["9.0", "none (no CUDA module)"] and first["apex_commits"] == [
        COMMIT,
        "unknown",
    ]
    assert first["wheels"] == sorted(e.name for e in entries[:3]) and first["verify"] == ["PASS"]
    assert (second["glibc"], second["verify"]) == ("unknown", ["WARN"])
    top = json.loads(pages.top_json(entries))
    assert (
        top["index_version"] == 1
        and top["project"] == "apex"
        and top["stacks"] == [{**r, "install": pages.install_commands(None, r["stack"])} for r in rows]
        and "tools" not in top
    )
    page = pages.top_html(entries)
    assert page.count("<tr><td>") == 2 and "<td>2.28</td>" in page
    assert "pip install apex --index-url &lt;INDEX&gt;/torch2.9-cu128/simple<" in page


def test_the_tool_pages_link_verify_from_every_stack() -> None:
    tool = pages.ToolFile("apex_verify-0.1.0-py3-none-any.whl", "ab" * 32, 123, "0.1.0")
    app = pages.ToolFile("verify.pyz", "cd" * 32, 45, "0")
    tools = pages.Tools(wheel=tool, zipapp=app)
    (link,) = wb.anchors(pages.tool_html(tool))
    assert link["href"] == f"../../../tools/{tool.name}#sha256={tool.sha256}"
    assert link["data-requires-python"] == ">=3.10"
    data = json.loads(pages.tool_json(tool))
    assert data["versions"] == ["0.1.0"] and data["name"] == pages.TOOL_PROJECT
    assert data["files"] == [
        {
            "filename": tool.name,
            "url": f"../../../tools/{tool.name}",
            "hashes": {"sha256": tool.sha256},
            "requires-python": ">=3.10",
            "size": 123,
            "yanked": False,
        }
    ]
    top = json.loads(pages.top_json([_entry("apex-0.1+c-cp312-x.whl", b"m")], tools))
    assert top["tools"] == {
        pages.TOOL_PROJECT: {"file": f"tools/{tool.name}", "sha256": tool.sha256},
        "zipapp": {"file": "tools/verify.pyz", "sha256": app.sha256},
    }
    html_page = pages.top_html([_entry("apex-0.1+c-cp312-x.whl", b"m")], tools)
    assert 'href="tools/verify.pyz"' in html_page and f'href="tools/{tool.name}"' in html_page
    assert "Check what you installed" not in pages.top_html([_entry("apex-0.1+c-cp312-x.whl", b"m")])
    assert [p["name"] for p in json.loads(pages.root_json())["projects"]] == [pages.PROJECT]
    assert json.loads(pages.root_json())["meta"] == {"api-version": pages.API_VERSION}


def test_a_link_without_requires_python_has_no_attribute_and_versions_are_listed_once() -> None:
    bare = dataclasses.replace(_entry("apex-0.1+a-cp312-x.whl", b"m"), requires_python=None)
    twin = dataclasses.replace(_entry("apex-0.1+a-cp313-x.whl", b"m"), version=bare.version)
    (link, _) = wb.anchors(pages.project_html([twin, bare]))
    assert "data-requires-python" not in link and link["href"].endswith("cp312-x.whl#sha256=" + bare.sha256)  # type: ignore[union-attr]
    data = json.loads(pages.project_json([twin, bare]))
    assert data["versions"] == [bare.version] and "requires-python" not in data["files"][0]
    assert data["meta"] == {"api-version": pages.API_VERSION} and data["files"][0]["size"] == 1000
    assert data["files"][0]["yanked"] is False and data["files"][0]["url"].startswith(
        "../../files/0123456789abcdef/"
    )


def test_pages_are_stable_bytes_and_records_do_not_change_under_them() -> None:
    entries = [_entry("apex-0.1+a-cp312-x.whl", b"m"), _entry("apex-0.1+a-cp313-x.whl", b"n")]
    for text in (pages.project_json(entries), pages.top_json(entries), pages.root_json()):
        assert (
            text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
        )  # keys sorted: same bytes
    assert f"<td>{COMMIT[:12]}</td>" in pages.top_html(entries)  # the commit as git abbreviates it
    tool = pages.ToolFile("apex_verify-0.1.0-py3-none-any.whl", "ab" * 32, 1, "0.1.0")
    for record in (tool, entries[0], pages.Tools(wheel=tool, zipapp=tool)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.size = 2  # type: ignore[misc,union-attr]


@pytest.mark.parametrize(
    ("name", "python"),
    [
        ("apex-0.1+a-cp312-abi3-manylinux_2_28_x86_64.whl", ["cp312"]),  # the ABI tag is not read
        ("apex-0.1+a-1-cp311.cp312-abi3-manylinux_2_28_x86_64.whl", ["cp311", "cp312"]),  # a build tag
        ("apex-0.1+a-cp312-manylinux_2_28_x86_64.whl", []),  # four parts: no PEP 425 triple to read
        ("apex-0.1+a-1-2-cp312-cp312-linux_x86_64.whl", []),  # seven parts: not a wheel name either
    ],
)
def test_the_stack_row_names_the_python_tags_of_its_wheel_names(name: str, python: list[str]) -> None:
    (row,) = pages.stack_rows([_stacked(STACK, name)])
    assert row["python"] == python


@pytest.mark.parametrize(
    ("torch", "torch_cuda", "shown"),
    [
        (None, None, "unknown"),
        (None, "13.0", "unknown"),
        ("2.11.0", None, "none (CPU torch)"),
        ("2.11.0", "13.0", "13.0"),
    ],
)
def test_the_stack_row_names_the_cuda_of_the_torch_each_wheel_was_built_against(
    torch: str | None, torch_cuda: str | None, shown: str
) -> None:
    (row,) = pages.stack_rows([_stacked(STACK, "apex-0.1+a-cp312-x.whl", torch=torch, torch_cuda=torch_cuda)])
    assert row["cuda"] == [shown]


@pytest.mark.parametrize("address", [None, "", "https://example.org/apex/"])
@pytest.mark.parametrize("with_tools", [False, True])
def test_stacks_json_names_the_address_and_the_tool_install_only_when_there_are_some(
    address: str | None, with_tools: bool
) -> None:
    tool = pages.ToolFile("apex_verify-0.1.0-py3-none-any.whl", "ab" * 32, 123, "0.1.0")
    tools = pages.Tools(wheel=tool, zipapp=pages.ToolFile("verify.pyz", "cd" * 32, 45, "0"))
    top = json.loads(
        pages.top_json([_entry("apex-0.1+c-cp312-x.whl", b"m")], tools if with_tools else None, address)
    )
    assert top.get("address") == (address or None)
    assert top.get("install") == (pages.install_commands(address) if with_tools else None)


def test_a_tool_is_linked_from_a_stacks_project_page_or_from_the_top_simple_folder() -> None:
    tool = pages.ToolFile("apex_verify-0.1.0-py3-none-any.whl", "ab" * 32, 123, "0.1.0")
    assert tool.href_from_project(False) == f"../../../tools/{tool.name}"
    assert tool.href_from_project(True) == f"../../tools/{tool.name}"
    assert json.loads(pages.tool_json(tool, top=True))["files"][0]["url"] == f"../../tools/{tool.name}"
