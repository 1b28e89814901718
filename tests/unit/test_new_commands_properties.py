"""Property tests for the commands added since the first property round: `build.py wheel` (its
argument values: the Apex-shaped tree cannot build on this CPU torch, so every example stops at a check),
`build.py report` (a real out/ folder with one file damaged), `build.py index` (a real built wheel's out/
folder with one file damaged, hostile paths) and `build.py ccache import|export` (no daemon answers:
a run that got past its checks is exit 3). In-process, on test_cli_properties' contract: exit 0-3, no
traceback, nothing written outside the given output folder (the example's temp tree is listed before and
after; temporary files go to a folder of the example's own, which must be empty afterwards), the checkout
unchanged, and no false success: exit 0 only where the input was whole. Each generator is shown to reach
more than one outcome (SEEN). `facts check` and `zipapp`: test_facts_check_properties.py and
test_zipapp_properties.py; pull and publish-index need a registry: tests/docker/test_registry_properties.py."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests import wheel_builds as wb
from tests.support import REPO, cell_result, matrix_cells
from tests.unit.test_cli_properties import (
    PROPERTY,
    _assert_contract,
    _call,
    _keeps_checkout,
    _sandbox,
    odd_text,
    version_like,
)
from toolchain import cli as toolchain_cli
from toolchain.runs.run_loop import save_result
from toolchain.runs.run_overview import MatrixReport
from verify.runtime import exit_codes

# facts check's sources beyond PyPI at a closed port: refused at once, never the network
_CLOSED_SOURCES = [
    a for o in ("--registry", "--torch-index", "--apex-upstream") for a in (o, "http://127.0.0.1:9")
]

pytestmark = pytest.mark.property
SEEN: dict[str, set[int]] = {
    "wheel": set(),
    "report": set(),
    "index": set(),
    "ccache": set(),
    "facts": set(),
    "zipapp": set(),
}

# --- hostile paths and file contents, shared by every command here -------------------------------------

PATH_KINDS = [
    "given",
    "missing",
    "empty file",
    "directory",
    "fifo",
    "dev-zero",
    "symlink to dir",
    "dangling symlink",
    "odd bytes",
    "under a file",
    "empty string",
    "tilde user",
    "dot",
]
path_kind = st.sampled_from(PATH_KINDS)
NUMBERS = [
    "0",
    "-1",
    "1",
    "4",
    "1.5",
    "1e308",
    "1e999",
    "inf",
    "-inf",
    "nan",
    "٣",
    "１２",
    "99999999999999999999",
    "0x10",
    " 2",
    "2 ",
    "",
    "9" * 5000,
]
number_value = st.one_of(st.sampled_from(NUMBERS), odd_text)


def hostile_path(root: Path, kind: str, name: str = "p") -> str:  # noqa: C901 - a table of path kinds, one branch each
    """A path of `kind` made for real under root (a folder of its own: what is there before the run)."""
    root.mkdir(parents=True, exist_ok=True)
    target, n = root / name, 1
    while os.path.lexists(target) or os.path.lexists(f"{target}-real") or os.path.lexists(f"{target}-file"):
        target, n = root / f"{name}{n}", n + 1  # the same option given twice: a path of its own each time
    name = target.name
    if kind == "empty file":
        target.write_bytes(b"")
    elif kind == "directory":
        target.mkdir(exist_ok=True)
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "dev-zero":
        return "/dev/zero"
    elif kind == "symlink to dir":
        (root / f"{name}-real").mkdir(exist_ok=True)
        target.symlink_to(f"{name}-real")
    elif kind == "dangling symlink":
        target.symlink_to("gone/nowhere")
    elif kind == "odd bytes":
        return str(root / "caf\udcff\u200b\n") + "/p"  # a non-UTF-8 byte, a zero-width space, a line break
    elif kind == "under a file":
        (root / f"{name}-file").write_text("")
        return str(root / f"{name}-file" / "below")
    elif kind == "empty string":
        return ""
    elif kind == "tilde user":
        return "~i24nosuchuser/x"
    elif kind == "dot":
        return "."
    return str(target)


def _tree(root: Path) -> dict[str, str]:
    """Every entry under root with its kind and size: what a run wrote, replaced or removed shows."""
    found = {}
    for path in [root, *root.rglob("*")]:
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            found[rel] = f"file:{path.stat().st_size}"
        else:
            found[rel] = "dir" if path.is_dir() else "other"
    return found


@contextlib.contextmanager
def _own_tempdir(root: Path) -> Iterator[Path]:
    """The example's temporary files in a folder of its own (tempfile's and subprocesses' TMPDIR)."""
    where = root / "tmp"
    where.mkdir()
    old, old_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = str(where), str(where)
    try:
        yield where
    finally:
        tempfile.tempdir = old
        if old_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_env


def _outside_unchanged(before: dict[str, str], after: dict[str, str], inside: tuple[str, ...]) -> None:
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    outside = {k for k in changed if not any(k == i or k.startswith(i + "/") for i in inside)}
    assert not outside, sorted(outside)[:20]


# --- build.py wheel ----------------------------------------------------------------------------------

WHEEL_VALUES = {
    "--archs": st.one_of(version_like, odd_text),
    "--flags": st.one_of(
        st.sampled_from(["APEX_CPP_EXT=1", "APEX_CPP_EXT", "APEX_CUDA_EXT=1", "X=1", "=", ""]), odd_text
    ),
    "--extras": st.one_of(st.sampled_from(["all", "xentropy", "fast_layer_norm", "", "none"]), odd_text),
    "--jobs": number_value,
    "--nvcc-threads": number_value,
    "--memory-gib": number_value,
    "--wheel-compression": st.sampled_from(["deflated", "stored", "zip", ""]),
    "--cell": st.one_of(version_like, odd_text),
    "--apex-ref": st.one_of(version_like, odd_text),
    "--apex-source": st.one_of(
        st.sampled_from(["git+https://github.com/NVIDIA/apex@6424da3", "--upload-pack=x"]), odd_text
    ),
    "--apex-commit": st.one_of(
        st.sampled_from(["6424da3b4faa6c8f062da4a48c424fff3f02d42d", "6424da3", "g" * 40]), odd_text
    ),
    "--base-image": odd_text,
    "--base-image-digest": st.one_of(st.just("sha256:" + "0" * 64), odd_text),
    "--wheel-hashes": odd_text,
}
WHEEL_FLAGS = [
    "--install",
    "--no-gate",
    "--naive",
    "--keep-build-dir",
    "--ccache",
    "--no-ccache",
    "--no-cuda-from-pypi",
    "--ignore-hardcoded-archs",
]  # never --cuda-from-pypi: it would download CUDA
wheel_option = st.one_of(
    st.sampled_from(sorted(WHEEL_VALUES)).flatmap(lambda o: st.tuples(st.just(o), WHEEL_VALUES[o])),
    st.tuples(st.sampled_from(WHEEL_FLAGS), st.none()),
    st.tuples(st.just("--cuda-prefix"), path_kind),
)


@pytest.fixture(scope="module")
def apex_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wb.apex_shaped_tree(tmp_path_factory.mktemp("i24-wheel") / "src")


def test_every_wheel_argument_is_checked_and_nothing_builds(apex_tree: Path) -> None:
    _keeps_checkout(lambda: _wheel_examples(apex_tree))
    assert SEEN["wheel"] >= {2, 3}, SEEN["wheel"]


OUT_KINDS = [k for k in PATH_KINDS if k != "dot"]  # --out . is the sandbox itself: its own test (zipapp's)


@settings(PROPERTY, max_examples=60)
@given(
    src_kind=st.sampled_from(["tree", "tree", "tree", *PATH_KINDS]),
    out_kind=st.sampled_from(["given", "given", *OUT_KINDS]),
    options=st.lists(wheel_option, max_size=4),
    cpp_only=st.booleans(),
)
@example(
    src_kind="tree", out_kind="fifo", options=[], cpp_only=True
)  # found by this test: errno's text, not --out
@example(src_kind="tree", out_kind="under a file", options=[], cpp_only=True)
def _wheel_examples(
    tree: Path, src_kind: str, out_kind: str, options: list[tuple[str, Any]], cpp_only: bool
) -> None:
    with _sandbox() as root, _own_tempdir(root) as tmp:
        src = str(tree) if src_kind == "tree" else hostile_path(root / "src", src_kind)
        out = hostile_path(root / "given", out_kind if out_kind != "given" else "missing", "out")
        out = (
            os.path.relpath(out) if out.startswith(str(root)) else out
        )  # as typed: relative to the working folder
        argv = ["wheel", "--apex-src", src, "--out", out]
        if cpp_only:  # the one flag this tree can build: the run goes on to its environment checks
            argv += ["--flags", "APEX_CPP_EXT=1"]
        for option, value in options:
            if option == "--cuda-prefix":
                value = hostile_path(root / "cuda", value)
            argv += [option] if value is None else [option, value.replace("\x00", "")]
        before = _tree(root)
        code, stderr = _call(toolchain_cli.main, argv)
        _assert_contract(code, stderr, usage_prefix="")
        assert code != exit_codes.OK, (argv, stderr)  # this torch has no CUDA: no wheel can be built here
        if (
            src_kind == "tree"
            and cpp_only
            and not options
            and out_kind in ("empty file", "fifo", "under a file")
        ):
            assert code == exit_codes.USAGE and f"--out {out}: " in stderr and "directory" in stderr, stderr
        SEEN["wheel"].add(code)
        _outside_unchanged(before, _tree(root), inside=("given", "src", "cuda"))
        assert not list(tmp.iterdir()), list(tmp.iterdir())


# --- build.py report -----------------------------------------------------------------------------------

DAMAGE = [
    "none",
    "cut",
    "empty",
    "not utf-8",
    "fifo",
    "directory",
    "symlink to /dev/zero",
    "dangling symlink",
    "not an object",
    "nested deep",
    "a value replaced",
]
# the file cannot be read as its record at all (a dangling link reads as no file: an overview or a result a run
# has not written yet is no error)
STRUCTURAL = set(DAMAGE) - {"none", "a value replaced", "dangling symlink"}
RAW_VALUES = [
    "1e400",
    "-1e400",
    "NaN",
    "Infinity",
    "9" * 5000,
    '"١٢.٤"',
    '"\\ud800"',
    '"\\u0000"',
    "[]",
    "{}",
    "null",
    "true",
    '"' + "x" * 100_000 + '"',
    "-0",
    "0.0",
    '"inf"',
    '"12.4; rm -rf /"',
]
raw_json = st.one_of(
    st.sampled_from(RAW_VALUES),
    st.integers(-(10**30), 10**30).map(str),
    odd_text.map(lambda s: json.dumps(s.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))),
)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON document (objects' keys, lists' indexes)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:3]):
            found += _paths(inner, (*prefix, index))
    return found


def damage_file(path: Path, damage: str, where: int, raw: str) -> None:  # noqa: C901 - one branch per kind of damage
    """Damage one real file in place, as something else might have left it."""
    text = path.read_text()
    if damage in ("fifo", "directory", "symlink to /dev/zero", "dangling symlink"):
        path.unlink()
    if damage == "cut":
        path.write_text(text[: max(1, where % max(1, len(text)))])
    elif damage == "empty":
        path.write_text("")
    elif damage == "not utf-8":
        path.write_bytes(text[: where % 50].encode() + b"\xff\xfe" + text[where % 50 :].encode())
    elif damage == "fifo":
        os.mkfifo(path)
    elif damage == "directory":
        path.mkdir()
    elif damage == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    elif damage == "dangling symlink":
        path.symlink_to("gone.json")
    elif damage == "not an object":
        path.write_text(["[]", "1", '"x"', "null"][where % 4])
    elif damage == "nested deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif damage == "a value replaced":
        document = json.loads(text)
        places = _paths(document)
        step = places[where % len(places)]
        holder = document
        for key in step[:-1]:
            holder = holder[key]
        holder[step[-1]] = "@@RAW@@"
        path.write_text(json.dumps(document).replace('"@@RAW@@"', raw, 1))


@pytest.fixture(scope="module")
def run_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A matrix run's out/ as the real writers leave it: the overview and two cells' result.json."""
    out = tmp_path_factory.mktemp("i24-report") / "out"
    built, failed = matrix_cells("12.4", "13.0")
    overview = MatrixReport(out, REPO / "matrix.toml", "run1")
    overview.start([built, failed])
    overview.update(
        save_result(cell_result(built, "built", {"ok": True, "tag": built.id, "duration_s": 120.0}), out)
    )
    overview.update(
        save_result(
            cell_result(
                failed,
                "build_failed",
                {"ok": False, "tag": failed.id, "duration_s": 9.5, "stage_failed": "torch"},
            ),
            out,
        )
    )
    overview.finish("complete")
    return out


REPORT_FILES = ["matrix-report.json", "result 0", "result 1"]


def test_every_damaged_run_folder_is_reported_or_refused(run_out: Path) -> None:
    _keeps_checkout(lambda: _report_examples(run_out))
    assert SEEN["report"] >= {0, 2}, SEEN["report"]


@settings(PROPERTY, max_examples=60)
@given(
    which=st.sampled_from(REPORT_FILES),
    damage=st.sampled_from(DAMAGE),
    where=st.integers(0, 10**6),
    raw=raw_json,
)
def _report_examples(run_out: Path, which: str, damage: str, where: int, raw: str) -> None:
    with _sandbox() as root, _own_tempdir(root) as tmp:
        out = root / "given" / "out"
        shutil.copytree(run_out, out, symlinks=True)
        results = sorted(out.glob("cells/*/result.json"))
        target = out / "matrix-report.json" if which == "matrix-report.json" else results[int(which[-1])]
        damage_file(target, damage, where, raw)
        before = _tree(root)
        code, stderr = _call(toolchain_cli.main, ["report", "--out", str(out)])
        _assert_contract(code, stderr, usage_prefix="error: ")
        assert code in (0, 2), (which, damage, code, stderr[:2000])
        if damage in STRUCTURAL:
            assert code == exit_codes.USAGE and str(target) in stderr, (
                damage,
                stderr[:2000],
            )  # named, never passed
        if damage == "none":
            assert code == exit_codes.OK, stderr
        if code == exit_codes.OK or damage in STRUCTURAL:
            assert (out / "matrix-report.md").is_file()  # the readable cells are still rendered
        SEEN["report"].add(code)
        _outside_unchanged(before, _tree(root), inside=("given/out",))
        assert not list(tmp.iterdir())


# --- build.py index ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real build.py wheel out/ folder (the builder on the Apex-shaped tree): wheel, manifest, gate report."""
    root = tmp_path_factory.mktemp("i24-index")
    done = wb.build_stamped(root / "good", wb.torch_venv(root / "venv"))
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "good" / "out"


INDEX_FILES = ["wheel", "build-manifest.json", "verify-static.json"]
WHEEL_DAMAGE = [
    "none",
    "cut",
    "empty",
    "random bytes",
    "fifo",
    "directory",
    "symlink to /dev/zero",
    "dangling symlink",
    "a member replaced",
]


def damage_wheel(path: Path, damage: str, where: int, data: bytes) -> None:
    import zipfile

    blob = path.read_bytes()
    if damage in ("fifo", "directory", "symlink to /dev/zero", "dangling symlink", "a member replaced"):
        path.unlink()
    if damage == "cut":
        path.write_bytes(blob[: where % len(blob)])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "random bytes":
        path.write_bytes(data)
    elif damage in ("fifo", "directory", "symlink to /dev/zero", "dangling symlink"):
        damage_file_kind(path, damage)
    elif damage == "a member replaced":  # a zip as a wheel tool would write it, one member's text replaced
        with zipfile.ZipFile(_bytes_io(blob)) as old, zipfile.ZipFile(path, "w") as new:
            names = old.namelist()
            chosen = names[where % len(names)]
            for name in names:
                new.writestr(name, data if name == chosen else old.read(name))


def damage_file_kind(path: Path, damage: str) -> None:
    if damage == "fifo":
        os.mkfifo(path)
    elif damage == "directory":
        path.mkdir()
    elif damage == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to("gone.whl")


def _bytes_io(blob: bytes):  # noqa: ANN202
    import io

    return io.BytesIO(blob)


@pytest.mark.slow
def test_every_damaged_wheel_folder_is_published_or_refused(built: Path) -> None:
    _keeps_checkout(lambda: _index_examples(built))
    assert SEEN["index"] >= {0, 1, 2}, SEEN["index"]


@settings(PROPERTY, max_examples=40)
@given(
    which=st.sampled_from(INDEX_FILES),
    wheel_damage=st.sampled_from(WHEEL_DAMAGE),
    file_damage=st.sampled_from(DAMAGE),
    where=st.integers(0, 10**6),
    data=st.binary(max_size=200),
    raw=raw_json,
    index_kind=st.sampled_from(["given", "given", "given", *OUT_KINDS]),
    source_kind=st.sampled_from(["folder", "folder", "wheel file", *PATH_KINDS]),
)
def _index_examples(
    built: Path,
    which: str,
    wheel_damage: str,
    file_damage: str,
    where: int,
    data: bytes,
    raw: str,
    index_kind: str,
    source_kind: str,
) -> None:
    with _sandbox() as root, _own_tempdir(root) as tmp:
        out = root / "src" / "out"
        shutil.copytree(built, out, symlinks=True)
        (wheel,) = out.glob("*.whl")
        # the gate report beside the wheel is never read: the index publishes the wheel's own .dist-info copy
        whole = (
            which == "wheel"
            and wheel_damage == "none"
            or which == "build-manifest.json"
            and file_damage == "none"
            or which == "verify-static.json"
        )
        if which == "wheel":
            damage_wheel(wheel, wheel_damage, where, data)
        else:
            damage_file(out / which, file_damage, where, raw)
        source = {"folder": str(out), "wheel file": str(wheel)}.get(source_kind) or hostile_path(
            root / "src" / "x", source_kind
        )
        index = hostile_path(root / "given", "missing" if index_kind == "given" else index_kind, "index")
        before = _tree(root)
        code, stderr = _call(toolchain_cli.main, ["index", source, "--index", index])
        _assert_contract(code, stderr, usage_prefix="")
        if code == exit_codes.OK:  # no false success: only a whole wheel, from a real source (. holds it too)
            assert whole and source_kind in ("folder", "wheel file", "dot"), (
                which,
                wheel_damage,
                file_damage,
                stderr,
            )
        SEEN["index"].add(code)
        _outside_unchanged(before, _tree(root), inside=("given",))
        assert not list(tmp.iterdir())


# --- build.py ccache import|export ---------------------------------------------------------------------

CCACHE_VALUES = {
    "--cell": st.one_of(st.sampled_from(["cu124", "cu130", "cu12.4", "nope"]), odd_text),
    "--cuda": st.one_of(version_like, odd_text),
    "--torch": st.one_of(version_like, odd_text),
    "--archs": st.one_of(version_like, odd_text),
    "--ccache-mount": st.sampled_from(["shared", "carried", "both", ""]),
    "--progress": st.sampled_from(["auto", "plain", "tty", "fancy"]),
}
ccache_option = st.one_of(
    st.sampled_from(sorted(CCACHE_VALUES)).flatmap(lambda o: st.tuples(st.just(o), CCACHE_VALUES[o])),
    st.tuples(st.just("--extra-ca"), path_kind),
)


def test_every_ccache_argument_is_checked_before_the_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/i24-rest-no-daemon.sock")
    _keeps_checkout(_ccache_examples)
    assert SEEN["ccache"] == {2, 3}, SEEN["ccache"]


@settings(PROPERTY, max_examples=40)
@given(
    st.sampled_from(["import", "export", "import", "export", "imports", ""]),
    st.sampled_from(["missing", "directory", *PATH_KINDS]),
    st.lists(ccache_option, max_size=2),
    st.booleans(),
)
def _ccache_examples(direction: str, dir_kind: str, options: list[tuple[str, Any]], a_cell: bool) -> None:
    with _sandbox() as root, _own_tempdir(root) as tmp:
        argv = ["ccache", direction, "--dir", hostile_path(root / "given", dir_kind, "cache")]
        argv += ["--cell", "cu130"] if a_cell else []  # a cell of the matrix: the run goes on to the daemon
        for option, value in options:
            if option == "--extra-ca":
                value = hostile_path(root / "ca", value, "ca.pem")
            argv += [option, value.replace("\x00", "")]
        before = _tree(root)
        code, stderr = _call(toolchain_cli.main, argv)
        _assert_contract(code, stderr, usage_prefix="error: ")
        assert code in (2, 3), (argv, code, stderr)  # no daemon answers: nothing can be imported or exported
        SEEN["ccache"].add(code)
        _outside_unchanged(before, _tree(root), inside=())  # not even --dir is made before the daemon answers
        assert not list(tmp.iterdir())


# --- build.py facts check --facts, build.py zipapp --out: hostile paths (their values: their own files) ---------


def test_every_facts_path_is_read_or_refused() -> None:
    _keeps_checkout(_facts_path_examples)
    assert SEEN["facts"] >= {2} and SEEN["facts"] & {0, 1}, SEEN["facts"]


@settings(PROPERTY, max_examples=25)
@given(st.sampled_from(["copy", "copy", "symlink to the copy", *PATH_KINDS]))
def _facts_path_examples(kind: str) -> None:
    from tests.support import FROZEN_FACTS

    stored = REPO / "tests" / "fixtures" / "pypi-2026-12-01"  # a stored index answer: never the network
    with _sandbox() as root, _own_tempdir(root) as tmp:
        (root / "given").mkdir()
        if kind in ("copy", "symlink to the copy"):
            shutil.copyfile(FROZEN_FACTS, root / "given" / "compat.toml")
            if kind == "symlink to the copy":
                (root / "given" / "link.toml").symlink_to("compat.toml")
            facts = str(root / "given" / ("compat.toml" if kind == "copy" else "link.toml"))
        else:
            facts = hostile_path(root / "given", kind, "compat.toml")
        before = _tree(root)
        code, stderr = _call(
            toolchain_cli.main,
            ["facts", "check", *_CLOSED_SOURCES, "--index", stored.as_uri(), "--facts", facts],
        )
        _assert_contract(code, stderr, usage_prefix="error: ")
        if kind in ("copy", "symlink to the copy"):
            assert code in (0, 1), (
                kind,
                code,
                stderr,
            )  # the frozen facts against a stored answer: read, compared
        else:
            assert code == exit_codes.USAGE, (kind, code, stderr)  # refused before anything is compared
        SEEN["facts"].add(code)
        assert _tree(root) == before and not list(tmp.iterdir())


def test_every_zipapp_path_is_written_or_refused() -> None:
    _keeps_checkout(_zipapp_path_examples)
    assert SEEN["zipapp"] == {0, 2}, SEEN["zipapp"]


@settings(PROPERTY, max_examples=20)
@given(st.sampled_from(["missing", "directory", "symlink to dir", *[k for k in PATH_KINDS if k != "fifo"]]))
def _zipapp_path_examples(kind: str) -> None:  # a FIFO --out waits 5 s for its reader: test_safe_write's case
    import zipfile

    with _sandbox() as root, _own_tempdir(root) as tmp:
        out = hostile_path(root / "given", kind, "verify.pyz")
        before = _tree(root)
        code, stderr = _call(toolchain_cli.main, ["zipapp", "--out", out])
        _assert_contract(code, stderr, usage_prefix="error: ")
        SEEN["zipapp"].add(code)
        if code == exit_codes.OK:  # a runnable zip where the path (or the folder it names) points
            written = Path(out) / "verify.pyz" if Path(out).is_dir() else Path(os.path.realpath(out))
            assert zipfile.is_zipfile(written), written
        else:
            assert kind in (
                "empty string",
                "tilde user",
                "dev-zero",
                "under a file",
                "odd bytes",
                "dangling symlink",
            ), (kind, code, stderr)
        inside = ("given",) if kind != "dot" else ("", "verify.pyz")
        _outside_unchanged(before, _tree(root), inside=inside)
        assert not list(tmp.iterdir())
