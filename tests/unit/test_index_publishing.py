"""Publishing the index: the top page per stack (torch, CUDA, Python, glibc, archs, commit, both verdicts,
date, the install lines with the address), the index's own simple/ for apex-verify, GPU reports attached to
the wheel they verified, the address from GITHUB_REPOSITORY (toolchain/data/publish.toml), matrix.toml's
[published] cells and their GitHub matrix, and the publish workflow's shape."""

from __future__ import annotations

import html.parser
import json
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, run_build
from toolchain.errors import MatrixError, UsageError
from toolchain.index import gpu_reports, pages, publish
from toolchain.spec import publishing
from toolchain.spec.matrix import load_matrix

STACK = "torch2.11-cu130"
NAME = "apex-0.1+g6424da3.cu130.torch2.11-cp312-cp312-manylinux_2_28_x86_64.whl"
VERSION = "0.1+g6424da3.cu130.torch2.11"
BUILT = "2026-12-01T20:00:00+00:00"
COMMIT = "6424da3b4faa6c8f062da4a48c424fff3f02d42d"
ADDRESS = "https://acme.github.io/apex-toolchain/"


def published_folder(index: Path, verdict: str = "PASS") -> Path:
    """One wheel's folder as `build.py index` writes it (the files publish.published reads back)."""
    folder = index / STACK / "files" / "0123456789abcdef"
    folder.mkdir(parents=True)
    (folder / NAME).write_bytes(b"wheel bytes")
    (folder / f"{NAME}.metadata").write_bytes(b"Metadata-Version: 2.1\nName: apex\n")
    manifest = {
        "apex": {"commit": COMMIT},
        "arch_list": "8.0;9.0",
        "build": {"started_at": BUILT},
        "versions": {"torch": "2.11.0+cu130", "torch_cuda": "13.0"},
        "wheel_identity": {"stack": STACK},
    }
    (folder / "build-manifest.json").write_text(json.dumps(manifest))
    (folder / "verify-static.json").write_text(json.dumps({"verdict": verdict}))
    check = {"sha256": "ab" * 32, "version": VERSION, "glibc": "2.28", "requires_python": ">=3.12"}
    (folder / publish.CHECK_FILE).write_text(json.dumps(check))
    return folder


def gpu_report(tmp_path: Path, *, verdict: str = "PASS", mode: str = "full", version: str = VERSION) -> Path:
    report = {
        "mode": mode,
        "verdict": verdict,
        "apex": {"distribution": {"version": version}},
        "manifest": {"data": {"build": {"started_at": BUILT}}},
    }
    path = tmp_path / f"gpu-{verdict}-{mode}-{version}.json"
    path.write_text(json.dumps(report))
    return path


def tools(tmp_path: Path) -> dict[str, Path]:
    wheel, app = tmp_path / "apex_verify-0.1.0-py3-none-any.whl", tmp_path / "verify.pyz"
    wheel.write_bytes(b"tool wheel")
    app.write_bytes(b"zipapp")
    return {"wheel": wheel, "zipapp": app}


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [v for k, v in attrs if k == "href" and v]


# --- the top page -------------------------------------------------------------------------------


def test_the_top_page_shows_each_stacks_facts_and_the_exact_install_lines(tmp_path: Path) -> None:
    index = tmp_path / "site"
    published_folder(index)
    publish.add(index, [], publish.Extras(tools(tmp_path), ADDRESS))
    top = (index / "index.html").read_text()
    for fact in (
        "2.11.0+cu130",
        "13.0",
        "cp312",
        "2.28",
        "8.0;9.0",
        COMMIT[:12],
        "PASS",
        "not run",
        "2026-12-01",
    ):
        assert f"<td>{fact}</td>" in top, fact
    # the lines a user copies: apex-verify from the index's own simple/, the one command, pip per stack
    assert "pip install apex-verify --index-url https://acme.github.io/apex-toolchain/simple" in top
    assert "apex-verify install --index https://acme.github.io/apex-toolchain/" in top
    assert f"pip install apex --index-url https://acme.github.io/apex-toolchain/{STACK}/simple" in top
    data = json.loads((index / "stacks.json").read_text())
    (row,) = data["stacks"]
    assert data["address"] == ADDRESS and data["install"][1] == f"apex-verify install --index {ADDRESS}"
    assert (row["torch"], row["cuda"], row["python"], row["gpu_verify"]) == (
        ["2.11.0+cu130"],
        ["13.0"],
        ["cp312"],
        [pages.NOT_RUN],
    )


def test_without_an_address_the_pages_say_index_and_a_cpu_stack_says_so(tmp_path: Path) -> None:
    entry = pages.Entry(
        STACK, NAME, "f", "00", 1, VERSION, "00", None, BUILT, None, None, "PASS", None, "2.13.0+cpu"
    )
    assert "&lt;INDEX&gt;/simple" in pages.top_html(
        [entry], pages.Tools(*(pages.ToolFile("t", "0", 1, "0"),) * 2)
    )
    assert pages.stack_rows([entry])[0]["cuda"] == ["none (CPU torch)"]


def test_the_indexs_own_simple_serves_apex_verify_without_a_stack(tmp_path: Path) -> None:
    index = tmp_path / "site"
    published_folder(index)
    publish.add(index, [], publish.Extras(tools(tmp_path)))
    links = _Links()
    links.feed((index / "simple" / "index.html").read_text())
    assert links.hrefs == ["apex-verify/"]  # apex itself needs a stack: only in <stack>/simple/
    page = index / "simple" / "apex-verify"
    links = _Links()
    links.feed((page / "index.html").read_text())
    (href,) = links.hrefs
    target = (page / href.split("#")[0]).resolve()
    assert target == (index / "tools" / "apex_verify-0.1.0-py3-none-any.whl").resolve() and target.is_file()
    (file,) = json.loads((page / "index.json").read_text())["files"]
    assert (page / file["url"]).resolve() == target


# --- GPU reports ----------------------------------------------------------------------------------


def test_a_gpu_report_lands_beside_the_wheel_it_verified_and_on_the_top_page(tmp_path: Path) -> None:
    index = tmp_path / "site"
    folder = published_folder(index)
    report = gpu_reports.read(gpu_report(tmp_path, verdict="FAIL"))
    (outcome,) = publish.add(index, [], publish.Extras(tools(tmp_path), gpu=(report,)))
    assert (outcome.action, outcome.wheel) == ("gpu", NAME)
    assert (folder / gpu_reports.FILE).read_bytes() == report.data
    assert json.loads((index / "stacks.json").read_text())["stacks"][0]["gpu_verify"] == ["FAIL"]
    assert "<td>FAIL</td>" in (index / "index.html").read_text()


def test_a_gpu_report_of_another_build_is_unmatched_and_nothing_is_attached(tmp_path: Path) -> None:
    index = tmp_path / "site"
    folder = published_folder(index)
    report = gpu_reports.read(gpu_report(tmp_path, version="0.1+g6424da3.cu130.torch2.12"))
    (outcome,) = publish.add(index, [], publish.Extras(tools(tmp_path), gpu=(report,)))
    assert outcome.action == "unmatched" and "is not published" in outcome.detail
    assert not (folder / gpu_reports.FILE).exists()


@pytest.mark.parametrize(
    ("report", "says"),
    [
        ({"mode": "static", "verdict": "PASS"}, "names no installed Apex wheel"),
        (
            {
                "mode": "static",
                "verdict": "PASS",
                "apex": {"distribution": {"version": VERSION}},
                "manifest": {"data": {"build": {"started_at": BUILT}}},
            },
            "a --static run",
        ),
    ],
)
def test_a_report_that_cannot_be_a_gpu_verdict_is_refused(tmp_path: Path, report: dict, says: str) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    with pytest.raises(UsageError, match=says):
        gpu_reports.read(path)


# --- the address and the published cells ------------------------------------------------------


def test_the_address_is_the_repositorys_pages_site() -> None:
    facts = publishing.load()
    assert facts.address("Acme/apex-toolchain") == "https://acme.github.io/apex-toolchain/"
    assert facts.address("acme/acme.github.io") == "https://acme.github.io/"
    for bad in ("acme", "acme/", "/repo", "a/b/c", "acme/re po"):
        with pytest.raises(UsageError, match="not OWNER/REPO"):
            facts.address(bad)


def test_the_builder_is_pinned_by_digest_and_names_its_pythons() -> None:
    builder = publishing.load().builder
    assert builder.pinned.startswith("pytorch/manylinux2_28-builder:") and "@sha256:" in builder.pinned
    assert builder.glibc == "2.28" and builder.python("3.13") == "/opt/python/cp313-cp313/bin/python"


def test_the_published_cells_resolve_and_each_gets_a_wheel_job() -> None:
    matrix = load_matrix(REPO / "matrix.toml")
    assert matrix.published and set(matrix.published) <= {c.name for c in matrix.cells}
    done = run_build("gh-matrix", "--published")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1  # one line for $GITHUB_OUTPUT
    include = json.loads(done.stdout)["include"]
    assert [e["cell"] for e in include] == [c.name for c in matrix.cells if c.name in matrix.published]
    for entry in include:
        cell = next(c for c in matrix.cells if c.name == entry["cell"])
        minor = ".".join(cell.torch.split(".")[:2])
        assert entry["stack"] == f"torch{minor}-cu{cell.cuda.replace('.', '')}"
        assert entry["builder"] == publishing.load().builder.pinned
        assert entry["builder_python"] == publishing.load().builder.python(cell.python)
        assert entry["archs"] == cell.arch_list and entry["artifact"] == f"wheel-{cell.name}"


def test_an_arm64_cell_cannot_be_built_in_the_x86_builder() -> None:
    matrix = load_matrix(REPO / "matrix.toml")
    arm = [c for c in matrix.cells if c.platform == "linux/arm64"]
    assert arm
    with pytest.raises(UsageError, match="take the cell out of \\[published\\]"):
        publishing.gh_published(arm, publishing.load())


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('cells = ["cu13O"]', "no cell of this file; did you mean 'cu130'?"),
        ('cells = "cu130"', "cells must be a list of cell names"),
        ('cells = ["cu130", "cu130"]', "names a cell twice"),
        ('cell = ["cu130"]', "unknown key 'cell'"),
    ],
)
def test_a_wrong_published_table_is_named_with_its_fix(tmp_path: Path, table: str, says: str) -> None:
    path = tmp_path / "matrix.toml"
    cell = '[cells.cu130]\ncuda = "13.0"\ntorch = "2.11"\npython = "3.12"\narchs = ["9.0"]\n'
    path.write_text(f"{cell}\n[published]\n{table}\n")
    with pytest.raises(MatrixError) as caught:
        load_matrix(path)
    assert says in str(caught.value), str(caught.value)


# --- the workflow ---------------------------------------------------------------------------------


def test_the_publish_workflow_builds_in_the_builder_gates_indexes_and_deploys() -> None:
    flow = yaml.safe_load((REPO / ".github" / "workflows" / "publish.yml").read_text())
    jobs = flow["jobs"]
    assert list(jobs) == ["plan", "wheel", "gpu-verify", "index", "deploy"]

    def runs(job: str) -> str:
        return "\n".join(str(s.get("run", "")) + str(s.get("uses", "")) for s in jobs[job]["steps"])

    assert "build.py gh-matrix --published" in runs("plan")
    assert "scripts/build-published-wheel.sh" in runs("wheel") and "${BUILDER}" in runs("wheel")
    assert (REPO / "scripts" / "build-published-wheel.sh").is_file()
    assert "build.py wheel" in (REPO / "scripts" / "build-published-wheel.sh").read_text()
    # the GPU job is optional (a repository variable) and its absence does not stop the index
    assert jobs["gpu-verify"]["if"] == "vars.APEX_GPU_RUNNER == 'true'"
    assert "gpu-verify.result != 'failure'" in jobs["index"]["if"]
    assert '--repository "${GITHUB_REPOSITORY}"' in runs("index") and "--gpu-report" in runs("index")
    assert "actions/upload-pages-artifact" in runs("index") and "actions/deploy-pages" in runs("deploy")
    # what Apex requires besides torch: fetched by build.py index (no --no-download), attested like the rest
    assert "--no-download" not in runs("index") and "--dependency-wheels" not in runs("index")
    (attest,) = [s for s in jobs["index"]["steps"] if "attest-build-provenance" in str(s.get("uses"))]
    assert "site/dependencies/*/*.whl" in attest["with"]["subject-path"]
    assert jobs["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
