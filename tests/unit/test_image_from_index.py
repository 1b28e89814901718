"""`build.py image --apex-index URL` (`make image APEX_INDEX=URL`): the cell's wheel found on a real index
(pages written by toolchain/index), fetched with its sha256 checked and staged into the build context; the
Dockerfile's switch (APEX_FROM) from the compile to that wheel; and the refusal, exit 3 in one line before
anything is built, when the index lacks the cell's stack or Python. The image build itself is in the
apex-image tier (tests/apex_image/test_wheel_index_image.py)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests import wheel_builds as wb
from tests.support import REPO, dockerfile, frozen_cell, run_build
from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.image import apex_index, buildkit_build
from toolchain.index import pages, publish
from verify.runtime import exit_codes

COMMIT = "6424da3b4faa6c8f062da4a48c424fff3f02d42d"


def _index(root: Path, stack: str, names: list[str]) -> dict[str, bytes]:
    """An index with one stack holding these wheels (their bytes: the name), written by the real page code."""
    entries, data = [], {}
    for n, name in enumerate(names):
        body = name.encode()
        folder = root / stack / "files" / f"{n:016x}"
        folder.mkdir(parents=True)
        (folder / name).write_bytes(body)
        sha = hashlib.sha256(body).hexdigest()
        version = name.split("-")[1]
        entries.append(
            pages.Entry(
                stack, name, folder.name, sha, len(body), version, "0" * 64, None, "", COMMIT, "9.0", "PASS"
            )
        )
        data[name] = body
    publish.write_pages(root, entries)
    return data


def _cell(**values: str):
    return frozen_cell({"cuda": "13.0", "torch": "2.11", "python": "3.12", "archs": "9.0", **values})


WHEEL = "apex-0.1+g6424da3.cu130.torch2.11-cp312-cp312-manylinux_2_28_x86_64.whl"
OTHER_PY = "apex-0.1+g6424da3.cu130.torch2.11-cp311-cp311-manylinux_2_28_x86_64.whl"


def test_the_cells_wheel_is_found_fetched_hash_checked_and_staged(tmp_path: Path) -> None:
    data = _index(tmp_path / "site", "torch2.11-cu130", [OTHER_PY, WHEEL])
    wheel = apex_index.find(_cell(), (tmp_path / "site").as_uri())
    assert (wheel.name, wheel.stack) == (WHEEL, "torch2.11-cu130")
    assert wheel.sha256 == hashlib.sha256(data[WHEEL]).hexdigest()
    assert wheel.build_args() == {"APEX_FROM": "index", "APEX_WHEEL": WHEEL}
    context = buildkit_build.stage_context(tmp_path / "context", apex_wheel=wheel)
    staged = context / buildkit_build.INPUTS / apex_index.WHEEL_FOLDER / WHEEL
    assert staged.read_bytes() == data[WHEEL]


def test_a_wheel_whose_bytes_are_not_the_pages_hash_is_refused(tmp_path: Path) -> None:
    _index(tmp_path / "site", "torch2.11-cu130", [WHEEL])
    wheel = apex_index.find(_cell(), (tmp_path / "site").as_uri())
    (served,) = (tmp_path / "site").glob(f"*/files/*/{WHEEL}")
    served.write_bytes(b"changed on the way")
    with pytest.raises(EnvironmentUnavailable, match="its index page says"):
        apex_index.fetch(wheel, tmp_path)
    assert not (tmp_path / WHEEL).exists()


def test_an_index_without_the_stack_names_what_it_has(tmp_path: Path) -> None:
    _index(tmp_path / "site", "torch2.15-cu132", [WHEEL.replace("cu130.torch2.11", "cu132.torch2.15")])
    with pytest.raises(EnvironmentUnavailable) as caught:
        apex_index.find(_cell(), (tmp_path / "site").as_uri())
    text = str(caught.value)
    assert "has no stack torch2.11-cu130" in text and "it has torch2.15-cu132" in text
    assert "\n" not in text


def test_a_stack_without_the_cells_python_is_refused(tmp_path: Path) -> None:
    _index(tmp_path / "site", "torch2.11-cu130", [OTHER_PY])
    with pytest.raises(
        EnvironmentUnavailable,
        match=re.escape(f"no wheel for Python 3.12 on linux/amd64 (it has {OTHER_PY})"),
    ):
        apex_index.find(_cell(), (tmp_path / "site").as_uri())


def test_the_wheel_fits_only_its_python_and_architecture() -> None:
    cell = _cell()
    assert apex_index.fits(WHEEL, cell) and not apex_index.fits(OTHER_PY, cell)
    assert not apex_index.fits(WHEEL.replace("x86_64", "aarch64"), cell)
    assert apex_index.fits(WHEEL.replace("x86_64", "aarch64"), _cell(platform="linux/arm64"))
    assert not apex_index.fits("apex.tar.gz", cell)


def test_build_py_image_refuses_an_index_without_the_stack_before_any_build(tmp_path: Path) -> None:
    _index(tmp_path / "site", "torch2.15-cu132", [WHEEL.replace("cu130.torch2.11", "cu132.torch2.15")])
    done = run_build(
        "image", "--cuda", "13.0", "--torch", "2.11", "--apex-index", (tmp_path / "site").as_uri()
    )
    assert done.returncode == exit_codes.ENVIRONMENT, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "has no stack torch2.11-cu130" in line and "it has torch2.15-cu132" in line
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("extra", "code", "says"),
    [
        (["--apex-index", "ftp://host/apex/"], exit_codes.USAGE, "not an http://, https:// or file:// URL"),
        (["--apex-index", "file:///nonexistent/apex-index/"], exit_codes.ENVIRONMENT, "the stack list"),
    ],
)
def test_build_py_image_apex_index_argument_errors(extra: list[str], code: int, says: str) -> None:
    done = run_build("image", "--cuda", "13.0", *extra)
    assert done.returncode == code, done.stdout + done.stderr
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_apex_index_and_apex_src_are_two_ways_to_one_apex(tmp_path: Path) -> None:
    src = wb.apex_shaped_tree(tmp_path / "apex")
    done = run_build("image", "--cuda", "13.0", "--apex-index", "file:///x/", "--apex-src", str(src))
    assert done.returncode == exit_codes.USAGE and "--apex-src compiles one; pass one" in done.stderr, (
        done.stderr
    )


def test_make_image_passes_apex_index_as_one_argument() -> None:
    done = subprocess.run(
        ["make", "-n", "image", "CUDA=13.0", "APEX_INDEX=https://acme.github.io/apex toolchain/"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--apex-index 'https://acme.github.io/apex toolchain/'" in done.stdout


def test_the_dockerfile_ships_apex_from_the_stage_apex_from_names() -> None:
    stages = dockerfile().stages
    assert stages["apex-ready"].parent == "apex-${APEX_FROM}"
    assert {"apex-build", "apex-index"} <= set(stages)
    assert stages["apex-index"].parent == "torch"  # torch's venv, no Apex source, no compile
    assert stages["runtime-devel"].parent == "apex-ready"
    assert all(
        "--from=apex-ready" in line for line in stages["runtime-apex"].instructions if "--from=" in line
    )
    script = stages["apex-index"].with_scripts()
    assert "--no-deps --no-index" in script and "python -m verify --static" in script
    assert "gate_required" in script  # the same gate as a compiled build's runtime-slim check
    defaults = dict(dockerfile().global_args)
    assert defaults["APEX_FROM"] == "build"  # a plain docker build compiles


def test_the_cells_wheel_page_is_what_build_py_index_writes(tmp_path: Path) -> None:
    """find() reads the stack's PEP 691 page; its URLs are relative to the page, as the index writes them."""
    _index(tmp_path / "site", "torch2.11-cu130", [WHEEL])
    page = json.loads((tmp_path / "site" / "torch2.11-cu130" / "simple" / "apex" / "index.json").read_text())
    assert page["files"][0]["url"].startswith("../../files/")
    with pytest.raises(UsageError, match="not an http"):
        apex_index.root("site/")
