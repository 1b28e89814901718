"""docker/Dockerfile's declarations: each ARG default stated once (before the first FROM), every stage
declaring the ARGs it reads, build.py setting every pin, and each shipped target carrying the labels of
toolchain.image.labels. The docker tier builds verify-runtime and reads its labels back."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tests.support import dockerfile, frozen_facts
from toolchain.image import engine, labels
from toolchain.spec.matrix import cli_cell

_REF = re.compile(r"\$\{?([A-Z][A-Z0-9_]*)")
# Knobs of the Dockerfile itself, not of a cell: build.py leaves their defaults alone
# (MAX_JOBS etc. come from the builder's own sizing; APP_UID is the image's user).
_DOCKERFILE_OWN = {"PIP_INDEX_URL", "BUILD_REQUIREMENTS", "MAX_JOBS", "APEX_PARALLEL_BUILD", "CUDA_FROM_PYPI",
                   "APP_UID", "IMAGE_SOURCE", "TORCH_WHEELHOUSE", "APEX_SRC_DIR"}  # fmt: skip
# what build_image adds to the cell's args on every build (toolchain/image/engine.py: provenance)
_PROVENANCE = {"BUILD_DATE", "SOURCE_REVISION", "BASE_DEVEL_DIGEST", "BASE_RUNTIME_DIGEST"}


def test_every_arg_default_is_declared_once_before_the_first_from() -> None:
    names = Counter(name for name, _ in dockerfile().global_args)
    assert [n for n, count in names.items() if count > 1] == []
    assert all(default is not None for _, default in dockerfile().global_args), "a global ARG without a default"
    for stage in dockerfile().stages.values():
        with_default = {name: value for name, value in stage.args().items() if value is not None}
        assert with_default == {}, f"stage {stage.name} gives a default again: {with_default}"
        assert set(stage.args()) <= set(names), f"stage {stage.name} declares an ARG with no global default"


def test_every_stage_declares_the_args_its_steps_read() -> None:
    """A global ARG is not visible inside a stage that does not name it: the step would see ''."""
    known = {name for name, _ in dockerfile().global_args}
    for stage in dockerfile().stages.values():
        read = set(_REF.findall(stage.with_scripts())) & known
        assert read <= set(stage.args()), f"stage {stage.name} reads {sorted(read - set(stage.args()))} undeclared"


def test_build_py_sets_every_pin_and_only_the_dockerfiles_own_knobs_keep_their_default() -> None:
    cell = cli_cell({"cuda": "13.0", "python": "3.12", "archs": "9.0"}, facts=frozen_facts())
    passed = set(engine.build_args_for(cell)) | _PROVENANCE
    declared = {name for name, _ in dockerfile().global_args}
    assert passed <= declared, f"build.py passes {sorted(passed - declared)}, which no ARG declares"
    assert declared - passed == _DOCKERFILE_OWN


@pytest.mark.parametrize("target", sorted(labels.BY_TARGET))
def test_each_shipped_target_carries_its_labels(target: str) -> None:
    stage = dockerfile().stages[target]
    assert set(stage.labels()) == labels.BY_TARGET[target]
    assert stage.labels()[labels.NAMESPACE + "target"] == target
    assert stage.labels()[labels.CELL] == "${CELL_ID}"
    assert target in engine.TARGETS
