"""The manylinux tag `build.py index` gives a wheel (toolchain/index/portability.py): the ELF reader against
binutils on torch's own library and on a module this machine's gcc compiles into a real stamped wheel; the
retagged wheel served and installed by real pip; a wheel that claims an older glibc than it needs refused."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from tests import wheel_builds as wb
from tests.unit.test_wheel_index import MINOR, STACK, VERSION
from toolchain.builder import wheel_identity
from toolchain.index import portability, wheel_check
from verify.runtime import exit_codes

ARCH = platform.machine()
# memcpy: a versioned call on every glibc (GLIBC_2.14 on x86_64, the 2.17 baseline on aarch64);
# reallocarray: glibc 2.26, so the wheel needs a newer glibc than manylinux2014's 2.17
VERSIONED_MODULE = """#include <Python.h>
#include <stdlib.h>
#include <string.h>
static volatile size_t n = 8;  /* not a constant: gcc must call memcpy, not inline it */
static PyObject *copy(PyObject *self, PyObject *args) {
    char src[16] = "portable", dst[16] = {0};
    memcpy(dst, src, n);
    void *grown = reallocarray(NULL, n, 2);
    free(grown);
    return PyUnicode_FromString(dst);
}
static PyMethodDef methods[] = {{"copy", copy, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "apex_C", NULL, -1, methods};
PyMODINIT_FUNC PyInit_apex_C(void) { return PyModule_Create(&m); }
"""
MEMCPY = "GLIBC_2.14" if ARCH == "x86_64" else "GLIBC_2.17"
TAG = f"manylinux_2_26_{ARCH}"


def _objdump_versions(path: Path) -> dict[str, set[str]]:
    """version -> the undefined symbols `objdump -T` binds to it (GLIBC/GLIBCXX/CXXABI/GCC families)."""
    listed = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True, check=True).stdout
    found: dict[str, set[str]] = {}
    for line in listed.splitlines():
        match = re.search(r"\*UND\*\s+\S+\s+(?:\((\S+)\)|(\S+))\s+(\S+)$", line)
        if match and re.match(r"^(GLIBC|GLIBCXX|CXXABI|GCC)_", match[1] or match[2] or ""):
            found.setdefault(match[1] or match[2], set()).add(match[3])
    return found


def _reader_versions(path: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for versions in portability.read_versions(path).needs.values():
        for version, symbols in versions.items():
            if symbols:
                found.setdefault(version, set()).update(symbols)
    return found


def test_the_reader_reads_what_objdump_reads_on_torchs_library_and_torchs_own_tag_holds() -> None:
    """torch's wheel says manylinux_2_28 (its WHEEL file): its library must need no newer glibc or C++."""
    if shutil.which("objdump") is None:
        pytest.skip("binutils' objdump is not installed")
    lib = Path(torch.__file__).parent / "lib" / "libtorch_python.so"
    assert _reader_versions(lib) == _objdump_versions(lib)
    tag = next(
        line.split(": ", 1)[1]
        for line in (importlib.metadata.distribution("torch").read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag:")
    )
    claimed = portability.claimed(tag.rsplit("-", 1)[-1])[0]
    assert claimed is not None, f"this machine's torch is not a manylinux wheel ({tag}): no anchor"
    asked: dict[str, set[tuple[int, ...]]] = {}
    for version in _reader_versions(lib):
        family, _, number = version.partition("_")
        asked.setdefault(family, set()).add(tuple(int(x) for x in number.split(".")))
    glibc, problems = portability.decide(ARCH, asked, set())
    assert not problems and glibc is not None and glibc <= claimed[0], (glibc, claimed, problems)


@pytest.mark.parametrize(
    ("arch", "asked", "other", "glibc", "problem"),
    [
        ("x86_64", {"GLIBC": {(2, 2, 5), (2, 14)}}, set(), (2, 14), None),
        ("x86_64", {}, set(), (2, 5), None),  # asks nothing of glibc: the oldest policy
        ("aarch64", {"GLIBC": {(2, 17)}}, set(), (2, 17), None),
        # glibc 2.17 but libstdc++ of GCC 9: raised to the first policy that allows GLIBCXX_3.4.26
        ("x86_64", {"GLIBC": {(2, 17)}, "GLIBCXX": {(3, 4, 26)}}, set(), (2, 31), None),
        (
            "x86_64",
            {"GLIBC": {(2, 28)}, "GLIBCXX": {(3, 4, 24)}, "CXXABI": {(1, 3, 11)}},
            set(),
            (2, 28),
            None,
        ),
        ("x86_64", {"GLIBC": {(2, 17)}}, {"CXXABI_TM_1"}, (2, 17), None),
        ("x86_64", {"GLIBC": {(2, 17)}}, {"GLIBC_PRIVATE"}, None, "GLIBC_PRIVATE"),
        (
            "x86_64",
            {"GLIBC": {(2, 28)}, "GLIBCXX": {(3, 4, 40)}},
            set(),
            None,
            "GLIBCXX_3.4.40, beyond every",
        ),
        ("riscv", {}, set(), None, "no manylinux policy for riscv"),
    ],
)
def test_the_tag_is_the_glibc_asked_raised_to_a_policy_whose_cxx_limits_fit(
    arch, asked, other, glibc, problem
) -> None:
    found, problems = portability.decide(arch, asked, other)
    if problem is None:
        assert (found, problems) == (glibc, [])
    else:
        assert any(problem in p for p in problems), problems
        assert glibc is None or found == glibc


def test_claimed_reads_modern_legacy_and_plain_linux_tags() -> None:
    assert portability.claimed("manylinux_2_17_x86_64.manylinux2014_x86_64") == [
        ((2, 17), "x86_64"),
        ((2, 17), "x86_64"),
    ]
    assert portability.claimed("linux_x86_64") == [None]
    assert portability.claimed("manylinux1_x86_64") == [((2, 5), "x86_64")]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """out/ of the builder's run on a module gcc compiles with versioned glibc calls (stamped, gated)."""
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler (gcc or cc) on PATH: the test compiles a real extension module")
    root = tmp_path_factory.mktemp("wheel-portability")
    done = wb.build_stamped(root / "versioned", wb.torch_venv(root / "venv"), module=VERSIONED_MODULE)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "versioned" / "out"


def _module(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.endswith(".so")]
        target = into / Path(member).name
        target.write_bytes(archive.read(member))
    return target


@pytest.mark.slow
def test_the_compiled_module_asks_what_objdump_lists_and_the_wheel_needs_glibc_2_26(built, tmp_path) -> None:
    wheel = wb.the_wheel(built)
    assert wheel.name.endswith(f"-linux_{ARCH}.whl")  # what setup.py writes: the index decides the tag
    module = _module(wheel, tmp_path)
    found = _reader_versions(module)
    assert "memcpy" in found[MEMCPY] and found["GLIBC_2.26"] == {"reallocarray"}
    if shutil.which("objdump"):
        assert found == _objdump_versions(module)
    seen = portability.wheel_portability(wheel, wheel_check.excluded_libraries())
    assert (seen.tag, seen.glibc_text, seen.highest["GLIBC"]) == (TAG, "2.26", "2.26")
    assert seen.symbols["GLIBC_2.26"] == ["reallocarray"] and "reallocarray" in seen.found()


def _index(*sources: Path, index: Path) -> subprocess.CompletedProcess:
    return wb.run_index(*sources, "--index", index, work=index.parent)


@pytest.mark.slow
def test_index_publishes_it_retagged_with_wheel_and_record_rewritten_and_a_second_run_changes_nothing(
    built, tmp_path
) -> None:
    index = tmp_path / "index"
    done = _index(built, index=index)
    assert done.returncode == 0, done.stdout + done.stderr
    as_built = wb.the_wheel(built)
    name = as_built.name.replace(f"-linux_{ARCH}.whl", f"-{TAG}.whl")
    assert f"added     {STACK}/{name}" in done.stdout
    assert (
        f"retagged  {wb.the_wheel(built).name} -> {TAG}: its modules need glibc 2.26 (GLIBC_2.26 (reallocarray)"
        in done.stdout
    )
    (published,) = (index / STACK / "files").glob("*/*.whl")
    assert published.name == name
    with zipfile.ZipFile(published) as archive:
        info = wheel_identity.dist_info_dir(archive)
        tags = [
            line for line in archive.read(f"{info}/WHEEL").decode().splitlines() if line.startswith("Tag:")
        ]
        assert tags and all(t.endswith(f"-{TAG}") for t in tags), tags
        inside = json.loads(archive.read(f"{info}/build-manifest.json"))
        assert inside["build"]["wheel"] == name and inside["build"]["wheel_as_built"] != name
        record = {
            row.split(",")[0]: row.split(",")[1:]
            for row in archive.read(f"{info}/RECORD").decode().splitlines()
        }
        assert set(record) == set(archive.namelist())
        import base64
        import hashlib

        for member, (digest, size) in record.items():
            if digest:
                data = archive.read(member)
                expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert (digest, int(size)) == (f"sha256={expected}", len(data)), member
    check = json.loads(published.with_name("wheel-check.json").read_text())
    assert (check["manylinux"], check["glibc"], check["sha256"]) == (TAG, "2.26", wb.sha256(published))
    assert check["retagged_from"] == {"wheel": as_built.name, "sha256": wb.sha256(as_built)}
    beside = json.loads(published.with_name("build-manifest.json").read_text())
    assert (beside["build"]["wheel"], beside["build"]["wheel_sha256"]) == (name, wb.sha256(published))
    (row,) = json.loads((index / "stacks.json").read_text())["stacks"]
    assert row["glibc"] == "2.26" and row["wheels"] == [name]
    assert "<td>2.26</td>" in (index / "index.html").read_text()

    before = {p: p.read_bytes() for p in index.rglob("*") if p.is_file()}
    again = _index(built, index=index)
    assert again.returncode == 0 and f"unchanged {STACK}/{name}" in again.stdout, again.stdout + again.stderr
    assert {p: p.read_bytes() for p in index.rglob("*") if p.is_file()} == before
    # the published wheel itself passes the check again, as it is: no second retag
    assert _index(published, index=tmp_path / "again").returncode == 0
    assert [p.name for p in (tmp_path / "again" / STACK / "files").glob("*/*.whl")] == [name]


@pytest.mark.slow
def test_a_wheel_that_claims_manylinux2014_but_needs_glibc_2_26_is_refused_and_an_honest_claim_is_kept(
    built, tmp_path
) -> None:
    as_built = wb.the_wheel(built)
    wheels = {}
    for claim in (f"manylinux_2_17_{ARCH}.manylinux2014_{ARCH}", f"manylinux_2_28_{ARCH}"):
        folder = tmp_path / claim.split(".")[0]
        folder.mkdir()
        wheels[claim] = portability.retag(as_built, folder, claim, VERSION, f"torch=={MINOR}.*")
    false, honest = wheels.values()
    index = tmp_path / "index"
    done = _index(false.parent, honest.parent, index=index)
    assert done.returncode == exit_codes.FAILED, done.stdout + done.stderr
    (refused,) = [line for line in done.stderr.splitlines() if line.startswith("build.py index: refused")]
    assert str(false) in refused and "manylinux_2_17" in refused
    assert "GLIBC_2.26 (reallocarray)" in refused and "needs glibc 2.26" in refused
    assert "manylinux_2_28 builder image" in refused and f"publishes it as {TAG}" in refused
    assert "Traceback" not in done.stderr
    assert [p.name for p in (index / STACK / "files").glob("*/*.whl")] == [honest.name]  # kept as tagged
    (row,) = json.loads((index / "stacks.json").read_text())["stacks"]
    assert row["glibc"] == "2.26"  # what its modules need, not the 2.28 its tag names


@pytest.fixture(scope="module")
def served(built, tmp_path_factory):
    with wb.served_index(built, tmp_path_factory.mktemp("wheel-portability-served") / "index") as server:
        yield server


@pytest.mark.slow
def test_pip_installs_the_retagged_wheel_from_the_served_index_and_refuses_it_for_an_older_glibc(
    served, tmp_path
) -> None:
    python, env = wb.torch_venv(tmp_path / "venv"), wb.isolated_pip_env()
    url = f"{served.url}{STACK}/simple"
    done = wb.pip_install_apex(python, url, env)
    assert done.returncode == 0 and f"Successfully installed apex-{VERSION}" in done.stdout, (
        done.stdout + done.stderr
    )
    ran = subprocess.run(
        [str(python), "-c", "import apex_C; print(apex_C.copy())"], capture_output=True, text=True
    )
    assert ran.returncode == 0 and ran.stdout.strip() == "portable", ran.stderr
    # pip on a glibc 2.25 machine (manylinux_2_5 ... manylinux_2_25) finds no wheel it may install; 2.26 does
    for newest, found in ((25, False), (26, True)):
        platforms = [arg for x in range(5, newest + 1) for arg in ("--platform", f"manylinux_2_{x}_{ARCH}")]
        got = wb.run_tool(
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *platforms,
            "-d", tmp_path / str(newest), "apex", "--index-url", url, env=env,
        )  # fmt: skip
        assert (got.returncode == 0) is found, got.stdout + got.stderr
        if not found:
            assert "No matching distribution found for apex" in got.stderr
