"""What the index publishes, on a real wheel the project's builder makes (tests/wheel_builds.py), varied one
field at a time with the builder's own stamp: the exact torch pin its METADATA must carry, the stack it claims
against the stack its versions name and the folder it is filed under, and the PEP 658 hash its page carries.
The pages' own rules on published entries: tests/unit/test_rules_pages.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests import wheel_builds as wb
from toolchain.builder import build_outputs, wheel_identity
from toolchain.index import dependencies, publish, wheel_check
from toolchain.index.wheel_check import CheckedWheel, Refusal

MINOR = ".".join(torch.__version__.split(".")[:2])
STACK = f"torch{MINOR}-{wheel_identity.cuda_tag(torch.version.cuda)}"
OTHER_STACK = "torch2.9-cu130"
CACHE_ENV = "APEX_TEST_WHEEL_CACHE"  # a folder to keep the built wheel in between runs (the mutation run's)


# --- a real wheel of the project's builder -------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The builder's stamped and gated wheel (kept in $APEX_TEST_WHEEL_CACHE when set: the mutation run)."""
    cache = os.environ.get(CACHE_ENV)
    if cache and list(Path(cache).glob("*.whl")):
        (wheel,) = Path(cache).glob("*.whl")
        yield wheel
        return
    root = tmp_path_factory.mktemp("rules-index")
    done = wb.build_stamped(root / "good", wb.torch_venv(root / "venv"))
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (root / "good" / "out").glob("*.whl")
    if cache:
        Path(cache).mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, Path(cache) / wheel.name)
    yield wheel


def _variant(built: Path, where: Path, *, pin: str | None = None, manifest: dict | None = None) -> Path:
    """The built wheel alone in a folder of its own, re-stamped by the builder with one field changed."""
    files = wheel_identity.read_dist_info(built)
    inside = json.loads(files[wheel_identity.MANIFEST_FILE])
    version = wheel_identity.parse_name(built.name)[1]
    extra = {wheel_identity.MANIFEST_FILE: json.dumps(manifest if manifest is not None else inside).encode()}
    return wheel_identity.stamp(
        built, where / built.name, version, pin or inside["wheel_identity"]["torch_requirement"], extra
    )


@pytest.mark.slow  # builds a wheel (pip wheel of a C module, the builder's gate): several seconds
def test_the_wheel_must_pin_exactly_its_torch_minor(built: Path, tmp_path: Path) -> None:
    as_built = wheel_check.check(_variant(built, tmp_path / "same"), work=tmp_path)
    assert isinstance(as_built, CheckedWheel), as_built
    assert as_built.stack == STACK
    for pin in ("torch>=2.6.0", "torch==2.9.*", f"torch=={MINOR}.*,<3", "torch"):
        refused = wheel_check.check(_variant(built, tmp_path / pin.replace("*", "x"), pin=pin), work=tmp_path)
        assert isinstance(refused, Refusal), pin
        (reason,) = refused.reasons
        assert reason.startswith(f"its METADATA requires ['{pin}'], not exactly torch=={MINOR}.*"), reason


@pytest.mark.slow
def test_a_wheel_claiming_another_stack_than_its_versions_is_refused(built: Path, tmp_path: Path) -> None:
    inside = json.loads(wheel_identity.read_dist_info(built)[wheel_identity.MANIFEST_FILE])
    claims = {**inside, "wheel_identity": {**inside["wheel_identity"], "stack": OTHER_STACK}}
    refused = wheel_check.check(_variant(built, tmp_path, manifest=claims), work=tmp_path)
    assert isinstance(refused, Refusal)
    (reason,) = refused.reasons
    assert "its manifest's wheel_identity" in reason and OTHER_STACK in reason
    assert "is not what its versions say" in reason


@pytest.mark.slow
def test_a_published_wheel_filed_under_another_stack_is_left_out(built: Path, tmp_path: Path, capsys) -> None:
    checked = wheel_check.check(_variant(built, tmp_path / "w"), work=tmp_path)
    assert isinstance(checked, CheckedWheel)
    index = tmp_path / "index"
    source = dependencies.Source((wb.dependency_folder(tmp_path),))  # its packaging requirement
    outcome, added = publish.add(index, [checked], publish.Extras(dependencies=source))
    assert (outcome.stack, outcome.action, added.action) == (STACK, "added", "dependency")
    (folder,) = (index / STACK / "files").iterdir()
    assert [e.stack for e in publish.published(index)] == [STACK]
    shutil.copytree(folder, index / OTHER_STACK / "files" / folder.name)  # filed by hand under another stack
    assert [(e.stack, e.name) for e in publish.published(index)] == [(STACK, checked.name)]
    assert f"holds a wheel built for {STACK}, filed under {OTHER_STACK}" in capsys.readouterr().err
    page = (index / STACK / "simple" / "apex" / "index.html").read_text()
    (link,) = wb.anchors(page)
    metadata = (folder / f"{checked.name}.metadata").read_bytes()
    want = "sha256=" + hashlib.sha256(metadata).hexdigest()
    assert link["data-dist-info-metadata"] == link["data-core-metadata"] == want
    assert metadata == wheel_identity.read_dist_info(folder / checked.name)["METADATA"]


@pytest.mark.slow
def test_a_manifest_beside_the_wheel_must_agree_with_it(built: Path, tmp_path: Path) -> None:
    wheel = _variant(built, tmp_path / "beside")
    inside = json.loads(wheel_identity.read_dist_info(wheel)[wheel_identity.MANIFEST_FILE])
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    beside = wheel.parent / build_outputs.MANIFEST_NAME
    beside.write_text(json.dumps({**inside, "build": {**inside["build"], "wheel_sha256": sha}}))
    assert isinstance(wheel_check.check(wheel, work=tmp_path), CheckedWheel)  # the same build: it passes
    beside.write_text(json.dumps({**inside, "build": {**inside["build"], "wheel_sha256": "0" * 64}}))
    refused = wheel_check.check(wheel, work=tmp_path)
    assert isinstance(refused, Refusal) and "the wheel was changed or replaced" in refused.reasons[0]
