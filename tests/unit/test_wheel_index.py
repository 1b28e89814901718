"""Wheel identity and `build.py index`, on real wheels the project's builder makes from an Apex-shaped tree
(tests/wheel_builds.py), served on 127.0.0.1 by a real HTTP server and installed by real pip and uv."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import wheel_builds as wb
from tests.support import REPO, run_build
from toolchain.builder import wheel_identity
from verify.runtime import exit_codes

# slow: subprocess runs and waited-out hangs; TIER=slow (CI), not make test
pytestmark = pytest.mark.slow

MINOR = ".".join(torch.__version__.split(".")[:2])
CUDA = wheel_identity.cuda_tag(torch.version.cuda)
STACK = f"torch{MINOR}-{CUDA}"
VERSION = f"0.1+g6424da3.{CUDA}.torch{MINOR}"
PACKAGING = importlib.metadata.version("packaging")  # the suite's own, repacked (wheel_builds.repacked_wheel)


@pytest.mark.parametrize(
    ("commit", "ref", "torch_version", "cuda", "version", "stack"),
    [
        (
            "6424da3b4faa6c8f062da4a48c424fff3f02d42d",
            None,
            "2.11.0+cu130",
            "13.0",
            "0.1+g6424da3.cu130.torch2.11",
            "torch2.11-cu130",
        ),
        (
            None,
            "6424da3b4faa6c8f062da4a48c424fff3f02d42d",
            "2.11.0",
            "13.0",
            "0.1+g6424da3.cu130.torch2.11",
            "torch2.11-cu130",
        ),
        (None, "25.04", "2.7.1+cu126", "12.6", "0.1+25.04.cu126.torch2.7", "torch2.7-cu126"),
        (None, None, "2.13.0+cpu", None, "0.1+cpu.torch2.13", "torch2.13-cpu"),
    ],
)
def test_identity_names_commit_cuda_and_torch_minor(commit, ref, torch_version, cuda, version, stack) -> None:
    ident = wheel_identity.identity("0.1", commit, ref, torch_version, cuda)
    assert (ident.version, ident.stack, ident.torch_requirement) == (
        version,
        stack,
        f"torch=={torch_version.rsplit('.', 1)[0]}.*",
    )


def test_metadata_gets_one_torch_pin_in_place_of_setup_pys() -> None:
    before = "Metadata-Version: 2.1\nName: apex\nVersion: 0.1\nRequires-Dist: torch>=2.6.0\nRequires-Dist: packaging>20.6\n\nbody\n"
    after = wheel_identity.metadata_with(before, "0.1+g6424da3.cu130.torch2.11", "torch==2.11.*")
    assert after == (
        "Metadata-Version: 2.1\nName: apex\nVersion: 0.1+g6424da3.cu130.torch2.11\n"
        "Requires-Dist: torch==2.11.*\nRequires-Dist: packaging>20.6\n\nbody\n"
    )


def test_the_installed_wheels_manifest_allows_another_patch_but_not_another_minor_or_cuda() -> None:
    from verify.layers import manifest as m

    record = m.BuildManifest(versions=m.Versions(torch="2.11.0+cu130"))
    assert m.torch_mismatch(record, "2.11.1+cu130", m.INSTALLED_ORIGIN) is None
    assert "built for torch 2.11.0+cu130" in (
        m.torch_mismatch(record, "2.12.0+cu130", m.INSTALLED_ORIGIN) or ""
    )
    assert "this torch's stack" in (m.torch_mismatch(record, "2.11.0+cu128", m.INSTALLED_ORIGIN) or "")
    assert "another image" in (
        m.torch_mismatch(record, "2.11.1+cu130", "--manifest") or ""
    )  # a named one: exact


def test_the_build_venv_sees_the_suites_own_packages_not_the_base_interpreters(tmp_path: Path) -> None:
    # make test runs in its own venv: torch and a setuptools with bdist_wheel are there, and a fresh machine's
    # base interpreter has neither (run 13 of reports/cpu-2026-12-02-fresh-clone)
    python = wb.torch_venv(tmp_path / "venv")
    ask = "import json, setuptools, torch; print(json.dumps([setuptools.__file__, torch.__file__, setuptools.__version__]))"
    done = subprocess.run([str(python), "-c", ask], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    setuptools_file, torch_file, version = json.loads(done.stdout)
    import setuptools  # type: ignore[import-untyped]  # setuptools ships no py.typed; only __file__ is read

    assert (setuptools_file, torch_file) == (setuptools.__file__, torch.__file__)
    assert tuple(int(x) for x in version.split(".")[:2]) >= (70, 1), version  # bdist_wheel of its own


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """out/ folders of the builder's runs: a good one, a newer build of it, a gate that fails, one linking zlib."""
    root = tmp_path_factory.mktemp("wheel-index-builds")
    python = wb.torch_venv(root / "venv")
    runs: dict[str, dict[str, Any]] = {
        "good": {},
        "newer": {"started": "2026-12-02T08:00:00+00:00"},
        "broken": {"module": wb.BROKEN_MODULE},
        "zlib": {"module": wb.ZLIB_MODULE, "libraries": ("z",)},
    }
    outs = {}
    for name, options in runs.items():
        done = wb.build_stamped(root / name, python, **options)
        assert (done.returncode == exit_codes.FAILED) if name == "broken" else (done.returncode == 0), (
            done.stderr[-3000:]
        )
        outs[name] = root / name / "out"
    return outs


def test_the_wheel_names_its_stack_pins_torch_and_carries_manifest_and_gate_report(
    builds: dict[str, Path],
) -> None:
    wheel = wb.the_wheel(builds["good"])
    assert wheel.name == f"{wheel_identity.parse_name(wheel.name)[0]}-{VERSION}-{wheel.name.split('-', 2)[2]}"
    files = wheel_identity.read_dist_info(wheel)
    metadata = files["METADATA"].decode()
    assert f"Version: {VERSION}" in metadata and f"Requires-Dist: torch=={MINOR}.*" in metadata
    assert "Requires-Dist: packaging>20.6" in metadata  # setup.py's own requirements stay
    inside = json.loads(files["build-manifest.json"])
    beside = json.loads((builds["good"] / "build-manifest.json").read_text())
    assert inside["wheel_identity"] == {
        "version": VERSION,
        "local": VERSION.split("+")[1],
        "torch_requirement": f"torch=={MINOR}.*",
        "stack": STACK,
    }
    assert inside["build"]["wheel"] == beside["build"]["wheel"] == wheel.name
    assert inside["build"]["wheel_sha256"] is None  # the copy inside cannot hold its own wheel's hash
    for written in (inside, beside):  # the builder's record reads back into the same JSON
        from verify.layers import manifest as m

        assert m.BuildManifest.from_json(written).to_json() == written
    assert beside["build"]["wheel_sha256"] == wb.sha256(wheel)
    assert json.loads(files["verify-static.json"])["verdict"] == "PASS"
    with zipfile.ZipFile(wheel) as archive:  # every entry in RECORD with its hash: pip checks them on install
        info = wheel_identity.dist_info_dir(archive)
        record = archive.read(f"{info}/RECORD").decode().splitlines()
        assert {line.split(",")[0] for line in record} == set(archive.namelist())


def test_index_writes_pep503_691_658_per_stack_and_a_second_run_changes_nothing(
    builds, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    done = wb.run_index(str(builds["good"]), "--index", index, work=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"added     {STACK}/" in done.stdout
    project = index / STACK / "simple" / "apex"
    page, data = (project / "index.html").read_text(), json.loads((project / "index.json").read_text())
    built = wb.the_wheel(builds["good"])
    (wheel,) = (index / STACK / "files").glob("*/*.whl")
    # setup.py's linux_x86_64, retagged: the module asks glibc for no versioned symbol, so the oldest policy
    # (tests/unit/test_wheel_portability.py builds one that needs glibc 2.26)
    arch = platform.machine()
    oldest = "2_5" if arch == "x86_64" else "2_17"
    assert wheel.name == built.name.replace(f"-linux_{arch}.whl", f"-manylinux_{oldest}_{arch}.whl")
    sha = wb.sha256(wheel)
    (entry,) = data["files"]
    assert data["meta"]["api-version"] == "1.1" and data["versions"] == [VERSION]
    assert entry["hashes"] == {"sha256": sha} and f"#sha256={sha}" in page and "%2B" in entry["url"]
    folder = project / entry["url"].replace("%2B", "+")
    assert folder.resolve() == wheel.resolve()
    metadata = folder.resolve().with_name(wheel.name + ".metadata").read_bytes()
    assert (
        entry["core-metadata"] == {"sha256": wb_sha_bytes(metadata)}
        and f'data-core-metadata="sha256={wb_sha_bytes(metadata)}"' in page
    )
    beside = folder.resolve().parent
    assert {p.name for p in beside.iterdir()} == {
        wheel.name,
        wheel.name + ".metadata",
        "build-manifest.json",
        "verify-static.json",
        "verify-static.md",
        "wheel-check.json",
    }
    check = json.loads((beside / "wheel-check.json").read_text())
    assert check["retagged_from"] == {"wheel": built.name, "sha256": wb.sha256(built)}
    assert check["gate"] == "PASS" and check["needed_libraries"] == {
        n: [] for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so")
    }  # setuptools' C module: no DT_NEEDED
    stacks = json.loads((index / "stacks.json").read_text())["stacks"]
    assert [(s["stack"], s["verify"], s["apex_commits"], s["built"], s["glibc"]) for s in stacks] == [
        (STACK, ["PASS"], [wb.COMMIT], "2026-12-01", oldest.replace("_", "."))
    ]
    assert STACK in (index / "index.html").read_text()

    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in index.rglob("*") if p.is_file()}
    again = wb.run_index(str(builds["good"]), "--index", index, work=tmp_path)
    assert again.returncode == 0 and "unchanged" in again.stdout
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in index.rglob("*") if p.is_file()} == before


def test_needed_libraries_reads_what_readelf_reads() -> None:
    """The index's ELF scan (verify.layers.fatbin.needed_libraries) against binutils on torch's own library."""
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("binutils' readelf is not installed")
    from verify.layers import fatbin

    lib = Path(torch.__file__).parent / "lib" / "libtorch_python.so"
    listed = subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    expected = [line.split("[", 1)[1].rstrip("]") for line in listed.splitlines() if "(NEEDED)" in line]
    assert fatbin.needed_libraries(lib) == expected and "libtorch.so" in expected


def wb_sha_bytes(data: bytes) -> str:

    return hashlib.sha256(data).hexdigest()


def test_a_newer_build_of_the_same_stack_and_commit_replaces_the_older_and_an_older_one_does_not(
    builds, tmp_path
) -> None:
    index = tmp_path / "index"
    assert wb.run_index(str(builds["good"]), "--index", index, work=tmp_path).returncode == 0
    newer = wb.run_index(str(builds["newer"]), "--index", index, work=tmp_path)
    assert newer.returncode == 0 and "replaced" in newer.stdout, newer.stdout + newer.stderr
    folders = list((index / STACK / "files").iterdir())
    retagged_from = json.loads((folders[0] / "wheel-check.json").read_text())["retagged_from"]
    assert len(folders) == 1 and retagged_from["sha256"] == wb.sha256(
        wb.the_wheel(builds["newer"])
    )  # the old one is gone
    older = wb.run_index(str(builds["good"]), "--index", index, work=tmp_path)
    assert older.returncode == 0 and "kept" in older.stdout
    assert [f.name for f in (index / STACK / "files").iterdir()] == [folders[0].name]


def test_index_refuses_each_unverified_wheel_by_name_and_still_publishes_the_good_one(
    builds, tmp_path
) -> None:
    plain = tmp_path / "plain"  # setup.py's own wheel: no identity, no manifest, no gate
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            str(wb.apex_shaped_tree(tmp_path / "src")),
            "-w",
            str(plain),
        ],
        check=True,
        env=wb.isolated_pip_env({"APEX_CPP_EXT": "1"}),
        capture_output=True,
    )
    tampered = tmp_path / "tampered"
    shutil.copytree(builds["good"], tampered)
    manifest = json.loads((tampered / "build-manifest.json").read_text())
    manifest["cell"] = "another-cell"
    (tampered / "build-manifest.json").write_text(json.dumps(manifest))
    index = tmp_path / "index"
    done = wb.run_index(
        plain, builds["broken"], builds["zlib"], tampered, builds["good"], "--index", index, work=tmp_path
    )
    assert done.returncode == exit_codes.FAILED, done.stdout + done.stderr
    refused = [line for line in done.stderr.splitlines() if line.startswith("build.py index: refused")]
    assert len(refused) == 4, done.stderr
    by_source = {
        src: next(line for line in refused if str(src) in line)
        for src in (plain, builds["broken"], builds["zlib"], tampered)
    }
    assert "no build-manifest.json" in by_source[plain] and "build.py wheel --install" in by_source[plain]
    assert "static gate failed (verdict FAIL" in by_source[builds["broken"]]
    assert "libz.so.1" in by_source[builds["zlib"]]
    assert "disagree on cell" in by_source[tampered]
    assert "Traceback" not in done.stderr
    assert f"added     {STACK}/" in done.stdout  # partial results kept: the good wheel is published
    assert len(json.loads((index / STACK / "simple" / "apex" / "index.json").read_text())["files"]) == 1


def test_a_damaged_published_folder_is_named_left_out_and_made_whole_by_the_next_run(
    builds, tmp_path
) -> None:
    index = tmp_path / "index"
    assert wb.run_index(str(builds["good"]), "--index", index, work=tmp_path).returncode == 0
    (folder,) = (index / STACK / "files").iterdir()
    (folder / "verify-static.json").write_text("{not json")
    done = wb.run_index(str(builds["good"]), "--index", index, work=tmp_path)
    assert (
        done.returncode == 0
        and "is not a whole published wheel" in done.stderr
        and "Traceback" not in done.stderr
    )
    assert json.loads((folder / "verify-static.json").read_text())["verdict"] == "PASS"
    assert len(json.loads((index / STACK / "simple" / "apex" / "index.json").read_text())["files"]) == 1


def test_index_of_nothing_or_a_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    for args in ([str(tmp_path / "nope")], [str(tmp_path)]):
        done = run_build("index", *args, "--index", str(tmp_path / "index"))
        assert (
            done.returncode == exit_codes.USAGE
            and "build.py index:" in done.stderr
            and "Traceback" not in done.stderr
        )


def test_a_runs_cell_that_did_not_build_is_named_and_skipped(builds, tmp_path: Path) -> None:
    run = tmp_path / "out"
    (run / "cells" / "cu130").mkdir(parents=True)
    (run / "cells" / "cu130" / "result.json").write_text(
        json.dumps({"status": "build_failed", "build": None})
    )
    done = wb.run_index(str(run), str(builds["good"]), "--index", tmp_path / "index", work=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "cu130: status build_failed, no image to take a wheel from; skipped" in done.stderr
    assert f"added     {STACK}/" in done.stdout


@pytest.fixture(scope="module")
def served(builds, tmp_path_factory):
    with wb.served_index(builds["good"], tmp_path_factory.mktemp("wheel-index-served") / "index") as server:
        yield server


def test_pip_installs_it_from_the_served_index_and_verify_static_passes_from_the_wheels_own_manifest(
    served, tmp_path
):
    # a user's venv: torch, and not packaging (Apex's requirement besides torch): the index alone supplies it
    python = wb.torch_venv(tmp_path / "venv", hide=("packaging",))
    assert _sees(python, "packaging") == "" and _sees(python, "torch")
    env = wb.isolated_pip_env()
    done = wb.pip_install_apex(python, f"{served.url}{STACK}/simple", env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Successfully installed apex-{VERSION} packaging-{PACKAGING}" in done.stdout, done.stdout
    assert ".metadata" in done.stdout  # PEP 658: pip read the metadata before the wheel
    (site,) = (tmp_path / "venv").glob("lib/python3*/site-packages")
    assert _sees(python, "packaging") == str(site / "packaging" / "__init__.py")
    # no --manifest, no $APEX_BUILD_MANIFEST: verify reads the manifest in the installed .dist-info
    report = tmp_path / "report.json"
    check = wb.run_tool(
        python, "-m", "verify", "--static", "--require=", "--json", report,
        env={**env, "PYTHONPATH": str(REPO)}, cwd=tmp_path,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    data = json.loads(report.read_text())
    assert data["verdict"] == "PASS" and data["apex"]["distribution"]["version"] == VERSION
    assert data["manifest"]["origin"] == "the installed wheel", data["manifest"]


def test_pip_and_uv_refuse_it_where_no_torch_of_its_minor_can_be_had(served, tmp_path) -> None:
    bare = tmp_path / "bare"  # no torch in reach: the wheel's pin must stop both resolvers
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    url, env = f"{served.url}{STACK}/simple", wb.isolated_pip_env()
    pip = wb.run_tool(
        sys.executable, "-m", "pip", "--python", bare / "bin" / "python", "install", "apex", "--index-url", url,
        env=env,
    )  # fmt: skip
    assert pip.returncode == 1 and f"No matching distribution found for torch=={MINOR}.*" in pip.stderr, (
        pip.stderr
    )
    uv = wb.uv_pip_install(bare / "bin" / "python", url, env)
    assert uv.returncode != 0 and f"depend on torch=={MINOR}.*" in uv.stderr, uv.stderr
    # uv reads no venv's system site-packages, so it resolves against this Python itself, without installing
    ok = wb.uv_pip_install(sys.executable, url, env, "--system", "--dry-run")
    assert ok.returncode == 0 and f"+ apex=={VERSION}" in ok.stderr, ok.stderr


def test_a_plain_static_server_serves_the_same_index_as_html(served, tmp_path) -> None:
    """PEP 503 is static: the standard library's http.server (no PEP 691 negotiation) is enough for pip."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    index = Path(served.proc.args[3])
    plain = subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(index),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert plain.stdout and "Serving HTTP" in plain.stdout.readline()
        done = wb.run_tool(
            sys.executable, "-m", "pip", "download", "--no-deps", "-d", tmp_path / "got", "apex",
            "--index-url", f"http://127.0.0.1:{port}/{STACK}/simple", env=wb.isolated_pip_env(),
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        (got,) = (tmp_path / "got").glob("*.whl")
        assert got.name.startswith(f"apex-{VERSION}-")
    finally:
        plain.terminate()
        plain.wait(timeout=10)


def _variant(
    good: Path, folder: Path, name: str | None = None, extra: dict[str, bytes] | None = None
) -> Path:
    """The good wheel copied into `folder` (renamed, or with members added that its RECORD does not list)."""
    folder.mkdir()
    source = wb.the_wheel(good)
    target = folder / (name or source.name)
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            new.writestr(info, old.read(info))
        for member, data in (extra or {}).items():
            new.writestr(member, data)
    return target


def test_index_refuses_what_pip_would_not_install_or_find_and_leaves_the_pages_as_they_were(
    builds, tmp_path
) -> None:
    index = tmp_path / "index"
    assert wb.run_index(str(builds["good"]), "--index", index, work=tmp_path).returncode == 0
    pages = {p: p.read_bytes() for p in index.rglob("index.*")} | {index / "stacks.json": b""}
    pages[index / "stacks.json"] = (index / "stacks.json").read_bytes()
    name = wb.the_wheel(builds["good"]).name
    variants = {
        "outside": _variant(builds["good"], tmp_path / "a", extra={"../evil.py": b"x"}),
        "unlisted": _variant(builds["good"], tmp_path / "b", extra={"apex/hidden.py": b"x"}),
        "other": _variant(builds["good"], tmp_path / "c", name=name.replace("apex-", "apex_toolkit-", 1)),
    }
    done = wb.run_index(*map(str, variants.values()), "--index", index, work=tmp_path)
    assert done.returncode == exit_codes.FAILED and "Traceback" not in done.stderr, done.stderr
    refused = [line for line in done.stderr.splitlines() if line.startswith("build.py index: refused")]
    assert len(refused) == 3, done.stderr
    said = {key: next(line for line in refused if str(path) in line) for key, path in variants.items()}
    assert "outside the wheel's root" in said["outside"]
    assert "not listed in its RECORD" in said["unlisted"]
    assert "apex_toolkit" in said["other"] and "pip would not take it" in said["other"]
    assert {p: p.read_bytes() for p in pages} == pages  # no page changed


def test_a_link_in_the_index_is_refused_before_anything_is_written(builds, tmp_path) -> None:
    index = tmp_path / "site" / "index"
    assert wb.run_index(str(builds["good"]), "--index", index, work=tmp_path).returncode == 0
    outside = tmp_path / "somefile"
    outside.write_text("keep")
    (index / "stacks.json").unlink()
    (index / "stacks.json").symlink_to("../../somefile")
    done = wb.run_index(str(builds["newer"]), "--index", index, work=tmp_path)
    assert done.returncode == exit_codes.USAGE and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "stacks.json: is a symbolic link (to ../../somefile)" in line
    assert outside.read_text() == "keep"
    assert len(list((index / STACK / "files").iterdir())) == 1  # the newer build's folder was not added


def _sees(python: Path, module: str) -> str:
    """Where `python` imports `module` from ("" when it cannot)."""
    ask = f"import importlib.util as u; s = u.find_spec({module!r}); print(s.origin if s else '')"
    return subprocess.run([str(python), "-c", ask], capture_output=True, text=True, check=True).stdout.strip()


# --- what Apex requires besides torch, served beside it -------------------------------------------------------


def test_each_stack_page_serves_packaging_with_its_hash_and_metadata_and_never_torch(
    builds, tmp_path
) -> None:
    index = tmp_path / "index"
    done = wb.run_index(builds["good"], "--index", index, work=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    wheel_name = f"packaging-{PACKAGING}-py3-none-any.whl"
    (said,) = [line for line in done.stdout.splitlines() if line.startswith("dependency")]
    assert (
        f"{STACK}/{wheel_name}" in said and "packaging>20.6 of apex-" in said and "dependency-wheels" in said
    )
    simple = index / STACK / "simple"
    projects = [p["name"] for p in json.loads((simple / "index.json").read_text())["projects"]]
    assert projects == ["apex", "apex-verify", "packaging"]  # torch: the user's, never served
    assert '<a href="packaging/">packaging</a>' in (simple / "index.html").read_text()
    page = json.loads((simple / "packaging" / "index.json").read_text())
    (entry,) = page["files"]
    served = (simple / "packaging" / entry["url"]).resolve()
    assert served.parent.parent == (index / "dependencies").resolve() and served.name == wheel_name
    assert served.read_bytes() == (tmp_path / "dependency-wheels" / wheel_name).read_bytes()
    sha = wb.sha256(served)
    assert entry["hashes"] == {"sha256": sha} and served.parent.name == sha[:16]
    metadata = served.with_name(wheel_name + ".metadata").read_bytes()
    assert metadata == wheel_identity.read_dist_info(served, ("METADATA",))["METADATA"]
    assert entry["core-metadata"] == entry["dist-info-metadata"] == {"sha256": wb_sha_bytes(metadata)}
    assert entry["requires-python"] == importlib.metadata.metadata("packaging")["Requires-Python"]
    html_page = (simple / "packaging" / "index.html").read_text()
    assert (
        f"#sha256={sha}" in html_page and f'data-core-metadata="sha256={wb_sha_bytes(metadata)}"' in html_page
    )
    (row,) = json.loads((index / "stacks.json").read_text())["stacks"]
    assert row["dependencies"] == [wheel_name]
    # held by the index now: the next run needs neither the folder nor the network, and changes nothing
    before = {p: p.read_bytes() for p in index.rglob("*") if p.is_file()}
    again = run_build("index", str(builds["good"]), "--index", str(index), "--no-download")
    assert again.returncode == 0 and "dependency" not in again.stdout, again.stdout + again.stderr
    assert {p: p.read_bytes() for p in index.rglob("*") if p.is_file()} == before


def test_a_requirement_nothing_supplies_is_exit_3_naming_it_and_the_flag_and_nothing_is_written(
    builds, tmp_path
) -> None:
    index = tmp_path / "index"
    done = run_build("index", str(builds["good"]), "--index", str(index), "--no-download")
    assert done.returncode == exit_codes.ENVIRONMENT, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "no wheel for packaging>20.6, which apex-" in line and f"({STACK}) requires" in line
    assert "no --dependency-wheels DIR given, and --no-download" in line
    assert "pass --dependency-wheels DIR holding a py3-none-any wheel of it" in line
    assert sorted(p.name for p in index.iterdir()) == [".lock"]  # no wheel, no page, no tool


def test_pip_download_fetches_what_no_folder_holds_and_its_failure_is_exit_3(builds, tmp_path) -> None:
    # pip's own settings, offline: --find-links a folder and no index, as a mirror would be configured
    house = tmp_path / "house"
    wheel = wb.repacked_wheel("packaging", house)
    offline = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house)}
    done = run_build("index", str(builds["good"]), "--index", str(tmp_path / "index"), env=offline)
    assert done.returncode == 0, done.stdout + done.stderr
    (said,) = [line for line in done.stdout.splitlines() if line.startswith("dependency")]
    assert said.endswith("from pip download)") and wheel.name in said
    (served,) = (tmp_path / "index" / "dependencies").glob("*/*.whl")
    assert served.read_bytes() == wheel.read_bytes()

    empty = tmp_path / "empty"
    empty.mkdir()
    gone = run_build(
        "index",
        str(builds["good"]),
        "--index",
        str(tmp_path / "index2"),
        env={**offline, "PIP_FIND_LINKS": str(empty)},
    )
    assert gone.returncode == exit_codes.ENVIRONMENT, gone.stdout + gone.stderr
    (line,) = gone.stderr.strip().splitlines()
    assert "no wheel for packaging>20.6" in line and "pip download failed (exit 1:" in line
    assert "pass --dependency-wheels DIR" in line and not (tmp_path / "index2" / STACK).exists()


def test_a_dependency_that_is_not_pure_python_is_refused_from_a_folder_and_from_pip_download(
    builds, tmp_path
) -> None:
    arch = platform.machine()
    house = tmp_path / "house"
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    binary = wb.repacked_wheel("packaging", house, tag=f"{tag}-{tag}-linux_{arch}")
    folder = run_build(
        "index",
        str(builds["good"]),
        "--index",
        str(tmp_path / "a"),
        "--dependency-wheels",
        str(house),
        "--no-download",
    )
    assert folder.returncode == exit_codes.ENVIRONMENT, folder.stdout + folder.stderr
    (line,) = folder.stderr.strip().splitlines()
    assert f"holds only {binary.name}, not pure Python (py3-none-any)" in line
    offline = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house)}
    fetched = run_build("index", str(builds["good"]), "--index", str(tmp_path / "b"), env=offline)
    assert fetched.returncode == exit_codes.ENVIRONMENT, fetched.stdout + fetched.stderr
    (line,) = fetched.stderr.strip().splitlines()
    assert f"has no pure-Python wheel: pip download gave {binary.name}" in line
    assert "serves py3-none-any wheels only" in line
