"""The one output rule for a tree the tool owns (verify.runtime.atomic.write_in_tree and the index's publish step
on it): a link inside the tree is never followed out of it, on real symlinks, FIFOs and folders; a refusal
leaves every page of the index as it was; a damaged published folder is left out of every page alike."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import pytest

from toolchain.index import publish
from toolchain.index.wheel_check import CheckedWheel
from verify.runtime import atomic

STACK = "torch2.13-cpu"


def test_write_in_tree_makes_folders_writes_atomically_and_skips_unchanged_bytes(tmp_path: Path) -> None:
    assert atomic.write_in_tree(tmp_path, "a/b/page.html", b"one") is True
    assert (tmp_path / "a" / "b" / "page.html").read_bytes() == b"one"
    before = (tmp_path / "a" / "b" / "page.html").stat().st_mtime_ns
    assert atomic.write_in_tree(tmp_path, "a/b/page.html", b"one") is False
    assert (tmp_path / "a" / "b" / "page.html").stat().st_mtime_ns == before
    assert atomic.write_in_tree(tmp_path, "a/b/page.html", b"two") is True
    assert (tmp_path / "a" / "b" / "page.html").read_bytes() == b"two"
    assert oct((tmp_path / "a" / "b" / "page.html").stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["page.html"]  # no temp file left


def test_a_link_file_inside_the_tree_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    outside = tmp_path / "somefile"
    outside.write_text("keep")
    tree = tmp_path / "site" / "index"
    tree.mkdir(parents=True)
    (tree / "stacks.json").symlink_to("../../somefile")
    with pytest.raises(atomic.LinkInOwnedTree) as caught:
        atomic.write_in_tree(tree, "stacks.json", b"{}")
    assert outside.read_text() == "keep"
    message = f"{caught.value.filename}: {caught.value.strerror}"
    assert "stacks.json: is a symbolic link (to ../../somefile)" in message and "\n" not in message


def test_a_link_folder_inside_the_tree_is_refused_and_nothing_lands_outside(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    tree = tmp_path / "index"
    (tree / STACK).mkdir(parents=True)
    (tree / STACK / "files").symlink_to(elsewhere)
    with pytest.raises(atomic.LinkInOwnedTree, match="is a symbolic link"):
        atomic.write_in_tree(tree, f"{STACK}/files/abc/x.whl", b"wheel")
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(atomic.LinkInOwnedTree, match="not a path inside the tree"):
        atomic.write_in_tree(tree, "../x", b"")


def test_a_fifo_or_folder_where_a_file_belongs_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "index.html")
    with pytest.raises(atomic.LinkInOwnedTree, match="FIFO|neither"):
        atomic.write_in_tree(tmp_path, "index.html", b"x")
    (tmp_path / "stacks.json").mkdir()
    with pytest.raises(atomic.LinkInOwnedTree, match="directory"):
        atomic.write_in_tree(tmp_path, "stacks.json", b"x")
    os.mkfifo(tmp_path / ".lock")
    with pytest.raises(atomic.LinkInOwnedTree, match="FIFO"):
        atomic.open_lock_in_tree(tmp_path, ".lock")


def _checked_wheel(root: Path, version: str = "0.1+cpu.torch2.13") -> CheckedWheel:
    """A CheckedWheel as wheel_check returns one (publish does not check again): a real small zip."""
    path = root / f"apex-{version}-cp312-cp312-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("apex/__init__.py", "")
    data = path.read_bytes()
    return CheckedWheel(
        path=path,
        name=path.name,
        sha256=hashlib.sha256(data).hexdigest(),
        version=version,
        stack=STACK,
        metadata=b"Metadata-Version: 2.1\nName: apex\nVersion: " + version.encode() + b"\n",
        manifest={
            "apex": {"commit": None, "ref": None},
            "build": {"started_at": "2026-12-03T10:00:00+00:00"},
        },
        verify_json=b'{"verdict": "PASS"}',
        verify_md=None,
        libraries={},
        requires_python=">=3.10",
    )


def _pages(index: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(index)): p.read_bytes()
        for p in sorted(index.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.name != ".lock"
    }


def test_publish_refuses_a_link_anywhere_in_the_index_before_writing_anything(tmp_path: Path) -> None:
    index = tmp_path / "index"
    publish.add(index, [_checked_wheel(tmp_path)])
    before = _pages(index)
    outside = tmp_path / "x"
    outside.write_text("keep")
    (index / "stacks.json").unlink()
    (index / "stacks.json").symlink_to(outside)
    before.pop("stacks.json")
    with pytest.raises(atomic.LinkInOwnedTree, match="stacks.json: is a symbolic link|symbolic link"):
        publish.add(index, [_checked_wheel(tmp_path, "0.2+cpu.torch2.13")])
    assert outside.read_text() == "keep"
    assert _pages(index) == before  # no page, no wheel folder written


def test_publish_never_lands_a_wheel_folder_outside_through_a_files_link(tmp_path: Path) -> None:
    index = tmp_path / "index"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (index / STACK).mkdir(parents=True)
    (index / STACK / "files").symlink_to(elsewhere)
    with pytest.raises(atomic.LinkInOwnedTree, match="files"):
        publish.add(index, [_checked_wheel(tmp_path)])
    assert list(elsewhere.iterdir()) == [] and not (index / "stacks.json").exists()


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("wheel-check.json", '["a list"]'),
        ("wheel-check.json", '{"sha256": ["x"], "version": "0.1"}'),
        ("build-manifest.json", '{"build": "now"}'),
        ("verify-static.json", "{not json"),
    ],
)
def test_a_damaged_published_folder_is_left_out_of_every_page_alike(
    tmp_path: Path, name: str, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    index = tmp_path / "index"
    publish.add(index, [_checked_wheel(tmp_path)])
    (damaged,) = (index / STACK / "files").iterdir()
    (damaged / name).write_text(text)
    publish.add(index, [_checked_wheel(tmp_path, "0.2+cpu.torch2.13")])
    err = capsys.readouterr().err
    assert "is not a whole published wheel" in err and "Traceback" not in err
    listed_json = [
        f["filename"] for f in json.loads((index / STACK / "simple/apex/index.json").read_text())["files"]
    ]
    html = (index / STACK / "simple/apex/index.html").read_text()
    stacks = json.loads((index / "stacks.json").read_text())["stacks"][0]["wheels"]
    assert listed_json == stacks == ["apex-0.2+cpu.torch2.13-cp312-cp312-manylinux_2_28_x86_64.whl"]
    assert "0.1+cpu" not in html and "0.2+cpu" in html


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("build-manifest.json", False),
        ("unit-times.jsonl", False),
        ("apex-0.1-cp312-cp312-linux_x86_64.whl", False),  # a wheel's name: the builder moves one in
        ("apex-build.log", True),  # a link to a folder outside
    ],
)
def test_build_py_wheel_refuses_a_link_where_it_writes_in_out_before_building(
    tmp_path: Path, name: str, folder: bool
) -> None:
    from tests import wheel_builds as wb
    from tests.support import run_build

    src = wb.apex_shaped_tree(tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    if folder:
        elsewhere.mkdir()
    else:
        elsewhere.write_text("keep")
    (out / name).symlink_to(elsewhere)
    done = run_build("wheel", "--apex-src", str(src), "--out", str(out), "--flags", "APEX_CPP_EXT")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{name}: is a symbolic link" in done.stderr.strip().splitlines()[-1]
    assert (list(elsewhere.iterdir()) == []) if folder else (elsewhere.read_text() == "keep")
    assert sorted(p.name for p in out.iterdir()) == [name]  # nothing written into --out either


@pytest.mark.parametrize("folder", [False, True])
def test_move_in_tree_refuses_a_link_at_the_name_and_moves_a_file_otherwise(
    tmp_path: Path, folder: bool
) -> None:
    tree, private = tmp_path / "out", tmp_path / "private"
    tree.mkdir()
    private.mkdir()
    made = private / "w.whl"
    made.write_bytes(b"wheel")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir() if folder else elsewhere.write_text("keep")
    (tree / "w.whl").symlink_to(elsewhere)
    with pytest.raises(atomic.LinkInOwnedTree, match="w.whl: |symbolic link") as caught:
        atomic.move_in_tree(tree, "w.whl", made)
    assert "is a symbolic link (to " in str(caught.value.strerror)
    assert caught.value.filename == str(tree / "w.whl")
    assert (list(elsewhere.iterdir()) == []) if folder else (elsewhere.read_text() == "keep")
    assert made.read_bytes() == b"wheel"  # nothing moved
    (tree / "w.whl").unlink()
    (tree / "sub").symlink_to(elsewhere if folder else tmp_path)
    with pytest.raises(atomic.LinkInOwnedTree, match="symbolic link"):
        atomic.move_in_tree(tree, "sub/w.whl", made)  # a link on the way
    atomic.move_in_tree(tree, "w.whl", made)
    assert (tree / "w.whl").read_bytes() == b"wheel" and not made.exists()


def test_move_in_tree_copies_across_filesystems_by_the_same_rule(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs a second filesystem (/dev/shm) to make rename fail with EXDEV")
    import tempfile

    with tempfile.TemporaryDirectory(dir=shm) as private:
        made = Path(private) / "w.whl"
        made.write_bytes(b"wheel" * 1000)
        made.chmod(0o644)
        (tmp_path / "w.whl").symlink_to(tmp_path / "elsewhere")
        with pytest.raises(atomic.LinkInOwnedTree, match="symbolic link"):
            atomic.move_in_tree(tmp_path, "w.whl", made)
        assert not (tmp_path / "elsewhere").exists()
        (tmp_path / "w.whl").unlink()
        atomic.move_in_tree(tmp_path, "w.whl", made)
        assert (tmp_path / "w.whl").read_bytes() == b"wheel" * 1000 and not made.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["w.whl"]  # no temp file left


def test_open_append_in_tree_appends_and_refuses_a_link(tmp_path: Path) -> None:
    fd = atomic.open_append_in_tree(tmp_path, "build.log")
    os.write(fd, b"one\n")
    os.close(fd)
    fd = atomic.open_append_in_tree(tmp_path, "build.log")
    os.write(fd, b"two\n")
    os.close(fd)
    assert (tmp_path / "build.log").read_bytes() == b"one\ntwo\n"
    outside = tmp_path / "outside"
    outside.write_text("keep")
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "build.log").symlink_to(outside)
    with pytest.raises(atomic.LinkInOwnedTree, match="build.log: |symbolic link"):
        atomic.open_append_in_tree(tmp_path / "tree", "build.log")
    os.mkfifo(tmp_path / "tree" / "fifo.log")
    with pytest.raises(atomic.LinkInOwnedTree, match="FIFO"):
        atomic.open_append_in_tree(tmp_path / "tree", "fifo.log")
    assert outside.read_text() == "keep"


def test_the_builder_moves_pips_wheel_into_out_by_the_rule_and_refuses_a_link_there(tmp_path: Path) -> None:
    """The real builder (pip wheel of a tiny real C extension, the wheel identity, the manifest): pip builds
    into a private temp folder, never --out; the wheel moves in by the owned-tree rule, so a link planted at
    its name (learnt from a first build) is refused and its target left as it was."""
    from tests.unit.test_apex_builder import build

    code, out = build(tmp_path / "first", {"APEX_CPP_EXT": "1"})
    assert code == 0
    (wheel,) = out.glob("*.whl")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["apex-build.log", "build-manifest.json", wheel.name]
    )  # nothing of pip's staging left in --out
    second = tmp_path / "second"
    elsewhere = tmp_path / "elsewhere.whl"
    elsewhere.write_text("keep")
    (second / "out").mkdir(parents=True)
    (second / "out" / wheel.name).symlink_to(elsewhere)
    with pytest.raises(atomic.LinkInOwnedTree, match="symbolic link") as caught:
        build(second, {"APEX_CPP_EXT": "1"})
    assert caught.value.filename == str(second / "out" / wheel.name)
    assert elsewhere.read_text() == "keep" and (second / "out" / wheel.name).is_symlink()


def test_a_failure_while_the_pages_are_written_leaves_every_page_as_it_was(tmp_path: Path) -> None:
    index = tmp_path / "index"
    publish.add(index, [_checked_wheel(tmp_path)])
    before = _pages(index)
    (index / "index.html").unlink()
    (index / "index.html").mkdir()  # the last page written: the failure comes after the others are staged
    before.pop("index.html")
    with pytest.raises(atomic.LinkInOwnedTree, match="directory"):
        publish.add(index, [_checked_wheel(tmp_path, "0.2+cpu.torch2.13")])
    after = {k: v for k, v in _pages(index).items() if "/files/" not in k}
    assert after == {k: v for k, v in before.items() if "/files/" not in k}  # no page changed
    assert not [p for p in index.rglob("*.tmp")]  # nothing staged is left


def test_a_batch_lands_together_or_not_at_all(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_bytes(b"old a")
    with pytest.raises(RuntimeError), atomic.TreeBatch(tmp_path) as batch:
        assert batch.add("a.html", b"new a") is True
        assert batch.add("sub/b.html", b"new b") is True
        raise RuntimeError("a failure after staging")
    assert (tmp_path / "a.html").read_bytes() == b"old a" and not (tmp_path / "sub" / "b.html").exists()
    with atomic.TreeBatch(tmp_path) as batch:
        batch.add("a.html", b"new a")
        batch.add("sub/b.html", b"new b")
    assert (tmp_path / "a.html").read_bytes() == b"new a" and (
        tmp_path / "sub" / "b.html"
    ).read_bytes() == b"new b"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.html", "b.html", "sub"]


def _write_verify_wheel(out: Path) -> str:
    from toolchain.image import verify_wheel

    return verify_wheel.build(out).path.name


def _write_zipapp(out: Path) -> str:
    from toolchain.image import verify_zipapp

    return verify_zipapp.build(out).path.name


def _write_report(out: Path) -> str:
    from toolchain.runs import report_tables

    report_tables.write(out)
    return report_tables.MD_NAME


def _write_bench(out: Path) -> str:
    from verify.bench import results

    results.write({}, out)  # type: ignore[typeddict-item]  # bench.json is staged before the Markdown is made
    return results.JSON_NAME


@pytest.mark.parametrize("write", [_write_verify_wheel, _write_zipapp, _write_report, _write_bench])
@pytest.mark.parametrize("folder", [False, True])
def test_every_command_writing_into_an_out_folder_refuses_a_link_there(
    tmp_path: Path, write, folder: bool
) -> None:
    """verify-wheel --out, zipapp --out DIR, report --out, verify bench --out: the file they write in the
    folder is never written through a link planted there (a file link, a folder link), and nothing lands
    outside; without the link (the first run, which learns the name) the file is written as before."""
    out = tmp_path / "out"
    out.mkdir()
    try:
        name = write(out)
    except KeyError:  # bench's Markdown of an empty document: its JSON was staged, then all dropped
        name = "bench.json"
    for stale in out.iterdir():
        stale.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir() if folder else elsewhere.write_text("keep")
    (out / name).symlink_to(elsewhere)
    with pytest.raises(atomic.LinkInOwnedTree, match="symbolic link") as caught:
        write(out)
    assert caught.value.filename == str(out / name)
    assert (list(elsewhere.iterdir()) == []) if folder else (elsewhere.read_text() == "keep")


@pytest.mark.parametrize("planted", ["matrix-report.json", ".matrix-report.json.lock", "cells"])
def test_a_matrix_run_refuses_a_link_in_its_out_folder(tmp_path: Path, planted: str) -> None:
    """build.py run's --out: the run's overview, its lock and each cell's result.json are written by the
    owned-tree rule; a link planted there (a file, a lock, the cells/ folder) is refused, its target kept."""
    import io

    from tests.support import REPO, matrix_cells
    from toolchain.console import Console
    from toolchain.runs import run_loop
    from toolchain.runs.run_request import RunRequest

    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir() if planted == "cells" else elsewhere.write_text("keep")
    (out / planted).symlink_to(elsewhere)
    (cell,) = matrix_cells("12.4")
    with pytest.raises(atomic.LinkInOwnedTree, match="symbolic link"):
        run_loop.run_matrix(
            [cell],
            RunRequest(out=out, logs=tmp_path / "logs"),
            Console(io.StringIO()),
            matrix_path=REPO / "matrix.toml",
            unavailable={cell.name: "no base for it"},
        )
    assert (list(elsewhere.iterdir()) == []) if planted == "cells" else (elsewhere.read_text() == "keep")


# --- the run's --logs, verify's folder in --out, the publish record: the same rule, from the command line ----

CELL_ID = "apex-t1"  # the one cell of _tiny_matrix, by its tag


def _tiny_matrix(tmp_path: Path) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(
        '[defaults]\npython = "3.11"\narchs = ["9.0"]\n[cells."cu12.4"]\ncuda = "12.4"\ntag = "apex-t1"\n'
    )
    return path


def _no_daemon(*args: str):
    from tests.support import run_build

    # nothing here may need a daemon: the refusal comes first
    return run_build(*args, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock", "CONTAINER_HOST": ""})


def _plant(tmp_path: Path, tree: Path, relpath: str, folder: bool) -> Path:
    """A link at tree/relpath to a folder or a file outside the tree; returns what it points to."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir() if folder else elsewhere.write_text("keep")
    (tree / relpath).parent.mkdir(parents=True, exist_ok=True)
    (tree / relpath).symlink_to(elsewhere)
    return elsewhere


def _untouched(elsewhere: Path) -> bool:
    return list(elsewhere.iterdir()) == [] if elsewhere.is_dir() else elsewhere.read_text() == "keep"


def _one_line_refusal(done, option: str, where: Path, elsewhere: Path) -> None:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if "symbolic link" in x]
    assert line == (
        f"error: {option}: {where}: is a symbolic link (to {elsewhere}); the tool never writes through "
        "a link inside a folder it owns: remove the link, or pass another folder"
    ), line


@pytest.mark.parametrize("command", ["image", "matrix"])
@pytest.mark.parametrize(
    ("relpath", "folder"),
    [(CELL_ID, True), (f"{CELL_ID}/build.log", False), (f"{CELL_ID}/.lock", False)],
)
def test_a_run_refuses_a_link_in_its_logs_folder_before_any_build(
    tmp_path: Path, command: str, relpath: str, folder: bool
) -> None:
    """`build.py image|matrix --logs LOGS`: a cell's folder, its build.log or its lock planted as a link is
    refused before the engine is asked anything: one line naming it and --logs, exit 2, nothing written
    outside and nothing made in --out."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    elsewhere = _plant(tmp_path, logs, relpath, folder)
    matrix = _tiny_matrix(tmp_path)
    done = _no_daemon(
        command, "--matrix", str(matrix), "--cell", "cu12.4", "--logs", str(logs), "--out", str(out)
    )
    _one_line_refusal(done, f"--logs {logs}", logs / relpath, elsewhere)
    assert _untouched(elsewhere) and not out.exists()


@pytest.mark.parametrize(("relpath", "folder"), [(CELL_ID, True), (f"{CELL_ID}/build.log", False)])
def test_a_cell_never_opens_its_lock_or_log_through_a_link_planted_after_the_check(
    tmp_path: Path, relpath: str, folder: bool
) -> None:
    """The run loop itself (a link planted after the command's check, while another cell built): the
    cell's lock and its build.log are opened by the owned-tree rule, before the engine is asked anything."""
    import io

    from tests.support import matrix_cells
    from toolchain.console import Console
    from toolchain.runs import run_loop
    from toolchain.runs.run_request import RunRequest

    (cell,) = matrix_cells("12.4")
    logs = tmp_path / "logs"
    elsewhere = _plant(tmp_path, logs, relpath.replace(CELL_ID, cell.id), folder)
    with pytest.raises(atomic.LinkInOwnedTree, match="symbolic link") as caught:
        run_loop.run_matrix(
            [cell],
            RunRequest(out=tmp_path / "out", logs=logs),
            Console(io.StringIO()),
            matrix_path=tmp_path / "matrix.toml",
        )
    assert caught.value.filename == str(logs / relpath.replace(CELL_ID, cell.id))
    assert _untouched(elsewhere)


@pytest.mark.parametrize(
    ("relpath", "folder"),
    [
        ("verify", True),
        ("verify/apex-t1_1", True),
        ("verify/apex-t1_1/verify.log", False),
        ("verify/apex-t1_1/report.json", False),
    ],
)
def test_build_py_verify_refuses_a_link_in_its_out_folder_before_the_engine(
    tmp_path: Path, relpath: str, folder: bool
) -> None:
    """`build.py verify IMAGE --out OUT` writes OUT/verify/<image>/{verify.log, container-run.json,
    report.json, report.md}: a link on the way there or at one of them is refused before any engine is asked
    (and before a container runs): one line naming it and --out, exit 2, nothing written outside."""
    out = tmp_path / "out"
    elsewhere = _plant(tmp_path, out, relpath, folder)
    done = _no_daemon("verify", "apex-t1:1", "--out", str(out))
    _one_line_refusal(done, f"--out {out}", out / relpath, elsewhere)
    assert _untouched(elsewhere)


@pytest.mark.parametrize("name", ["report.json", "report.md"])
def test_verifys_report_is_kept_in_out_by_the_rule_after_the_container_ran(tmp_path: Path, name: str) -> None:
    """The files container_verify writes once the container stopped (only an engine reaches that): a link
    planted at one while the container ran is refused, naming it, and its target kept; without the link
    the report lands with its audit block."""
    from tests.support import REPO
    from toolchain.image import container_verify
    from toolchain.image.container_engine import RunResult

    out = tmp_path / "out"
    owned = container_verify.OwnedOut.of(out / "cells" / "c1" / "verify", out)
    report = (REPO / "tests" / "fixtures" / "evidence" / "verify-v2-static.json").read_bytes()
    result = RunResult(status=0, log="ran\n", files={"report.json": report, "report.md": b"# report\n"})
    audit: dict[str, object] = {
        "image": "apex-t1:1",
        "image_id": "sha256:" + "c" * 64,
        "digest": None,
        "repo_digests": [],
        "engine": "docker",
        "verify_from": "image",
        "zipapp_sha256": None,
        "audited_at": "2026-12-03T00:00:00Z",
    }
    elsewhere = _plant(tmp_path, owned.out_dir, name, folder=False)
    with pytest.raises(atomic.LinkInOwnedTree, match="symbolic link") as caught:
        container_verify._keep_report(result, owned, audit)
    assert caught.value.filename == str(owned.out_dir / name) and _untouched(elsewhere)
    (owned.out_dir / name).unlink()
    code, path = container_verify._keep_report(result, owned, audit)
    assert code == 0 and path == owned.out_dir / "report.json"
    assert json.loads(path.read_text())["audit"]["image"] == "apex-t1:1"
    assert (owned.out_dir / "report.md").read_text().startswith("> Audited image `apex-t1:1`")


@pytest.mark.parametrize(("relpath", "folder"), [("cells", True), (f"cells/{CELL_ID}/published.json", False)])
def test_publish_refuses_a_link_where_its_record_goes_in_out(
    tmp_path: Path, relpath: str, folder: bool
) -> None:
    """`build.py publish --bake-metadata` records OUT/cells/<cell>/published.json: a link at the record or
    on the way to it is refused, one line naming it and --out, exit 2; the link's target kept."""
    out = tmp_path / "out"
    elsewhere = _plant(tmp_path, out, relpath, folder)
    metadata = tmp_path / "bake-metadata.json"
    metadata.write_text(json.dumps({"cu12_4": {"containerimage.digest": "sha256:" + "a" * 64}}))
    matrix = _tiny_matrix(tmp_path)
    done = _no_daemon(
        "publish", "--matrix", str(matrix), "--cell", "cu12.4", "--registry", "ghcr.io/acme/apex",
        "--bake-metadata", str(metadata), "--out", str(out),
    )  # fmt: skip
    _one_line_refusal(done, f"--out {out}", out / relpath, elsewhere)
    assert _untouched(elsewhere)
