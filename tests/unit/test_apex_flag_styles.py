"""Both Apex flag styles, on the real upstream trees: APEX_* variables (HEAD 6424da3b, from tag 25.09) and
setup.py argv switches (tag 25.04, and every tag before 25.09), plus real pip builds of setup.py files in
each shape. The Apex archives come from tests/support.py's APEX_FIXTURES; without them those tests skip.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, frozen_facts, unpack_apex
from tests.unit.test_apex_builder import build, make_project, run_builder
from toolchain.builder import apex_setup, build_inputs, build_outputs, pip_wheel
from toolchain.errors import ToolchainError
from verify.layers import module_map
from verify.runtime import exit_codes

CORE = {"APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1"}


def _tree(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    return unpack_apex(name, tmp_path_factory.mktemp(f"apex-{name}"))


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tree(tmp_path_factory, "6424da3b")


@pytest.fixture(scope="module")
def tag2504(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tree(tmp_path_factory, "25.04")


# ---------------------------------------------------------------- detection on the real trees


def test_head_reads_apex_variables(head: Path) -> None:
    setup = apex_setup.read(head)
    assert setup.style == apex_setup.ENV and "defines ENV_TO_FLAG" in setup.evidence
    assert setup.parallel == apex_setup.ENV  # APEX_PARALLEL_BUILD
    assert {"APEX_CPP_EXT", "APEX_CUDA_EXT", "APEX_XENTROPY", "APEX_NCCL_ALLOCATOR"} <= set(setup.env_vars)
    # the module map's flag -> switch rule is setup.py's own ENV_TO_FLAG, pair by pair
    text = (head / "setup.py").read_text()
    for var in setup.env_vars:
        assert f'"{var}": "{module_map.switch_for(var)}"' in text
    assert apex_setup.pip_options(setup, ["--cpp_ext", "--cuda_ext"], 12) == []  # the variables carry it all


def test_tag_2504_reads_argv_switches(tag2504: Path) -> None:
    setup = apex_setup.read(tag2504)
    assert setup.style == apex_setup.ARGV and setup.env_vars == ()
    assert setup.evidence.endswith("setup.py line 114 reads '--cpp_ext'/'--cuda_ext' from sys.argv")
    assert setup.parallel == apex_setup.ARGV  # `--parallel N` on its argv, no APEX_PARALLEL_BUILD
    assert setup.speaks("APEX_FMHA", "--fmha") and setup.speaks(
        "APEX_GPU_DIRECT_STORAGE", "--gpu_direct_storage"
    )


@pytest.mark.parametrize("tree", ["head", "tag2504"])
def test_module_map_agrees_with_each_setup_py(tree: str, request: pytest.FixtureRequest) -> None:
    """Per flag, the modules each era builds: the map's since/until against the real setup.py."""
    src = request.getfixturevalue(tree)
    setup = apex_setup.read(src)
    for m in module_map.modules():
        at_ref = m.until is None if tree == "head" else module_map.in_tag(m.name, "25.04")
        assert (m.name in setup.modules(m.switch)) == at_ref, m.name
    expected, absent = build_inputs.expected_modules(setup, CORE)
    assert len(expected) == 12 and absent == [] and "fused_rotary_positional_embedding" in expected


def test_legacy_apis_of_each_tree_are_named(head: Path, tag2504: Path, tmp_path: Path) -> None:
    """verify's identity layer on the two real Apex packages (file reads only, no GPU)."""

    def legacy(tree: Path) -> dict[str, bool]:
        code = "import json; from verify.layers import identity; print(json.dumps(identity.locate()['legacy_apis']))"
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{REPO}"},
            cwd=tmp_path,
        )
        return json.loads(done.stdout)

    old = legacy(tag2504)
    assert (
        old["apex.amp"]
        and old["apex.parallel"]
        and old["apex.contrib.fmha"]
        and old["apex.contrib.multihead_attn"]
    )
    assert old["apex.contrib.gpu_direct_storage"] and old["apex.transformer"]
    assert not any(legacy(head).values())


# ---------------------------------------------------------------- refusals before any compile


def test_hardcoded_compute_70_refused_for_nvcc_13_only(head: Path, tag2504: Path) -> None:
    facts = frozen_facts()
    nvcc13, nvcc128 = set(facts.toolkit("13.0").archs), set(facts.toolkit("12.8").archs)
    old = apex_setup.read(tag2504)
    switches = apex_setup.flag_switches(old, CORE)
    with pytest.raises(ToolchainError) as stop:
        apex_setup.check_archs(old, switches, nvcc13, "13.0", tag2504)
    assert stop.value.exit_code == exit_codes.USAGE
    assert "setup.py line 361 hard-codes -gencode arch=compute_70 for --cuda_ext" in str(stop.value)
    assert "Unsupported gpu architecture 'compute_70'" in str(stop.value)
    apex_setup.check_archs(old, switches, nvcc128, "12.8", tag2504)  # 12.8 still compiles sm_70
    apex_setup.check_archs(old, ["--cpp_ext"], nvcc13, "13.0", tag2504)  # C++ only: no nvcc at all
    apex_setup.check_archs(apex_setup.read(head), switches, nvcc13, "13.0", head)  # upstream dropped them


def test_builder_refuses_flags_a_tree_lacks(head: Path, tag2504: Path, tmp_path: Path) -> None:
    result = run_builder(
        "--apex-src",
        str(head),
        "--out",
        str(tmp_path / "o"),
        "--archs",
        "9.0",
        "--flags",
        ",".join(CORE),
        "--extras",
        "fmha",
    )
    assert result.returncode == exit_codes.USAGE and "Traceback" not in result.stderr
    assert "APEX_FMHA (--fmha)" in result.stderr and "ENV_TO_FLAG has no APEX_FMHA" in result.stderr
    assert "removed in 526871a2" in result.stderr
    apex_setup.check_flags(apex_setup.read(tag2504), {"APEX_FMHA": "1"}, tag2504)  # 25.04 still has it


def test_unknown_flag_style_is_named(tmp_path: Path) -> None:
    src = make_project(tmp_path / "src", style="none")
    result = run_builder("--apex-src", str(src), "--out", str(tmp_path / "o"), "--flags", "none")
    assert result.returncode == exit_codes.USAGE and "Traceback" not in result.stderr
    assert "has no ENV_TO_FLAG and never tests '--cpp_ext' or '--cuda_ext' in sys.argv" in result.stderr
    assert "argv switches, tags 22.03-25.08" in result.stderr


# ---------------------------------------------------------------- passing the switches


def test_argv_pip_command_has_one_config_setting_per_switch(tag2504: Path, tmp_path: Path) -> None:
    setup = apex_setup.read(tag2504)
    switches = apex_setup.flag_switches(setup, {**CORE, "APEX_XENTROPY": "1"})
    assert switches == ["--cpp_ext", "--cuda_ext", "--xentropy"]
    cmd = pip_wheel.pip_wheel_command(tag2504, tmp_path, apex_setup.pip_options(setup, switches, 8))
    settings = [arg.split("=", 1)[1] for arg in cmd if arg.startswith("--config-settings")]
    assert settings == [f"--build-option={s}" for s in [*switches, "--parallel", "8"]]
    # never several switches in one setting (the shape of Apex #1763, which builds nothing)
    assert all(" " not in s for s in settings) and "--use-pep517" in cmd
    assert cmd[cmd.index(str(tag2504)) + 1 :] == ["-w", str(tmp_path)]


def test_all_contrib_becomes_every_switch_of_the_argv_tree(tag2504: Path) -> None:
    switches = apex_setup.flag_switches(apex_setup.read(tag2504), {"APEX_ALL_CONTRIB_EXT": "1"})
    assert {"--fmha", "--fast_multihead_attn", "--xentropy", "--deprecated_fused_adam"} <= set(switches)
    assert "--cuda_ext" not in switches and "--all_contrib_ext" not in switches


def test_real_pip_forwards_every_argv_switch(tmp_path: Path) -> None:
    """setup.py sees each switch on its argv only if pip and setuptools forward every --config-settings."""
    code, out = build(
        tmp_path, {"APEX_CPP_EXT": "1", "APEX_XENTROPY": "1"}, style="argv", env={"APEX_PARALLEL_BUILD": "2"}
    )
    assert code == exit_codes.OK
    manifest = json.loads((out / "build-manifest.json").read_text())
    assert manifest["built_modules"] == ["apex._probe", "apex_C", "xentropy_cuda"]
    assert manifest["flag_style"]["style"] == "argv"
    assert manifest["flag_style"]["pip_options"] == [
        "--use-pep517",
        "--config-settings=--build-option=--cpp_ext",
        "--config-settings=--build-option=--xentropy",
        "--config-settings=--build-option=--parallel",
        "--config-settings=--build-option=2",
    ]
    assert "tiny setup.py: --parallel 2" in (out / "apex-build.log").read_text()


def test_argv_build_with_nothing_built_names_the_cause_once(
    tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    code, out = build(tmp_path, {"APEX_CUDA_EXT": "1"}, style="argv")
    assert code == exit_codes.FAILED
    captured = capfd.readouterr()
    err = captured.err
    assert "none of the 1 expected modules is in the wheel: setup.py at this ref reads argv switches" in err
    assert (
        "the builder passed --cuda_ext as pip --config-settings=--build-option=..., one setting per switch"
        in err
    )
    assert "- expected module amp_C (flag APEX_CUDA_EXT) is not in the wheel" in err
    lines = [line for line in (captured.out + err).splitlines() if line.startswith("[apex-builder]")]
    assert len(lines) == len(set(lines)), "a builder line was printed twice"


def test_env_build_prints_each_missing_module_once(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    code, _ = build(tmp_path, CORE)
    assert code == exit_codes.FAILED
    captured = capfd.readouterr()
    assert "2 of 3 expected modules are not in the wheel" in captured.err
    lines = [line for line in (captured.out + captured.err).splitlines() if line.startswith("[apex-builder]")]
    assert len(lines) == len(set(lines)) and sum("expected module amp_C" in line for line in lines) == 1


def test_cause_when_setup_py_compiled_nothing() -> None:
    log = ["$ python -m pip wheel ... --config-settings=--build-option=--cpp_ext", "running bdist_wheel"]
    cause = build_outputs.nothing_built_cause(
        "argv", "setup.py line 114 reads '--cpp_ext'", "--cpp_ext as ...", log, "b.log"
    )
    assert cause.startswith("setup.py at this ref reads argv switches (setup.py line 114")
    assert "setup.py compiled nothing" in cause and "the switches never reached it" in cause
    assert "the pip command is log line 1" in cause


SETUP_WITH_ARCH_LOOP = """\
import sys
if "--cuda_ext" in sys.argv:
    for arch in [70, 80]:
        cc_flag += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    if bare_metal_version < Version("13.0"):
        cc_flag += ["-gencode", "arch=compute_60,code=sm_60"]
    ext_modules.append(CUDAExtension(name="amp_C", sources=["csrc/amp_C_frontend.cpp"]))
"""


def test_archs_a_loop_hard_codes_count_and_those_under_a_version_guard_do_not(tmp_path: Path) -> None:
    setup = apex_setup.parse(SETUP_WITH_ARCH_LOOP, tmp_path / "setup.py")
    assert setup.style == apex_setup.ARGV and setup.modules("--cuda_ext") == ("amp_C",)
    # the loop's 7.0 is hard-coded (line 4 names it); 6.0 sits under `if ... < ...`, for older toolkits
    assert setup.dropped_archs("--cuda_ext", {"7.5", "8.0", "9.0"}) == [("7.0", 4)]
    assert setup.dropped_archs("--cuda_ext", {"5.0", "8.0"}) == []


def test_every_flag_after_all_contrib_is_still_checked(tmp_path: Path) -> None:
    setup = apex_setup.parse("ENV_TO_FLAG = {\n    'APEX_CPP_EXT': '--cpp_ext',\n}\n", tmp_path / "setup.py")
    with pytest.raises(ToolchainError) as stop:
        apex_setup.check_flags(setup, {"APEX_ALL_CONTRIB_EXT": "1", "APEX_FMHA": "1"}, tmp_path)
    assert "APEX_FMHA (--fmha)" in str(stop.value) and "ENV_TO_FLAG has no APEX_FMHA" in str(stop.value)
    assert setup.evidence.endswith("setup.py line 1 defines ENV_TO_FLAG (APEX_* variables)")
    # a flag read from the command line is a new string: its history is still found and named
    asked = "".join(["APEX_", "FMHA"])
    with pytest.raises(ToolchainError) as again:
        apex_setup.check_flags(setup, {asked: "1"}, tmp_path)
    assert re.search(
        r"has no APEX_FMHA \(fmhalib: last in tag 25\.09, removed in [^;]*\); drop it", str(again.value)
    )


def test_an_argv_setup_py_that_reads_parallel_gets_it_from_two(tmp_path: Path) -> None:
    text = (
        "import sys\n"
        'if "--parallel" in sys.argv:\n'
        "    pass\n"
        'if "--cpp_ext" in sys.argv:\n'
        '    ext_modules.append(CppExtension("apex_C", []))\n'
        'if sys.platform == "win32":\n'
        '    ext_modules.append(CppExtension("win_only", []))\n'
    )
    setup = apex_setup.parse(text, tmp_path / "setup.py")
    assert (setup.style, setup.parallel) == (apex_setup.ARGV, apex_setup.ARGV)
    assert [(b.switches, b.line, b.modules) for b in setup.blocks] == [(("--cpp_ext",), 4, ("apex_C",))]
    assert apex_setup.pip_options(setup, ["--cpp_ext"], 2)[-2:] == [
        "--config-settings=--build-option=--parallel",
        "--config-settings=--build-option=2",
    ]
    assert "--config-settings=--build-option=--parallel" not in apex_setup.pip_options(
        setup, ["--cpp_ext"], 1
    )


def test_an_env_setup_py_asked_for_a_stored_wheel_gets_pep517_and_the_setting(tmp_path: Path) -> None:
    setup = apex_setup.parse("ENV_TO_FLAG = {\n    'APEX_CPP_EXT': '--cpp_ext',\n}\n", tmp_path / "setup.py")
    assert apex_setup.pip_options(setup, ["--cpp_ext"], 4, "stored") == [
        "--use-pep517",
        "--config-settings=--build-option=--compression=stored",
    ]


# ---------------------------------------------------------------- reading setup.py's text: each rule's edges

CPP_BLOCK = 'if "--cpp_ext" in sys.argv:\n    ext_modules.append(CppExtension("apex_C", []))\n'


@pytest.mark.parametrize(
    ("text", "blocks"),
    [
        pytest.param(CPP_BLOCK, [(("--cpp_ext",), 1, ("apex_C",))], id="the-first-line-is-an-if"),
        pytest.param(
            'import sys\nif "--cpp_ext" in sys.argv: ext_modules.append(CppExtension("apex_C", []))\n',
            [(("--cpp_ext",), 2, ("apex_C",))],
            id="the-last-line-is-a-one-line-if",
        ),
        pytest.param(
            'import sys\nif "--cpp_ext" in sys.argv:\n\tsys.argv.remove("--cpp_ext")\n'
            '\text_modules.append(CppExtension("apex_C", []))\nsetup()\n',
            [(("--cpp_ext",), 2, ("apex_C",))],
            id="a-tab-indented-body",
        ),
        pytest.param(
            'import sys\nif "--cpp_ext" in sys.argv:\n    sys.argv.remove("--cpp_ext")\n#TODO keep\n\n'
            '    ext_modules.append(CppExtension("apex_C", []))\nelse:\n'
            '    ext_modules.append(CppExtension(name="fallback_C"))\n'
            'ext_modules.append(CppExtension("after_C", []))\n',
            [(("--cpp_ext",), 2, ("apex_C", "fallback_C"))],
            id="comments-blanks-and-else-belong-to-the-block-the-next-statement-does-not",
        ),
        pytest.param(
            'if "--parallel" in sys.argv:\n    pass\nif sys.platform == "win32":\n    x = 1\n' + CPP_BLOCK,
            [(("--cpp_ext",), 5, ("apex_C",))],
            id="an-if-of-no-switch-and-the-parallel-switch-are-no-blocks",
        ),
        pytest.param(
            "x = 0\n" * 300 + CPP_BLOCK,
            [(("--cpp_ext",), 301, ("apex_C",))],
            id="a-block-that-runs-to-the-end-of-a-long-file",
        ),
    ],
)
def test_the_top_level_if_blocks_of_a_setup_py(text: str, blocks: list[tuple], tmp_path: Path) -> None:
    setup = apex_setup.parse(text, tmp_path / "setup.py")
    assert [(b.switches, b.line, b.modules) for b in setup.blocks] == blocks


GUARDS = 'import sys\nif "--cuda_ext" in sys.argv:\n'


@pytest.mark.parametrize(
    ("body", "dropped"),
    [
        pytest.param(
            '    if bare_metal_version < Version("13.0"):\n        cc_flag += ["-gencode",\n'
            '                    "arch=compute_60,code=sm_60"]\n',
            [],
            id="a-guard-two-lines-up-over-a-continuation-line",
        ),
        pytest.param(
            '    if bare_metal_version < Version("13.0"):\n        cc_flag.append("-DOLD")\n\n'
            '        cc_flag += ["-gencode", "arch=compute_60,code=sm_60"]\n',
            [],
            id="a-guard-above-a-sibling-and-a-blank-line",
        ),
        pytest.param(
            '    if bare_metal_version >= Version("13.0"):\n        pass\n    else:\n'
            '        cc_flag += ["-gencode", "arch=compute_60,code=sm_60"]\n',
            [],
            id="the-else-of-a-version-test",
        ),
        pytest.param(
            '    if bare_metal_version < Version("11.0"):\n        cc_flag.append("-DOLD")\n'
            '    cc_flag += ["-gencode", "arch=compute_60,code=sm_60"]\n',
            [("6.0", 5)],
            id="a-closed-guard-above-does-not-cover-the-line",
        ),
        pytest.param(
            '    if torch.cuda.is_available():\n        cc_flag += ["-gencode", "arch=compute_60,code=sm_60"]\n',
            [("6.0", 4)],
            id="an-if-without-a-less-than-is-no-guard",
        ),
    ],
)
def test_which_hard_coded_archs_a_version_guard_covers(body: str, dropped: list, tmp_path: Path) -> None:
    setup = apex_setup.parse(GUARDS + body, tmp_path / "setup.py")
    assert setup.dropped_archs("--cuda_ext", {"7.5", "8.0"}) == dropped


@pytest.mark.parametrize(
    ("supported", "dropped"),
    [({"6.0", "8.0"}, []), ({"5.0", "8.0"}, []), ({"7.0", "8.0"}, [("6.0", 3)])],
    ids=[
        "its-oldest-is-the-hard-coded-arch",
        "older-than-the-hard-coded-arch",
        "newer-than-the-hard-coded-arch",
    ],
)
def test_a_hard_coded_arch_is_dropped_only_below_the_oldest_nvcc_compiles(
    supported: set[str], dropped: list, tmp_path: Path
) -> None:
    text = GUARDS + '    cc_flag += ["-gencode", "arch=compute_60,code=sm_60"]\n'
    assert apex_setup.parse(text, tmp_path / "setup.py").dropped_archs("--cuda_ext", supported) == dropped


def test_the_evidence_names_the_line_of_env_to_flag(head: Path) -> None:
    assert apex_setup.read(head).evidence.endswith("setup.py line 24 defines ENV_TO_FLAG (APEX_* variables)")


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("ENV_TO_FLAG = {\n    'APEX_CPP_EXT': '--cpp_ext',\n}\n", "ENV_TO_FLAG has no APEX_XENTROPY"),
        ("import sys\n" + CPP_BLOCK, "no block tests '--xentropy' in sys.argv"),
        (
            "from setuptools import setup\n"
            + CPP_BLOCK.replace('"--cpp_ext" in sys.argv', "has_flag('--cpp_ext')"),
            "no block tests '--xentropy' in sys.argv",
        ),
    ],
    ids=["env", "argv", "unknown"],
)
def test_a_refused_flag_says_what_each_style_lacks(text: str, spoken: str, tmp_path: Path) -> None:
    setup = apex_setup.parse(text, tmp_path / "setup.py")
    with pytest.raises(ToolchainError) as stop:
        apex_setup.check_flags(setup, {"APEX_CPP_EXT": "1", "APEX_XENTROPY": "1"}, tmp_path)
    assert f"{apex_setup.describe(setup)} and {spoken}; drop it" in str(stop.value)


def test_all_contrib_never_passes_a_switch_of_its_own(tmp_path: Path) -> None:
    text = (
        "import sys\n" + CPP_BLOCK + CPP_BLOCK.replace("cpp_ext", "all_contrib_ext").replace("apex_C", "x_C")
    )
    text += CPP_BLOCK.replace("cpp_ext", "xentropy").replace("apex_C", "xentropy_cuda")
    setup = apex_setup.parse(text, tmp_path / "setup.py")
    assert setup.speaks("APEX_ALL_CONTRIB_EXT", "--all_contrib_ext")
    assert apex_setup.flag_switches(setup, {"APEX_ALL_CONTRIB_EXT": "1"}) == ["--xentropy"]


ENV_SETUP = "ENV_TO_FLAG = {\n    'APEX_CPP_EXT': '--cpp_ext',\n}\nAPEX_PARALLEL_BUILD = 1\n"
ARGV_SETUP = "import sys\n" + CPP_BLOCK
ARGV_PARALLEL = ARGV_SETUP + 'if "--parallel" in sys.argv:\n    pass\n'
PEP517, CPP = "--use-pep517", "--config-settings=--build-option=--cpp_ext"
PARALLEL = ["--config-settings=--build-option=--parallel", "--config-settings=--build-option=2"]
STORED = "--config-settings=--build-option=--compression=stored"


@pytest.mark.parametrize(
    ("text", "parallel", "compression", "options"),
    [
        (ENV_SETUP, 2, "deflated", []),
        (ENV_SETUP, 2, "stored", [PEP517, STORED]),
        (ARGV_SETUP, 2, "deflated", [PEP517, CPP]),  # setup.py takes no --parallel
        (ARGV_SETUP, 2, "stored", [PEP517, CPP, STORED]),
        (ARGV_PARALLEL, 2, "deflated", [PEP517, CPP, *PARALLEL]),
        (ARGV_PARALLEL, 1, "deflated", [PEP517, CPP]),
        (ARGV_PARALLEL, 0, "deflated", [PEP517, CPP]),
    ],
    ids=["env", "env-stored", "argv", "argv-stored", "argv-parallel-2", "argv-parallel-1", "argv-parallel-0"],
)
def test_pip_options_per_style_parallel_and_compression(
    text: str, parallel: int, compression: str, options: list[str], tmp_path: Path
) -> None:
    setup = apex_setup.parse(text, tmp_path / "setup.py")
    assert apex_setup.pip_options(setup, ["--cpp_ext"], parallel, compression) == options
    # the command line's value is a new string, not the literal: compared by value
    fresh = "".join(compression)
    assert apex_setup.pip_options(setup, ["--cpp_ext"], parallel, fresh) == options
