"""toolchain/builder/build_env.py: the build's environment is composed in one place from what each step returns;
no step of the builder writes a shared env dict."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from tests.support import REPO
from toolchain.builder import apex_builder, apex_setup
from toolchain.builder.build_env import BuildEnv, EnvStep, path_first
from toolchain.builder.build_inputs import BuildInputs
from verify.domain.arch import parse_arch_list

BUILDER = REPO / "toolchain" / "builder"


def test_a_step_removes_then_sets() -> None:
    step = EnvStep.of("flags", {"APEX_CPP_EXT": "1"}, unsets=("APEX_CPP_EXT", "APEX_XENTROPY"))
    assert step.applied({"APEX_XENTROPY": "1", "APEX_CPP_EXT": "0", "HOME": "/h"}) == {
        "HOME": "/h",
        "APEX_CPP_EXT": "1",
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.step = "other"  # type: ignore[misc]


def test_steps_compose_in_order_and_leave_the_base_alone() -> None:
    base = {"PATH": "/usr/bin", "MAX_JOBS": "99"}
    env = BuildEnv.of(base).plus(EnvStep.of("venv", {"PATH": path_first(base, "/venv/bin")}))
    env = env.plus(
        EnvStep.of("cuda", {"PATH": path_first(env.vars(), "/cuda/bin")}),
        EnvStep.of("parallelism", {"MAX_JOBS": "4"}),
    )
    assert env.vars() == {"PATH": "/cuda/bin:/venv/bin:/usr/bin", "MAX_JOBS": "4"}
    env.vars()["PATH"] = "changed"  # a fresh dict each time
    assert env.vars()["PATH"] == "/cuda/bin:/venv/bin:/usr/bin" and base == {
        "PATH": "/usr/bin",
        "MAX_JOBS": "99",
    }
    assert [s.step for s in env.steps] == ["venv", "cuda", "parallelism"]


def _inputs(tmp_path: Path, style_env: bool, archs: str | None) -> BuildInputs:
    src = tmp_path / "apex"
    (src / "apex").mkdir(parents=True)
    (src / "apex" / "__init__.py").write_text("")
    (src / "setup.py").write_text('import sys\nif "--cpp_ext" in sys.argv:\n    pass\n')
    setup = apex_setup.read(src)
    setup = dataclasses.replace(setup, style=apex_setup.ENV if style_env else apex_setup.ARGV)
    return BuildInputs.of(src, {"APEX_CPP_EXT": "1"}, parse_arch_list(archs) if archs else None, setup)


def test_the_flags_step_keeps_only_what_was_asked(tmp_path: Path) -> None:
    stray = {"APEX_XENTROPY": "1", "TORCH_CUDA_ARCH_LIST": "7.0", "PATH": "/bin"}
    env_style = apex_builder._flag_env(_inputs(tmp_path / "a", True, "8.0;9.0+PTX"))
    assert env_style.applied(stray) == {
        "PATH": "/bin",
        "APEX_CPP_EXT": "1",
        "TORCH_CUDA_ARCH_LIST": "8.0;9.0+PTX",
    }
    argv_style = apex_builder._flag_env(_inputs(tmp_path / "b", False, None))
    assert argv_style.applied(stray) == {"PATH": "/bin"}  # argv switches carry the flags; no archs: none set


def _writes_a_dict_named_env(tree: ast.AST) -> list[int]:
    """Line numbers where code assigns into, updates or pops from a variable named env."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            lines += [node.lineno for t in targets if isinstance(t, ast.Subscript) and _is_env(t.value)]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and _is_env(node.func.value)
            and node.func.attr in ("update", "pop", "setdefault", "clear", "popitem")
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.Delete):
            lines += [node.lineno for t in node.targets if isinstance(t, ast.Subscript) and _is_env(t.value)]
    return sorted(lines)


def _is_env(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "env"


@pytest.mark.parametrize("path", sorted(BUILDER.glob("*.py")), ids=lambda p: p.name)
def test_no_builder_step_writes_a_shared_env(path: Path) -> None:
    # unit_runner.py is its own process (each nvcc unit): it writes its own copy of os.environ
    allowed = {"unit_runner.py"}
    found = _writes_a_dict_named_env(ast.parse(path.read_text()))
    assert path.name in allowed or not found, (
        f"{path.name} lines {found}: return an EnvStep instead (build_env.py)"
    )


def test_the_scan_finds_a_write() -> None:
    assert _writes_a_dict_named_env(
        ast.parse("env['A'] = '1'\nenv.update(x)\nenv.pop('B', None)\ndel env['C']\n")
    ) == [1, 2, 3, 4]
