"""verify/domain/ and toolchain/spec/cell_id.py: each domain value has one parser, its renderings round-trip,
and the shell and Dockerfile copies of a rule agree with the Python one case by case."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import FROZEN_MATRIX, REPO, frozen_cell, frozen_facts
from toolchain.builder import build_inputs
from toolchain.errors import UsageError
from toolchain.spec import targets
from toolchain.spec.cell_fields import TAG_MAX
from toolchain.spec.cell_id import CellId
from verify.domain import apex_tree, commit, layout
from verify.domain.arch import Arch, arch_list_text, parse_arch_list, tag_suffix
from verify.domain.extras import extra_flag
from verify.domain.problem import ValueProblem
from verify.layers import module_map
from verify.runtime.messages import shown

FETCH_APEX = REPO / "docker" / "fetch-apex.sh"


# ---------------------------------------------------------------- Arch


@pytest.mark.parametrize(
    ("text", "arch"),
    [
        ("9.0", Arch(9, 0)),
        ("8.6", Arch(8, 6)),
        ("10.0", Arch(10, 0)),
        ("12.0+PTX", Arch(12, 0, ptx=True)),
        ("9.0a", Arch(9, 0, "a")),
        ("10.0f", Arch(10, 0, "f")),
        ("10.0a+PTX", Arch(10, 0, "a", True)),
    ],
)
def test_arch_parses_every_form_and_renders_it_back(text: str, arch: Arch) -> None:
    assert Arch.parse(text) == arch and str(arch) == text
    assert Arch.parse(f"  {text} ") == arch  # a cell's list entry may carry spaces


@pytest.mark.parametrize(
    "text",
    [
        "٩.٠",
        "９.0",
        "9.٠",
        "１０.0",  # Unicode digits: Python's \d takes them, nvcc and torch do not
        "9",
        "sm_90",
        "90",
        "9.0+ptx",
        "9.0b",
        "9.10",
        "9.0 9.0",
        "",
        "+PTX",
        "9.0PTX",
        "x.y",
    ],
)
def test_arch_refuses_what_nvcc_would_not_read(text: str) -> None:
    with pytest.raises(ValueProblem) as bad:
        Arch.parse(text)
    assert "is not a compute capability" in bad.value.problem and "write it as" in bad.value.fix


def test_arch_refusal_suggests_the_ascii_reading() -> None:
    with pytest.raises(ValueProblem, match="write it as 9.0"):
        Arch.parse("sm_90")
    with pytest.raises(ValueProblem, match="write it as 10.0"):
        Arch.parse("100")
    with pytest.raises(ValueProblem, match="write it as 9.0 "):  # no digit read from '٩٠'
        Arch.parse("٩٠")


def test_arch_renderings() -> None:
    arch = Arch.parse("9.0a+PTX")
    assert (arch.number, arch.tag_token, arch.sm, arch.compute) == ("9.0", "90aptx", "sm_90a", "compute_90a")
    assert arch.gencode() == [
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_90a,code=compute_90a",
    ]
    assert Arch.parse("8.0").gencode() == ["-gencode=arch=compute_80,code=sm_80"]
    assert Arch.from_capability((10, 0)) == Arch(10, 0) and str(Arch.from_capability((9, 0))) == "9.0"
    assert Arch.parse("12.0").with_ptx() == Arch.parse("12.0+PTX")


def test_nvcc_names_read_back() -> None:
    assert Arch.from_nvcc_name("compute_90") == Arch(9, 0)
    assert Arch.from_nvcc_name("sm_100a") == Arch(10, 0, "a")
    assert Arch.from_nvcc_name("compute_120f") == Arch(12, 0, "f")
    for bad in ("compute_9", "sm_", "compute_٩٠", "9.0", "sm_90x"):
        assert Arch.from_nvcc_name(bad) is None


arches = st.builds(
    Arch, st.integers(1, 13), st.integers(0, 9), st.sampled_from(["", "a", "f"]), st.booleans()
)


@given(arches)
def test_every_arch_round_trips_through_each_form(arch: Arch) -> None:
    assert Arch.parse(str(arch)) == arch
    assert (
        Arch.from_nvcc_name(arch.sm)
        == Arch.from_nvcc_name(arch.compute)
        == Arch(arch.major, arch.minor, arch.suffix)
    )


@given(st.lists(arches, min_size=1, max_size=6), st.sampled_from([";", ",", " ", "; "]))
def test_arch_lists_round_trip(archs: list[Arch], separator: str) -> None:
    text = separator.join(str(a) for a in archs)
    assert parse_arch_list(text) == tuple(archs)
    assert parse_arch_list(arch_list_text(archs)) == tuple(archs)
    assert parse_arch_list([str(a) for a in archs]) == tuple(archs)


def test_tag_suffix() -> None:
    assert tag_suffix(parse_arch_list("8.0;9.0+PTX;10.0a")) == "sm80_90ptx_100a"


def test_spec_and_builder_take_the_same_archs() -> None:
    """The matrix (a cell's archs) and the builder (--archs) read one grammar: the same text is taken or
    refused by both."""
    for text in ("9.0", "9.0+PTX", "٩.٠", "９.0", "9.x", "sm_90"):
        try:
            built = build_inputs.parse_archs(text)
        except UsageError:
            built = None
        cell_problems = _cell_problems({"cuda": "13.0", "archs": text})
        if built is None:  # (non-ASCII text is refused before the arch grammar, by the cell's field check)
            assert any(f"archs {shown(text)}" in p or f"arch {shown(text)}" in p for p in cell_problems), (
                text,
                cell_problems,
            )
        else:
            assert built == (Arch.parse(text),) and not cell_problems, (text, cell_problems)


def _cell(values_: dict):
    return frozen_cell(values_, matrix_path=FROZEN_MATRIX)


def _cell_problems(values_: dict) -> list[str]:
    try:
        _cell(values_)
    except UsageError as err:
        return [str(err)]
    return []


# ---------------------------------------------------------------- short sha, against fetch-apex.sh

SHA_CASES = [
    ("6424da3", True),
    ("6424da3b4faa6c8f062da4a48c424fff3f02d42d", True),
    ("abcdef0", True),
    ("6424da", False),
    ("6424da3b4faa6c8f062da4a48c424fff3f02d42d0", False),
    ("6424DA3", False),
    ("25.09", False),
    ("master", False),
    ("", False),
    ("6424da3\n", False),
    ("6424da3 ", False),
    ("٦٤٢٤da3", False),
    ("g6424da3", False),
    ("6424da3-x", False),
    ("abcdefg", False),
]


def _bash_function(name: str) -> str:
    found = re.search(rf"^{name}\(\) \{{.*\}}$", FETCH_APEX.read_text(), re.M)
    assert found, f"docker/fetch-apex.sh defines no one-line {name}()"
    return found.group(0)


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_fetch_apex_short_sha_rule_is_the_python_rule(locale: str) -> None:
    check = _bash_function("is_commit_sha")
    for text, expected in SHA_CASES:
        assert commit.is_commit_sha(text) is expected, text
        done = subprocess.run(
            ["bash", "-c", f'{check}\nis_commit_sha "$1"', "sh", text],
            env={"LC_ALL": locale, "PATH": "/usr/bin:/bin"},
            timeout=30,
            check=False,
        )
        assert (done.returncode == 0) is expected, (text, locale)


def test_dockerfile_full_commit_rule_is_the_python_rule() -> None:
    """The apex-build stage passes --apex-commit for a ref that is a full sha: the same rule, 40 digits."""
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    found = re.search(r"commit=\$\(printf '%s' \"\$APEX_REF\" \| grep -xE '([^']+)'", dockerfile)
    assert found, "docker/Dockerfile's apex-build stage no longer picks the full commit with grep -xE"
    for text, short in SHA_CASES:
        done = subprocess.run(
            ["grep", "-xE", found.group(1)],
            input=text,
            text=True,
            capture_output=True,
            env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"},
            timeout=30,
            check=False,
        )
        full = short and len(text) == commit.FULL_SHA_LEN
        assert (done.returncode == 0) is full, text


def test_short_ref() -> None:
    assert commit.short_ref("6424da3b4faa6c8f062da4a48c424fff3f02d42d") == "6424da3"
    assert commit.short_ref("25.09") == "25.09" and commit.short_ref("master") == "master"
    assert commit.short_ref("6424DA3B4FAA") == "6424DA3B4FAA"  # not a sha by the rule: kept as written


# ---------------------------------------------------------------- the Apex source tree, against fetch-apex.sh


def _trees(root: Path) -> list[tuple[Path, bool]]:
    def tree(name: str, *files: str, dirs: tuple[str, ...] = ()) -> Path:
        path = root / name
        path.mkdir()
        for d in dirs:
            (path / d).mkdir(parents=True)
        for f in files:
            (path / f).parent.mkdir(parents=True, exist_ok=True)
            (path / f).write_text("")
        return path

    return [
        (tree("good", "setup.py", "apex/__init__.py"), True),
        (
            tree("no-init", "setup.py", dirs=("apex",)),
            False,
        ),  # apex/ alone is no package: `import apex` fails
        (tree("no-setup", "apex/__init__.py"), False),
        (tree("setup-dir", "apex/__init__.py", dirs=("setup.py",)), False),
        (tree("empty"), False),
        (root / "missing", False),
        (tree("a file", "x").joinpath("x"), False),
    ]


def test_fetch_apex_source_tree_rule_is_the_python_rule(tmp_path: Path) -> None:
    check = _bash_function("is_apex_tree")
    for path, expected in _trees(tmp_path):
        try:
            apex_tree.check_apex_tree(path)
            python = True
        except ValueProblem:
            python = False
        done = subprocess.run(
            ["bash", "-c", f'{check}\nis_apex_tree "$1"', "sh", str(path)], timeout=30, check=False
        )
        assert python is expected and (done.returncode == 0) is expected, path


def test_every_caller_uses_the_one_tree_check(tmp_path: Path) -> None:
    """The builder's --apex-src, build.py image's context and the run loop's input check: one message."""
    from toolchain.image import buildkit_build

    bad = tmp_path / "tree"
    (bad / "apex").mkdir(parents=True)
    (bad / "setup.py").write_text("")
    messages = []
    for call in (
        lambda: build_inputs.check_apex_source(bad),
        lambda: buildkit_build.stage_context(tmp_path / "ctx", apex_src=bad),
    ):
        with pytest.raises(UsageError) as stop:
            call()
        messages.append(str(stop.value))
    assert (
        messages[0] == messages[1]
        and "apex/__init__.py" in messages[0]
        and f"--apex-src {bad}" in messages[0]
    )


# ---------------------------------------------------------------- extras: one grammar for matrix, plan, wheel


@pytest.mark.parametrize(
    "text", ["all", "xentropy", "XENTROPY", "APEX_XENTROPY", "fast_layer_norm", "xentropy_cuda"]
)
def test_matrix_and_wheel_take_the_same_extras(text: str) -> None:
    names = module_map.extra_names()
    flag = extra_flag(text, names)
    cell = _cell({"cuda": "13.0", "extras": text})
    assert flag in cell.apex_flags
    assert flag in build_inputs.parse_flags("APEX_CPP_EXT", text)
    if text == "all":
        assert flag == "APEX_ALL_CONTRIB_EXT" and cell.extras == ("all",)


def test_an_unknown_extra_names_the_nearest_and_its_flag() -> None:
    with pytest.raises(ValueProblem) as bad:
        extra_flag("xentropi", module_map.extra_names())
    assert "unknown contrib extension 'xentropi'" in bad.value.problem
    assert "did you mean 'xentropy'?" in bad.value.fix and "APEX_XENTROPY" in bad.value.fix
    with pytest.raises(UsageError, match="--extras: unknown contrib extension 'nope'; use some of"):
        build_inputs.parse_flags("none", "nope")


def test_wheel_extras_all_is_taken(tmp_path: Path) -> None:
    """`build.py wheel --extras all` passes the builder's checks of its own values (the first step)."""
    from tests.support import unpack_apex
    from toolchain.builder import request as build_request

    src = unpack_apex("6424da3b", tmp_path)
    request = build_request.parse(
        ["--apex-src", str(src), "--out", str(tmp_path / "out"), "--extras", "all", "--archs", "9.0"],
        "APEX_CPP_EXT APEX_CUDA_EXT",
    )
    inputs = build_inputs.resolve(request)
    assert inputs.flags == {"APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1", "APEX_ALL_CONTRIB_EXT": "1"}


# ---------------------------------------------------------------- the cell id


def test_cell_ids_of_real_cells_carry_their_record() -> None:
    cases = [
        {"cuda": "13.0"},
        {"cuda": "12.8", "archs": "8.0;9.0+PTX", "extras": "xentropy"},
        {"cuda": "13.0", "platform": "linux/arm64"},
        {"cuda": "12.8", "apex_ref": "25.04"},
    ]
    for case in cases:
        cell = _cell(case)
        made = cell.made_id
        assert made is not None and str(made) == cell.id, cell.id
        assert (made.torch, made.cuda, made.python, made.apex) == (
            cell.torch,
            cell.cuda,
            cell.python,
            commit.short_ref(cell.apex_ref),
        )
        assert made.variant == cell.variant and made.os.startswith(cell.os)


def test_explicit_tags_carry_no_cell_id() -> None:
    cell = _cell({"cuda": "13.0", "tag": "my-tag"})
    assert cell.id == "my-tag" and cell.made_id is None
    assert targets.for_target(cell, "verify-runtime").id == "my-tag"


def test_a_long_variant_goes_in_hashed() -> None:
    made = CellId.for_apex(
        "6424da3b4f", "2.11.0", "13.0", "3.12", "ubuntu24.04", "ext." + ".".join(["xentropy"] * 30)
    )
    assert re.fullmatch(r"v[0-9a-f]{10}", made.variant) and len(str(made)) <= TAG_MAX


def test_targets_without_apex_carry_their_id() -> None:
    cell = _cell({"cuda": "13.0", "gcc": "12", "os": "ubuntu24.04", "archs": "9.0;10.0"})
    built = targets.for_target(cell, "verify-runtime")
    tag = built.id
    assert cell.variant == "sm90_100-gcc12", cell.id
    assert tag == f"verify-runtime-torch{cell.torch}-cu13.0-py{cell.python}-ubuntu24.04-gcc12", (cell.id, tag)
    assert built.made_id is not None and str(built.made_id) == tag
    assert (built.made_id.apex, built.made_id.target) == (None, "verify-runtime")


# ---------------------------------------------------------------- the image layout, against docker/

_OPT_APEX = re.compile(r"/opt/apex(?![\w-])[^\s\"'`;)]*")


def _paths_in(text: str) -> set[str]:
    return {m.rstrip("/,.") for m in _OPT_APEX.findall(text)}  # a comment's path may end its clause


def test_every_opt_apex_path_in_docker_is_one_the_layout_names() -> None:
    named = {str(p) for p in layout.IMAGE.paths().values()}
    docker = REPO / "docker"
    used: dict[str, set[str]] = {}
    for path in [docker / "Dockerfile", *sorted(docker.glob("*.sh"))]:
        for found in _paths_in(path.read_text()):
            used.setdefault(found, set()).add(path.name)
    assert set(used) - named == set(), (
        f"paths docker/ uses that verify/domain/layout.py's IMAGE does not name: {used}"
    )
    # and every path the layout names is one the image really has (the Dockerfile writes or copies it)
    assert named - set(used) == set(), f"IMAGE names paths docker/ never writes: {named - set(used)}"


def test_the_layout_is_what_its_readers_use() -> None:
    from toolchain.builder import build_outputs, wheel_identity
    from toolchain.image import image_wheels, inspect_image
    from verify.layers import manifest

    assert manifest.DEFAULT_PATH == Path(str(layout.IMAGE.manifest))
    assert inspect_image.EMBEDDED["static_report"] == str(layout.IMAGE.static_report)
    assert image_wheels.APEX_DIR == str(layout.IMAGE.root) == "/opt/apex"
    assert build_outputs.MANIFEST_NAME == layout.IMAGE.manifest.name
    assert wheel_identity.VERIFY_FILES == (layout.IMAGE.static_report.name, layout.IMAGE.static_markdown.name)
    assert layout.ApexLayout(PurePosixPath("/out")).wheel_hashes == PurePosixPath("/out/inputs/wheels.sha256")


def test_frozen_facts_toolkit_archs_are_arches() -> None:
    """compat.toml's toolkit rows hold the `number` form of the one Arch value."""
    for toolkit in frozen_facts().toolkits:
        for text in toolkit.archs:
            assert Arch.parse(text).number == text
