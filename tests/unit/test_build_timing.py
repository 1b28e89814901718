"""The builder's per-unit times and lower bound, end to end on this CPU machine: a real setup.py that
compiles with torch's cpp_extension and ninja, one build directory per extension as Apex's setup.py makes
(its BuildExtensionSeparateDir), so the manifest's units come from real .ninja_log files."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.support import REPO
from toolchain.builder import apex_builder, build_timing, parallelism
from toolchain.builder import request as build_request
from toolchain.builder.build_inputs import BuildInputs
from toolchain.builder.build_tools import BuildTools
from verify.runtime import exit_codes

pytestmark = pytest.mark.skipif(
    shutil.which("ninja") is None or shutil.which("c++") is None, reason="ninja and a C++ compiler are needed"
)

# Apex's own shape, cut down: CppExtension through BuildExtension (ninja), APEX_PARALLEL_BUILD read the
# way Apex reads it, and each extension compiled into build/temp.*/<name>/ like its separate-dir patch.
SETUP = """
import os, sys, threading
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ENV_TO_FLAG = {
    "APEX_CPP_EXT": "--cpp_ext",
}

def has_flag(flag, env_var):
    return flag in sys.argv or os.environ.get(env_var, "0") == "1"

ext_modules = []
if has_flag("--cpp_ext", "APEX_CPP_EXT"):
    ext_modules.append(CppExtension("apex_C", ["csrc/a.cpp", "csrc/b.cpp"]))
    ext_modules.append(CppExtension("syncbn", ["csrc/s.cpp"]))
parallel = int(os.environ["APEX_PARALLEL_BUILD"]) if os.environ.get("APEX_PARALLEL_BUILD") else None

class BuildExtensionSeparateDir(BuildExtension):
    lock, names = threading.Lock(), {}

    def finalize_options(self):
        if parallel is not None:
            self.parallel = parallel
        super().finalize_options()

    def build_extension(self, ext):
        with self.lock:
            if not getattr(self.compiler, "_separate", False):
                original = self.compiler.compile
                def compile_new(*args, **kwargs):
                    name = self.names[threading.current_thread().ident]
                    return original(*args, **{**kwargs, "output_dir": os.path.join(kwargs["output_dir"], name)})
                self.compiler.compile, self.compiler._separate = compile_new, True
        self.names[threading.current_thread().ident] = ext.name
        return super().build_extension(ext)

setup(name="tinyapex", version="0.1", packages=["apex"], ext_modules=ext_modules,
      cmdclass={"build_ext": BuildExtensionSeparateDir})
"""

MODULE = """#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "%s", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_%s(void) { return PyModule_Create(&m); }
"""


def make_tree(root: Path) -> Path:
    (root / "apex").mkdir(parents=True)
    (root / "apex" / "__init__.py").write_text("")
    (root / "csrc").mkdir()
    (root / "csrc" / "a.cpp").write_text(MODULE % ("apex_C", "apex_C"))
    (root / "csrc" / "b.cpp").write_text("int helper_b() { return 2; }\n")
    (root / "csrc" / "s.cpp").write_text(MODULE % ("syncbn", "syncbn"))
    (root / "setup.py").write_text(SETUP)
    return root


@pytest.mark.slow
def test_a_ninja_build_records_each_unit_and_prints_wall_over_the_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    src = make_tree(tmp_path / "src")
    out = tmp_path / "out"
    request = build_request.parse(
        ["--apex-src", str(src), "--out", str(out), "--no-ccache", "--memory-gib", "2"]
    )
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    for knob in ("MAX_JOBS", "APEX_PARALLEL_BUILD", "NVCC_APPEND_FLAGS"):
        env.pop(knob, None)
    versions = {"torch": "cpu", "python": "3", "nvcc_path": "nvcc"}
    code = apex_builder.build_and_gate(
        request,
        BuildInputs.of(src, {"APEX_CPP_EXT": "1"}),
        BuildTools(versions),
        env,
        dt.datetime.now(dt.timezone.utc),
    )
    assert code == exit_codes.OK
    manifest = json.loads((out / "build-manifest.json").read_text())
    timing = manifest["build"]["timing"]
    assert {(u["extension"], Path(u["output"]).name) for u in timing["units"]} == {
        ("apex_C", "a.o"),
        ("apex_C", "b.o"),
        ("syncbn", "s.o"),
    }
    walls = [u["wall_s"] for u in timing["units"]]
    assert walls == sorted(walls, reverse=True) and all(w > 0 for w in walls)
    assert min(u["start_s"] for u in timing["units"]) == 0.0  # seconds since the first unit started
    assert set(timing["links_s"]) == {"apex_C", "syncbn"}
    bound, wall = timing["lower_bound"], manifest["build"]["wall_s"]
    assert 0 < bound["lower_bound_s"] <= wall, "a lower bound is never above the wall it bounds"
    assert bound["lower_bound_s"] == max(bound["chain_s"], bound["work_s"])
    assert "CPU seconds" in bound["work_from"] and manifest["build"]["cpu_s"] > 0
    assert timing["memory"]["gib_per_unit_at_peak"] > 0
    # pip and setup.py before the first unit, links and packing after the last: inside the wall
    assert 0 < timing["before_first_unit_s"] < wall and 0 < timing["after_last_unit_s"] < wall
    # --memory-gib sized the plan, and the reason says so
    assert "2.0 GiB available (--memory-gib)" in manifest["parallelism"]["reason"]
    printed = capsys.readouterr().out
    pip_wall = manifest["build"]["pip_wall_s"]
    assert 0 < pip_wall <= wall, "pip wheel's wall is part of the whole command's"
    # printed: the whole command's wall at the end; the manifests keep the wall at their writing (the
    # copy inside the wheel and the one beside it agree, which `build.py index` checks)
    line = re.search(
        rf"wall ([0-9.]+) s \(pip wheel {pip_wall} s\) / lower bound {bound['lower_bound_s']} s = ([0-9.]+)",
        printed,
    )
    assert line, printed
    assert float(line.group(1)) >= wall
    assert float(line.group(2)) == pytest.approx(float(line.group(1)) / bound["lower_bound_s"], abs=0.01)


def test_a_measured_cold_figure_sizes_the_next_plan_and_a_warm_one_does_not(tmp_path: Path) -> None:
    path = tmp_path / "build-manifest.json"
    cold = {
        "build": {
            "timing": {"memory": {"gib_per_nvcc_thread": 0.4}},
            "ccache": {"stats": {"direct_cache_hit": 0, "preprocessed_cache_hit": 0, "cache_miss": 37}},
        }
    }
    path.write_text(json.dumps(cold))
    value, source = build_timing.measured_gib_per_thread(path)
    assert value == 0.5 and "measured by the cold build" in source
    plan = parallelism.plan(
        parallelism.HostResources(16, None, 125, "MemAvailable"),
        n_archs=5,
        n_extensions=12,
        env={},
        gib_per_thread=value,
        gib_from=source,
    )
    # 37 units x (1.0 + 3 x 0.5) GiB = 92.5 fits 100 GiB, where the constant 0.75 allowed 2 threads
    assert plan.nvcc_threads == 3 and "measured by the cold build" in plan.reason
    warm = json.loads(path.read_text())
    warm["build"]["ccache"]["stats"] = {"direct_cache_hit": 37, "cache_miss": 0}
    path.write_text(json.dumps(warm))
    assert build_timing.measured_gib_per_thread(path) == (None, "")
    path.write_text("{not json")
    assert build_timing.measured_gib_per_thread(path) == (None, "")
    assert build_timing.measured_gib_per_thread(tmp_path / "absent.json") == (None, "")


@pytest.mark.parametrize("value", ["0", "0.5", "nan"])
def test_a_memory_cap_below_one_gib_is_a_usage_error(tmp_path: Path, value: str) -> None:
    import subprocess

    src = make_tree(tmp_path / "src")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolchain.builder.apex_builder",
            "--apex-src",
            str(src),
            "--out",
            str(tmp_path / "o"),
            "--flags",
            "APEX_CPP_EXT",
            "--memory-gib",
            value,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == exit_codes.USAGE, result.stderr
    assert "--memory-gib" in result.stderr and "must be 1 or more" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_stored_wheel_is_packed_without_compression(tmp_path: Path) -> None:
    """--wheel-compression stored reaches bdist_wheel through pip's config settings (PEP 517, as Apex from
    23.07 builds): every member of the wheel is ZIP_STORED, and the manifest records the option."""
    import zipfile

    src = make_tree(tmp_path / "src")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools", "wheel"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    out = tmp_path / "out"
    request = build_request.parse(
        ["--apex-src", str(src), "--out", str(out), "--no-ccache", "--wheel-compression", "stored"]
    )
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    versions = {"torch": "cpu", "python": "3", "nvcc_path": "nvcc"}
    code = apex_builder.build_and_gate(
        request,
        BuildInputs.of(src, {"APEX_CPP_EXT": "1"}),
        BuildTools(versions),
        env,
        dt.datetime.now(dt.timezone.utc),
    )
    assert code == exit_codes.OK
    (wheel,) = out.glob("*.whl")
    assert {m.compress_type for m in zipfile.ZipFile(wheel).infolist()} == {zipfile.ZIP_STORED}
    manifest = json.loads((out / "build-manifest.json").read_text())
    assert "--config-settings=--build-option=--compression=stored" in manifest["flag_style"]["pip_options"]


def test_the_naive_recipe_reads_the_arch_list_it_is_compared_at(tmp_path: Path) -> None:
    """--naive once dropped --archs, so on the GPU host torch compiled 9.0+PTX where the comparison was for
    five archs (reports/h200-2026-12-01-buildspeed-i16): --archs is now read, and checked, under --naive too."""
    import subprocess

    src = make_tree(tmp_path / "src")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolchain.builder.apex_builder",
            "--apex-src",
            str(src),
            "--out",
            str(tmp_path / "o"),
            "--flags",
            "APEX_CPP_EXT",
            "--naive",
            "--archs",
            "9.x",
        ],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == exit_codes.USAGE, result.stderr
    assert "--archs: '9.x' is not a compute capability" in result.stderr and "Traceback" not in result.stderr
