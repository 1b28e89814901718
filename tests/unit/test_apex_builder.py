"""The Apex builder's checks, gate and manifest, on real inputs.

A CPU machine cannot compile Apex (its setup.py needs a CUDA build of torch), so the build pipeline
is exercised on a tiny real setuptools project whose real C extension is named `apex_C`; the checks
run against this machine's real torch, nvcc (if any) and /proc.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from tests.support import REPO, run_build
from toolchain.builder import (
    apex_builder,
    build_inputs,
    build_outputs,
    build_tools,
    pip_wheel,
    provenance,
    static_gate,
)
from toolchain.builder import request as build_request
from toolchain.builder.build_inputs import BuildInputs
from toolchain.builder.build_tools import BuildTools
from toolchain.errors import ToolchainError
from toolchain.spec import compat
from verify.domain.arch import Arch
from verify.layers import module_map
from verify.runtime import exit_codes

# the core set as --flags text, from the live facts as build.py wheel reads them (the builder has no copy)
CORE_FLAGS = ",".join(compat.load().apex_core_flags)

C_MODULE = """
#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "%s", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_%s(void) { return PyModule_Create(&m); }
"""


# Two real setup.py shapes, small enough to compile on a CPU in a second: Apex's from tag 25.09 (ENV_TO_FLAG,
# APEX_* variables) and every earlier tag's (switches on its own argv). The CUDA blocks name their modules
# but build them only where TINY_CUDA=1 (never here), as Apex's setup.py skips what the toolkit cannot do.
SETUP_ENV = """
import os, sys
from setuptools import Extension, setup

ENV_TO_FLAG = {
    "APEX_CPP_EXT": "--cpp_ext",
    "APEX_CUDA_EXT": "--cuda_ext",
    "APEX_XENTROPY": "--xentropy",
}


def has_flag(flag, env_var):
    return flag in sys.argv or os.environ.get(env_var, "0") == "1"


ext_modules = [Extension("apex._probe", ["probe.c"])]
if has_flag("--cpp_ext", "APEX_CPP_EXT"):
    ext_modules.append(Extension("apex_C", ["apex_c.c"]))
if has_flag("--cuda_ext", "APEX_CUDA_EXT"):
    if os.environ.get("TINY_CUDA") == "1":
        ext_modules += [Extension(name="amp_C", sources=["x.c"]), Extension(name="fused_layer_norm_cuda", sources=["x.c"])]
if has_flag("--xentropy", "APEX_XENTROPY"):
    if os.environ.get("TINY_CUDA") == "1":
        ext_modules.append(Extension(name="xentropy_cuda", sources=["x.c"]))
setup(name="tinyext", version="0.1", packages=["apex"], ext_modules=ext_modules)
"""

SETUP_ARGV = """
import os, sys
from setuptools import Extension, setup

ext_modules = [Extension("apex._probe", ["probe.c"])]
if "--cpp_ext" in sys.argv:
    sys.argv.remove("--cpp_ext")
    ext_modules.append(Extension("apex_C", ["apex_c.c"]))
if "--cuda_ext" in sys.argv:
    sys.argv.remove("--cuda_ext")
    if os.environ.get("TINY_CUDA") == "1":
        ext_modules.append(Extension(name="amp_C", sources=["x.c"]))
if "--xentropy" in sys.argv:
    sys.argv.remove("--xentropy")
    ext_modules.append(Extension("xentropy_cuda", ["xentropy.c"]))
if "--parallel" in sys.argv:
    at = sys.argv.index("--parallel")
    print(f"tiny setup.py: --parallel {int(sys.argv[at + 1])}")
    del sys.argv[at : at + 2]
setup(name="tinyext", version="0.1", packages=["apex"], ext_modules=ext_modules)
"""


def make_project(root: Path, *, broken: bool = False, style: str = "env") -> Path:
    """A real setuptools project with real C extensions (top-level `apex_C`, `xentropy_cuda`, `apex._probe`)
    whose setup.py reads its switches the way Apex does in that era (`style`: env | argv | none)."""
    (root / "apex").mkdir(parents=True)
    (root / "apex" / "__init__.py").write_text("")
    (root / "apex_c.c").write_text(C_MODULE % ("apex_C", "apex_C") + ("syntax error here;" if broken else ""))
    (root / "xentropy.c").write_text(C_MODULE % ("xentropy_cuda", "xentropy_cuda"))
    (root / "probe.c").write_text(C_MODULE % ("_probe", "_probe"))
    plain = (
        'from setuptools import Extension, setup\nsetup(name="tinyext", version="0.1", packages=["apex"])\n'
    )
    (root / "setup.py").write_text({"env": SETUP_ENV, "argv": SETUP_ARGV, "none": plain}[style])
    return root


def run_builder(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "toolchain.builder.apex_builder", *argv],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def build(
    tmp_path: Path,
    flags: dict[str, str],
    *extra: str,
    broken: bool = False,
    style: str = "env",
    env: dict[str, str] | None = None,
) -> tuple[int, Path]:
    src = make_project(tmp_path / "src", broken=broken, style=style)
    out = tmp_path / "out"
    request = build_request.parse(["--apex-src", str(src), "--out", str(out), "--cell", "c1", *extra])
    env = {**os.environ, **(env or {})}
    versions = {"torch": "2.13.0+cpu", "python": "3", "nvcc_path": shutil.which("nvcc") or "nvcc"}
    started = dt.datetime.now(dt.timezone.utc)
    code = apex_builder.build_and_gate(
        request, BuildInputs.of(src, flags), BuildTools(versions), env, started
    )
    return code, out


# ---------------------------------------------------------------- arguments


def test_flags_none_and_extras() -> None:
    assert build_inputs.parse_flags(CORE_FLAGS, None) == dict.fromkeys(compat.load().apex_core_flags, "1")
    assert build_inputs.parse_flags("none", None) == {}
    assert build_inputs.parse_flags("APEX_CPP_EXT=1 APEX_CUDA_EXT=0", None) == {"APEX_CPP_EXT": "1"}
    flags = build_inputs.parse_flags("APEX_CPP_EXT,APEX_CUDA_EXT", "xentropy,fast_layer_norm")
    assert flags == {
        "APEX_CPP_EXT": "1",
        "APEX_CUDA_EXT": "1",
        "APEX_XENTROPY": "1",
        "APEX_FAST_LAYER_NORM": "1",
    }
    assert module_map.modules_for_flags(build_inputs.parse_flags("none", None)) == ()


@pytest.mark.parametrize(
    ("flags", "extras", "needle"),
    [
        ("APEX_CUDA_EX=1", None, "did you mean 'APEX_CUDA_EXT'"),
        ("none", "xentropi", "APEX_XENTROPY"),
        ("APEX_CPP_EXT=2", None, "KEY=1"),
    ],
)
def test_bad_flags_exit_2(flags: str | None, extras: str | None, needle: str) -> None:
    with pytest.raises(ToolchainError) as stop:
        build_inputs.parse_flags(flags, extras)
    assert stop.value.exit_code == exit_codes.USAGE and needle in str(stop.value)


def test_arch_list_syntax() -> None:
    assert build_inputs.parse_archs("9.0") == (Arch(9, 0),)
    assert build_inputs.parse_archs("8.0;9.0+PTX") == (Arch(8, 0), Arch(9, 0, ptx=True))
    assert build_inputs.parse_archs("8.0, 10.0a 12.0f") == (Arch(8, 0), Arch(10, 0, "a"), Arch(12, 0, "f"))
    for bad in ("", "sm_90", "9", "9.0+ptx", "9.0;x"):
        with pytest.raises(ToolchainError) as stop:
            build_inputs.parse_archs(bad)
        assert stop.value.exit_code == exit_codes.USAGE


def test_cli_rejects_missing_and_non_apex_source(tmp_path: Path) -> None:
    result = run_builder("--apex-src", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), "--archs", "9.0")
    assert result.returncode == exit_codes.USAGE
    assert "no such directory" in result.stderr and "Traceback" not in result.stderr
    result = run_builder("--apex-src", str(tmp_path), "--out", str(tmp_path / "o"), "--archs", "9.0")
    assert result.returncode == exit_codes.USAGE and "not an Apex source tree" in result.stderr


def test_cli_cuda_flags_need_archs(tmp_path: Path) -> None:
    src = make_project(tmp_path / "src")
    env = {k: "" for k in ("TORCH_CUDA_ARCH_LIST",)}
    result = run_builder("--apex-src", str(src), "--out", str(tmp_path / "o"), "--flags", CORE_FLAGS, env=env)
    assert result.returncode == exit_codes.USAGE and "--archs is required" in result.stderr


def test_no_flags_at_all_is_exit_2_naming_flags_and_build_py_wheel(tmp_path: Path) -> None:
    """Run directly (the Dockerfile's way) without --flags, the builder has no default set to fall back on."""
    with pytest.raises(ToolchainError) as stop:
        build_inputs.parse_flags(None, "xentropy")
    assert stop.value.exit_code == exit_codes.USAGE
    src = make_project(tmp_path / "src")
    result = run_builder("--apex-src", str(src), "--out", str(tmp_path / "o"), "--archs", "9.0")
    assert result.returncode == exit_codes.USAGE and "Traceback" not in result.stderr, result.stderr
    message = " ".join(result.stderr.split())
    assert "--flags not given" in message and "pass --flags" in message
    assert "build.py wheel, which fills in the core flags from toolchain/data/compat.toml" in message
    assert not (tmp_path / "o").exists()  # the --out it made is removed again


def test_build_py_wheel_defaults_to_the_core_flags_of_compat_toml(tmp_path: Path) -> None:
    """build.py wheel hands the builder compat.toml's core flags: its help names them, and a build without
    --flags is a CUDA build (so it asks for --archs), as it was when the builder held a copy."""
    help_text = " ".join(run_build("wheel", "--help").stdout.split())
    assert f"default: {CORE_FLAGS}, the core flags of toolchain/data/compat.toml" in help_text
    assert "required when run directly" in " ".join(run_builder("--help").stdout.split())
    src = make_project(tmp_path / "src")
    no_archs = {"TORCH_CUDA_ARCH_LIST": ""}
    proc = run_build("wheel", "--apex-src", str(src), "--out", str(tmp_path / "o"), env=no_archs)
    assert proc.returncode == exit_codes.USAGE and "--archs is required" in proc.stderr, proc.stderr
    proc = run_build(
        "wheel", "--apex-src", str(src), "--out", str(tmp_path / "o"), "--flags", "APEX_CPP_EXT", env=no_archs
    )  # an explicit --flags still wins over the default
    assert proc.returncode != exit_codes.USAGE, proc.stderr
    assert "--archs is required" not in proc.stderr and "--flags not given" not in proc.stderr


def test_cli_missing_nvcc_exit_3(tmp_path: Path) -> None:
    src = make_project(tmp_path / "src")
    result = run_builder(
        "--apex-src",
        str(src),
        "--out",
        str(tmp_path / "o"),
        "--archs",
        "9.0",
        "--flags",
        CORE_FLAGS,
        env={"CUDA_HOME": str(tmp_path / "no-cuda")},
    )
    assert result.returncode == exit_codes.ENVIRONMENT, result.stderr
    assert (
        "nvcc not found" in result.stderr
        and "CUDA_HOME" in result.stderr
        and "Traceback" not in result.stderr
    )
    assert not (tmp_path / "o" / "build-manifest.json").exists()


def test_cli_cpu_torch_exit_3(tmp_path: Path) -> None:
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build")
    src = make_project(tmp_path / "src")
    result = run_builder("--apex-src", str(src), "--out", str(tmp_path / "o"), "--flags", "none")
    assert result.returncode == exit_codes.ENVIRONMENT, result.stderr
    assert ("CPU-only build" in result.stderr) or ("nvcc not found" in result.stderr)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_nvcc_probes_on_real_nvcc() -> None:
    found = shutil.which("nvcc")
    assert found
    nvcc = Path(found)
    release, full = build_tools.nvcc_version(nvcc)
    assert full.startswith(release)
    archs = build_tools.nvcc_archs(nvcc)
    assert "9.0" in archs and "3.5" not in archs


# ---------------------------------------------------------------- outputs and gate


def test_wheel_listing_on_a_real_wheel(tmp_path: Path) -> None:
    code, out = build(tmp_path, {"APEX_CPP_EXT": "1"})
    wheel = next(out.glob("*.whl"))
    assert build_outputs.extension_modules(wheel) == ["apex._probe", "apex_C"]
    assert code == exit_codes.OK


def test_manifest_matches_the_contract(tmp_path: Path) -> None:
    code, out = build(tmp_path, {"APEX_CPP_EXT": "1"})
    assert code == exit_codes.OK
    manifest = json.loads((out / "build-manifest.json").read_text())
    assert manifest["manifest_version"] == "1"
    assert set(manifest) >= {
        "apex", "flags", "expected_modules", "built_modules", "skipped_extensions", "arch_list",
        "versions", "parallelism", "build", "cell", "inputs",
    }  # fmt: skip
    assert manifest["expected_modules"] == ["apex_C"] and "apex_C" in manifest["built_modules"]
    assert manifest["cell"] == "c1" and manifest["apex"]["version"] == "0.1"
    assert manifest["parallelism"]["max_jobs"] >= 1 and manifest["parallelism"]["reason"]
    build_info = manifest["build"]
    assert (
        build_info["wall_s"] > 0 and build_info["peak_rss_mb"] > 0 and len(build_info["wheel_sha256"]) == 64
    )
    assert (out / build_info["wheel"]).is_file() and (out / "apex-build.log").read_text()
    assert not list(out.glob(".wheel-*")), "the staging directory is removed"


def test_gate_fails_naming_module_flag_and_log_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, out = build(tmp_path, {"APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1"})
    assert code == exit_codes.FAILED
    err = capsys.readouterr().err
    assert "expected module amp_C (flag APEX_CUDA_EXT) is not in the wheel" in err
    assert "apex-build.log" in err
    manifest = json.loads((out / "build-manifest.json").read_text())
    assert "amp_C" in manifest["expected_modules"] and "amp_C" not in manifest["built_modules"]


def test_no_gate_reports_but_passes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, _ = build(tmp_path, {"APEX_CPP_EXT": "1", "APEX_XENTROPY": "1"}, "--no-gate")
    err = capsys.readouterr().err
    assert code == exit_codes.OK and "warning: 1 of 2 expected modules are not in the wheel" in err
    assert "- expected module xentropy_cuda (flag APEX_XENTROPY) is not in the wheel" in err


def test_failed_compile_exit_1_with_log_tail(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = None
    with pytest.raises(ToolchainError) as stop:
        code, _ = build(tmp_path, {"APEX_CPP_EXT": "1"}, broken=True)
    assert code is None and stop.value.exit_code == exit_codes.FAILED
    message = str(stop.value)
    assert "pip wheel failed" in message and "first error at log line" in message
    line_no = int(message.split("first error at log line ")[1].split(":")[0])
    log = (tmp_path / "out" / "apex-build.log").read_text().splitlines()
    assert log[line_no - 1].strip()[:100] in message  # the line itself, not a re-print of the log's tail
    assert "--- last lines ---" not in message


def test_skip_warnings_and_missing_modules_from_log_lines() -> None:
    log = [
        "[apex] Detected APEX_CUDNN_GBN=1, adding --cudnn_gbn to build flags.",
        "setup.py:106: UserWarning: Skip `--cudnn_gbn` as it requires cuDNN 8500 or later, but cuDNN is not available",
        "building 'apex_C' extension",
    ]
    assert build_outputs.skipped_extensions(log) == [
        {
            "module": "cudnn_gbn_lib",
            "warning": "Skip `--cudnn_gbn` as it requires cuDNN 8500 or later, but cuDNN is not available",
        }
    ]
    expected = list(module_map.modules_for_flags({"APEX_CPP_EXT": "1", "APEX_CUDNN_GBN": "1"}))
    missing = build_outputs.missing_modules(expected, ["apex_C"], log)
    assert [(m.module, m.flag, m.log_line) for m in missing] == [("cudnn_gbn_lib", "APEX_CUDNN_GBN", 2)]
    assert "see build log line 2 of b.log" in missing[0].message("b.log")
    assert build_outputs.missing_modules(expected, ["apex_C", "cudnn_gbn_lib"], log) == []


def test_wheel_hashes_from_sha256sum(tmp_path: Path) -> None:
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"not read here")
    listing = subprocess.run(["sha256sum", str(wheel)], capture_output=True, text=True, check=True).stdout
    (tmp_path / "w.sha256").write_text(listing)
    assert provenance.wheel_hashes([str(tmp_path / "w.sha256")]) == {wheel.name: provenance.sha256_of(wheel)}
    (tmp_path / "bad.sha256").write_text("nonsense\n")
    for bad in ("bad.sha256", "missing.sha256"):
        with pytest.raises(ToolchainError) as stop:
            provenance.wheel_hashes([str(tmp_path / bad)])
        assert stop.value.exit_code == exit_codes.USAGE


# ---------------------------------------------------------------- static gate, errors, shared facts


def test_static_gate_requires_only_the_features_this_build_promises() -> None:
    def gate(flags: str) -> str:
        return static_gate.gate_required(
            list(module_map.modules_for_flags(build_inputs.parse_flags(flags, None)))
        )

    assert gate(CORE_FLAGS) == ",".join(module_map.default_required_features())  # the core CUDA build: all
    assert gate("none") == "" and gate("APEX_CPP_EXT") == ""  # nothing fused promised: only expected_modules
    assert static_gate.gate_required(["amp_C"]) == "FusedAdam"
    from verify.layers.expectations import parse_required

    assert parse_required([gate("none")]) == ()  # verify reads '' as "no features", not as its defaults


def test_unwritable_out_is_one_line_exit_2(tmp_path: Path) -> None:
    src = make_project(tmp_path / "src")
    result = run_builder("--apex-src", str(src), "--out", "/proc/no-such/out", "--flags", "none")
    assert result.returncode == exit_codes.USAGE, result.stderr
    assert "--out /proc/no-such/out: cannot write" in result.stderr and "Traceback" not in result.stderr


def _copies_of_facts(source: str, core: set[str], index_host: str) -> list[str]:
    """Literals in `source` that restate compat.toml's core flags (a container or a string naming them
    all) or its torch index (a string with its host)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Set)):
            items = node.keys if isinstance(node, ast.Dict) else node.elts
            named = {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
            if core <= named:
                found.append(f"line {node.lineno}: the core flags as a literal")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if core <= set(re.findall(r"APEX_\w+", node.value)) or index_host in node.value:
                found.append(f"line {node.lineno}: {node.value[:60]!r}")
    return found


def test_the_builder_holds_no_copy_of_compat_facts() -> None:
    facts = compat.load()
    core, host = set(facts.apex_core_flags), urllib.parse.urlsplit(facts.index_url_pattern).netloc
    copies = {
        path.name: _copies_of_facts(path.read_text(), core, host)
        for path in sorted((REPO / "toolchain" / "builder").glob("*.py"))
    }
    assert {name: found for name, found in copies.items() if found} == {}
    # the check itself finds the copies this file once had
    assert _copies_of_facts('DEFAULT_FLAGS = {"APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1"}', core, host)
    assert _copies_of_facts('URL = "https://download.pytorch.org/whl/{cuda_tag}"', core, host)


def test_the_failure_names_the_compiler_error_not_setups_banner(tmp_path: Path) -> None:
    """Lines of a real failed build (2026-12-01, index CUDA without cuda_profiler_api.h): Apex's setup.py
    prints "this is not an error." long before the compiler's `fatal error:`, which is the one to name."""
    log = tmp_path / "apex-build.log"
    log.write_text("\n".join([
        "  Warning: Torch did not find available GPUs on this system.",
        "   If your intention is to cross-compile, this is not an error.",
        "  building 'scaled_upper_triang_masked_softmax_cuda' extension",
        "  FAILED: [code=1] /src/apex/build/temp.linux-x86_64-cpython-311/scaled_upper_triang_masked_softmax_cuda.o",
        "  /src/apex/csrc/megatron/scaled_upper_triang_masked_softmax_cuda.cu:21:10: fatal error: cuda_profiler_api.h:"
        " No such file or directory",
        "  error: subprocess-exited-with-error",
    ]) + "\n")  # fmt: skip
    summary = pip_wheel._failure_summary(log, 1)
    assert "first error at log line 5: /src/apex/csrc/megatron/scaled_upper_triang" in summary
    assert "cuda_profiler_api.h: No such file or directory" in summary and "cross-compile" not in summary


def test_a_second_builder_on_the_same_out_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    """Two `build.py wheel` runs on one --out used to write one log at once; the second now stops at
    once with exit 2 (a real second process, the folder's lock held by this one as a first builder would)."""
    import fcntl

    from tests.support import unpack_apex
    from toolchain.builder import apex_builder

    src = unpack_apex("6424da3b", tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    held = apex_builder._lock_out(out)
    try:
        done = subprocess.run(
            [
                sys.executable,
                str(REPO / "build.py"),
                "wheel",
                "--apex-src",
                str(src),
                "--out",
                str(out),
                "--archs",
                "9.0",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        os.close(held)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "another build.py wheel is writing there now" in done.stderr and "Traceback" not in done.stderr
    assert list(out.iterdir()) == [], "nothing written, no lock file left"
    fd = apex_builder._lock_out(out)  # released: the next builder gets it
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@pytest.mark.parametrize("stub", ["real", "exit 0, no object", "exit 1"])
def test_an_nvcc_that_cannot_compile_is_the_environment_before_the_build(tmp_path: Path, stub: str) -> None:
    """A garbage nvcc that answered --version used to pass the up-front checks and fail the build as
    exit 1; the checks now compile a one-line kernel with it (a real nvcc where this host has one)."""
    from toolchain.builder import build_tools
    from toolchain.errors import EnvironmentUnavailable

    if stub == "real":
        real = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        if not Path(real).is_file():
            pytest.skip("no nvcc on this host")
        build_tools.nvcc_compiles(Path(real), dict(os.environ))
        return
    nvcc = tmp_path / "nvcc"
    body = "exit 0" if stub.startswith("exit 0") else "echo 'nvcc fatal : garbage' >&2; exit 1"
    nvcc.write_text(
        f"#!/bin/sh\ncase \"$1\" in --version) echo 'Cuda compilation tools, release 13.0, V13.0.88';; "
        f"*) {body};; esac\n"
    )
    nvcc.chmod(0o755)
    assert build_tools.nvcc_version(nvcc) == ("13.0", "13.0.88")  # it passes the version check
    with pytest.raises(EnvironmentUnavailable, match="cannot compile a one-line kernel") as caught:
        build_tools.nvcc_compiles(nvcc, dict(os.environ))
    assert caught.value.exit_code == 3
    assert ("no object file" in str(caught.value)) == stub.startswith("exit 0")
