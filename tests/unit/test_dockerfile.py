"""docker/Dockerfile's declarations: each ARG default stated once (before the first FROM), every stage
declaring the ARGs it reads, build.py setting every pin; and the labels, which build.py applies from
toolchain.spec.image_labels (no LABEL in the Dockerfile). The docker tier builds verify-runtime and reads its
labels back."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tests.support import REPO, dockerfile, frozen_facts
from toolchain.image import buildkit_build
from toolchain.image.docker_host import DockerClient
from toolchain.spec import ci_matrix, image_labels, targets
from toolchain.spec.matrix import cli_cell

_REF = re.compile(r"\$\{?([A-Z][A-Z0-9_]*)")
# Knobs of the Dockerfile itself, not of a cell: build.py leaves their defaults alone
# (MAX_JOBS etc. come from the builder's own sizing; APP_UID is the image's user; the CCACHE_* pair only
# when the compiler cache is carried, --ccache-dir / --ccache-mount).
_DOCKERFILE_OWN = {"PIP_INDEX_URL", "BUILD_REQUIREMENTS", "MAX_JOBS", "APEX_PARALLEL_BUILD", "CUDA_FROM_PYPI",
                   "APP_UID", "TORCH_WHEELHOUSE", "APEX_SRC_DIR", "CCACHE_MOUNT", "CCACHE_CARRY_ID",
                   "RUNTIME_REQUIREMENTS", "APEX_FROM", "APEX_WHEEL"}  # fmt: skip
# what build_image adds to the cell's args on every build (toolchain/image/buildkit_build.py: provenance)
_PROVENANCE = {"BUILD_DATE", "SOURCE_REVISION", "BASE_DEVEL_DIGEST", "BASE_RUNTIME_DIGEST"}


def test_every_arg_default_is_declared_once_before_the_first_from() -> None:
    names = Counter(name for name, _ in dockerfile().global_args)
    assert [n for n, count in names.items() if count > 1] == []
    assert all(default is not None for _, default in dockerfile().global_args), (
        "a global ARG without a default"
    )
    for stage in dockerfile().stages.values():
        with_default = {name: value for name, value in stage.args().items() if value is not None}
        assert with_default == {}, f"stage {stage.name} gives a default again: {with_default}"
        assert set(stage.args()) <= set(names), f"stage {stage.name} declares an ARG with no global default"


def test_every_stage_declares_the_args_its_steps_read() -> None:
    """A global ARG is not visible inside a stage that does not name it: the step would see ''."""
    known = {name for name, _ in dockerfile().global_args}
    for stage in dockerfile().stages.values():
        read = set(_REF.findall(stage.with_scripts())) & known
        assert read <= set(stage.args()), (
            f"stage {stage.name} reads {sorted(read - set(stage.args()))} undeclared"
        )


def test_build_py_sets_every_pin_and_only_the_dockerfiles_own_knobs_keep_their_default() -> None:
    cell = cli_cell({"cuda": "13.0", "python": "3.12", "archs": "9.0"}, facts=frozen_facts())
    passed = (set(buildkit_build.build_args_for(cell)) | _PROVENANCE) - image_labels.LABEL_ONLY_ARGS
    declared = {name for name, _ in dockerfile().global_args}
    assert passed <= declared, f"build.py passes {sorted(passed - declared)}, which no ARG declares"
    assert declared - passed == _DOCKERFILE_OWN
    assert not image_labels.LABEL_ONLY_ARGS & declared, (
        "an ARG the labels alone read: build.py does not pass it"
    )


def test_the_dockerfile_sets_no_label() -> None:
    """Labels are build.py's (one table for every target); a LABEL here would be a second copy."""
    assert {name: stage.labels() for name, stage in dockerfile().stages.items() if stage.labels()} == {}


# The values each shipped target's labels take, written out (the Dockerfile's LABEL blocks before they moved).
_APEX = "NVIDIA Apex v25.09 built for torch 2.11.0, CUDA 13.0, archs 9.0"
_EXPECTED = {
    "runtime": ("", _APEX, "rt:1", "sha256:rt"),
    "runtime-devel": (" (devel)", _APEX + "; with nvcc", "devel:1", "sha256:devel"),
    "runtime-slim": (" (slim)", _APEX + "; CUDA libraries from torch's wheels", "ubuntu:24.04", None),
    "verify-runtime": (" (verify only, no Apex)", "torch 2.11.0 and the verify tool, without Apex", "rt:1", "sha256:rt"),
}  # fmt: skip


@pytest.mark.parametrize("target", sorted(image_labels.BY_TARGET))
def test_for_image_renders_each_targets_labels_from_the_build_args(target: str) -> None:
    args = {"CELL_ID": "c1", "TORCH_VERSION": "2.11.0", "CUDA_VERSION": "13.0", "PYTHON_VERSION": "3.12",
            "APEX_REPO": "https://example.org/apex.git", "APEX_REF": "v25.09", "APEX_FLAGS": "APEX_CPP_EXT=1",
            "TORCH_CUDA_ARCH_LIST": "9.0", "BASE_DEVEL_IMAGE": "devel:1", "BASE_RUNTIME_IMAGE": "rt:1",
            "BASE_SLIM_IMAGE": "ubuntu:24.04", "BASE_DEVEL_DIGEST": "sha256:devel", "BASE_RUNTIME_DIGEST": "sha256:rt",
            "BUILD_DATE": "2026-12-01T00:00:00+00:00", "SOURCE_REVISION": "abc123", "IMAGE_SOURCE": "https://x/y",
            "BASE_ROUTE": "local"}  # fmt: skip
    title, description, base, digest = _EXPECTED[target]
    oci = {"title": "apex-toolchain c1" + title, "description": description, "version": "c1",
           "created": "2026-12-01T00:00:00+00:00", "revision": "abc123", "source": "https://x/y", "base.name": base,
           **({"base.digest": digest} if digest else {})}  # fmt: skip
    own = {
        "cell": "c1",
        "target": target,
        "torch": "2.11.0",
        "cuda": "13.0",
        "python": "3.12",
        "base.route": "local",
    }
    if target != "verify-runtime":
        own |= {"apex.repo": "https://example.org/apex.git", "apex.ref": "v25.09", "apex.flags": "APEX_CPP_EXT=1",
                "archs": "9.0", "manifest": "/opt/apex/build-manifest.json"}  # fmt: skip
    rendered = image_labels.for_image(target, args)
    assert set(rendered) == image_labels.BY_TARGET[target]
    expected = {image_labels.OCI + k: v for k, v in oci.items()} | {
        image_labels.NAMESPACE + k: v for k, v in own.items()
    }
    assert rendered == expected
    assert target in buildkit_build.TARGETS


def test_only_shipped_targets_get_labels_and_a_missing_arg_reads_empty() -> None:
    labelled = {t for t in buildkit_build.TARGETS if image_labels.for_image(t, {"CELL_ID": "c1"})}
    assert labelled == set(image_labels.BY_TARGET)
    assert image_labels.for_image("runtime", {"CELL_ID": "c1"})[image_labels.OCI + "created"] == ""


def test_the_runtime_targets_share_one_runtime_base_whose_os_the_target_names() -> None:
    """runtime, verify-runtime and runtime-slim stand on one runtime-base stage (the OS step and the venv's
    environment written once); which base it stands on is RUNTIME_OS, which build.py sets per target."""
    stages = dockerfile().stages
    assert stages["runtime-base"].parent == "os-${RUNTIME_OS}"
    assert {stages["os-runtime"].parent, stages["os-slim"].parent} == {
        "${BASE_RUNTIME_IMAGE}",
        "${BASE_SLIM_IMAGE}",
    }
    assert (
        stages["verify-runtime"].parent == "runtime-base" and stages["runtime-apex"].parent == "runtime-base"
    )
    assert stages["runtime"].parent == "runtime-apex" and stages["runtime-slim"].parent == "runtime-apex"
    # the venv's environment once among the runtime stages (the devel stage has its own, on another base)
    venv_env = [name for name, stage in stages.items() if "VIRTUAL_ENV=/opt/venv" in stage.text]
    assert sorted(venv_env) == ["devel", "runtime-base"]
    # runtime-slim refuses the default RUNTIME_OS in a stage of its own, which its gate step mounts
    assert (
        "from=slim-guard" in stages["runtime-slim"].text
        and '"$RUNTIME_OS" = slim' in stages["slim-guard"].text
    )
    defaults = dict(dockerfile().global_args)
    assert defaults["RUNTIME_OS"] == targets.DEFAULT_RUNTIME_OS and set(targets.RUNTIME_OS.values()) == {
        "slim"
    }
    assert {f"os-{value}" for value in (*targets.RUNTIME_OS.values(), targets.DEFAULT_RUNTIME_OS)} <= set(
        stages
    )


@pytest.mark.parametrize(
    ("target", "runtime_os"),
    [
        ("runtime", "runtime"),
        ("runtime-slim", "slim"),
        ("verify-runtime", "runtime"),
        ("runtime-devel", "runtime"),
    ],
)
def test_build_py_and_the_bake_file_pass_the_os_each_target_stands_on(target: str, runtime_os: str) -> None:
    cell = cli_cell({"cuda": "13.0", "python": "3.12", "archs": "9.0"}, facts=frozen_facts())
    args = buildkit_build.build_args_for(cell, target=target)
    assert args["RUNTIME_OS"] == runtime_os and args["BASE_SLIM_IMAGE"] == "ubuntu:24.04"
    command = buildkit_build.build_command(cell, target=target, client=DockerClient("docker", True, "28.2.2"))
    assert f"RUNTIME_OS={runtime_os}" in command
    bake = ci_matrix.bake([cell], target=target)["target"]
    (entry,) = bake.values()
    assert entry["args"]["RUNTIME_OS"] == runtime_os and entry["args"]["BASE_SLIM_IMAGE"] == "ubuntu:24.04"
    assert entry["labels"] == image_labels.for_image(target, {**entry["args"], "BASE_ROUTE": cell.base_route})


def test_every_file_the_stages_copy_from_the_context_reaches_it() -> None:
    """A COPY source must be in the private context (CONTEXT_PATHS) and let through by the Dockerfile's
    .dockerignore; apex_verify_entry.py once was in the first and not the second: every engine test failed."""
    import fnmatch
    import shlex

    from toolchain.image.buildkit_build import CONTEXT_PATHS

    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    allowed = [
        line[1:].strip()
        for line in (REPO / "docker" / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    sources = []
    for line in dockerfile.splitlines():
        words = shlex.split(line) if line.startswith("COPY ") else []
        if words and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    assert "pyproject.toml" in sources and "verify" in sources
    for source in sources:
        assert source.split("/")[0] in CONTEXT_PATHS, source
        assert any(fnmatch.fnmatch(source, p) or fnmatch.fnmatch(f"{source}/x", p) for p in allowed), source
