"""The import probe and failure classification on real shared objects compiled here with gcc: a module
that imports, one with an undefined C++ symbol (what a build against another torch gives), one that
needs a CUDA runtime library that is not there, and one that kills its process while loading.
dlopen and Python's importer do the failing; nothing is simulated."""

from __future__ import annotations

import importlib.machinery
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support import REPO, unpack_apex
from verify.layers import extensions, identity

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the test .so files")
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _module_source(name: str, body: str = "") -> str:
    return (
        f"#include <Python.h>\n{body}\n"
        f'static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, NULL}};\n'
        f"PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&def); }}\n"
    )


def build_module(directory: Path, name: str, body: str = "", libs: list[str] | None = None) -> Path:
    src = directory / f"{name}.c"
    src.write_text(_module_source(name, body))
    out = directory / f"{name}{SUFFIX}"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-o",
            str(out),
            str(src),
            f"-I{sysconfig.get_paths()['include']}",
            f"-L{directory}",
            *(libs or []),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return out


@pytest.fixture(scope="module")
def broken_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("exts")
    build_module(d, "amp_C")  # imports fine
    # references c10::detail::torchCheckFail(...) with a signature no loaded library provides
    build_module(
        d,
        "fused_layer_norm_cuda",
        "void _ZN3c106detail14torchCheckFailEPKcS2_jRKSs(const char*, const char*, unsigned, void*);\n"
        "void *keep = (void *)&_ZN3c106detail14torchCheckFailEPKcS2_jRKSs;",
    )
    # linked against a libcudart.so.12 that is then removed, as in an image without the CUDA runtime
    stub = d / "libcudart.so.12"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(stub), "-x", "c", "-", "-Wl,-soname,libcudart.so.12"],
        input=b"int cudart_stub(void) { return 0; }\n",
        check=True,
        capture_output=True,
        timeout=60,
    )
    (d / "libcudart.so").symlink_to(stub.name)
    build_module(d, "syncbn", "int cudart_stub(void);\nvoid *keep = (void *)&cudart_stub;", ["-lcudart"])
    stub.unlink()
    (d / "libcudart.so").unlink()
    # segfaults while loading, before Python sees the module
    build_module(
        d,
        "mlp_cuda",
        "#include <signal.h>\n__attribute__((constructor)) static void boom(void) { raise(SIGSEGV); }",
    )
    return d


def test_probe_classifies_each_failure_and_survives_a_crash(broken_modules: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(broken_modules))
    names = ["mlp_cuda", "amp_C", "fused_layer_norm_cuda", "syncbn", "xentropy_cuda"]
    tasks = [{"id": n, "op": "import", "target": n} for n in names]
    results = extensions.probe(tasks, timeout_s=60)
    by_name = {n: extensions.classify(n, results[n]) for n in names}

    assert by_name["amp_C"].status == "ok"
    assert by_name["amp_C"].path == str(broken_modules / f"amp_C{SUFFIX}")

    undefined = by_name["fused_layer_norm_cuda"]
    assert undefined.status == "undefined_symbol"
    assert undefined.demangled_symbol and undefined.demangled_symbol.startswith(
        "c10::detail::torchCheckFail("
    )

    assert by_name["syncbn"].status == "missing_cuda_library"
    assert "libcudart.so.12" in (by_name["syncbn"].error or "")

    crashed = by_name["mlp_cuda"]  # first in the list: the modules after it were still probed
    assert crashed.status == "other" and "signal 11" in (crashed.error or "")

    assert by_name["xentropy_cuda"].status == "missing"

    checks = {
        c.name: c for c in extensions.extension_checks(list(by_name.values()), expected={"amp_C", "syncbn"})
    }
    assert checks["amp_C"].status.value == "PASS"
    assert checks["fused_layer_norm_cuda"].status.value == "FAIL"
    assert "built against another torch" in checks["fused_layer_norm_cuda"].summary
    assert "missing CUDA library libcudart.so.12" in checks["syncbn"].summary
    assert checks["not_built"].status.value == "SKIP" and "APEX_XENTROPY (1)" in checks["not_built"].summary
    assert checks["not_built"].details["by_flag"]["APEX_XENTROPY"] == ["xentropy_cuda"]


@pytest.mark.slow
def test_probe_times_out_a_hanging_import(tmp_path: Path, monkeypatch) -> None:
    build_module(
        tmp_path,
        "scaled_softmax_cuda",
        "#include <unistd.h>\n__attribute__((constructor)) static void hang(void) { sleep(60); }",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    results = extensions.probe(
        [
            {"id": "s", "op": "import", "target": "scaled_softmax_cuda"},
            {"id": "j", "op": "import", "target": "json"},
        ],
        timeout_s=10,
    )
    assert results["s"]["exc_type"] == "Timeout"
    assert results["j"]["status"] == "ok"


def test_demangle_fallback_without_cxxfilt() -> None:
    assert (
        extensions._demangle_name("_ZN3c106detail14torchCheckFailEPKcS2_jRKSs")
        == "c10::detail::torchCheckFail(...)"
    )
    assert (
        extensions._demangle_name("_ZN3c1019UndefinedTensorImpl10_singletonE")
        == "c10::UndefinedTensorImpl::_singleton"
    )
    assert extensions._demangle_name("not_mangled") is None


def test_demangle_fallback_reads_only_ascii_lengths() -> None:
    # the symbol comes from an error text; '²' passed str.isdigit() but not the \d regex: AttributeError
    assert extensions._demangle_name("_Z²x") is None
    assert extensions._demangle_name("_ZN3c10²E") == "c10(...)"


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="binutils' c++filt is not installed")
def test_a_symbol_reaches_cxxfilt_as_data_never_as_an_option(tmp_path: Path) -> None:
    secret = tmp_path / "options"
    secret.write_text("--version\n")  # c++filt @FILE reads its options from FILE
    assert extensions.demangle("_ZN3c106detail14torchCheckFailEPKcS2_jRKSs").startswith(
        "c10::detail::torchCheckFail(char const*"
    )
    for text in (f"@{secret}", "--help", "-n", "--version"):
        assert extensions.demangle(text) == text  # not a usage text, not the file's content


@pytest.fixture(scope="module")
def nvidia_apex_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NVIDIA Apex's Python package from the upstream mirror, as an in-tree (Python-only) install."""
    return unpack_apex("6424da3b", tmp_path_factory.mktemp("apex-src"))  # the checkout root holds the package


@pytest.mark.slow
def test_python_only_nvidia_apex_and_mixed_install(
    tmp_path: Path, nvidia_apex_source: Path, broken_modules: Path
) -> None:
    env_path = f"{nvidia_apex_source}:{broken_modules}:{REPO}"
    done = subprocess.run(
        [sys.executable, "-m", "verify", "--static", "--json", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": env_path},
        timeout=120,
        check=False,
    )
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    checks = {c["id"]: c for c in report["checks"]}
    assert done.returncode == 1
    assert report["apex"]["kind"] == "nvidia"
    assert checks["identity.apex"]["status"] == "PASS"
    assert checks["identity.legacy.apex.amp"]["summary"].startswith("apex.amp absent")
    # the apex package is here, its amp_C somewhere else: named as a mixed install
    assert checks["identity.mixed_install"]["status"] == "WARN"
    assert "amp_C from" in checks["identity.mixed_install"]["summary"]
    assert checks["expectations.feature.FusedLayerNorm"]["status"] == "FAIL"
    assert "built against another torch" in checks["extensions.fused_layer_norm_cuda"]["summary"]


def test_identity_locate_without_apex() -> None:
    info = identity.locate()
    if info["installed"]:
        pytest.skip("an apex package is installed in this Python")
    assert info == {"installed": False, "kind": "not_installed", "path": None}


def test_with_no_apex_installed_a_missing_module_is_not_installed_not_a_fallback():
    results = [extensions.classify("amp_C", {"status": "missing"})]
    absent = extensions.extension_checks(results, {"amp_C"}, "not_installed")[0]
    assert (
        "not installed: NVIDIA Apex is not installed" in absent.summary and "fallback" not in absent.summary
    )
    unrelated = extensions.extension_checks(results, {"amp_C"}, "pypi_unrelated")[0]
    assert "not NVIDIA Apex" in unrelated.summary
    python_only = extensions.extension_checks(results, {"amp_C"}, "nvidia")[0]
    assert "Python-only fallback" in python_only.summary


@pytest.mark.slow
def test_check_timeout_measures_the_imports_not_the_probes_start(tmp_path: Path) -> None:
    """With a timeout shorter than the probe child's own start and torch import, every module
    used to FAIL as 'the import probe process failed to start'; the timeout now starts at the first task."""
    from tests.support import run_verify

    done = run_verify("--static", "--check-timeout", "0.3", "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    report = (tmp_path / "r.json").read_text()
    assert done.returncode in (0, 1), done.stderr
    assert "failed to start" not in report and "Timeout" not in report, report[:2000]


def test_demangle_fallback_skips_cv_qualifiers_and_stops_at_a_plain_names_parameters() -> None:
    # a const member function: one K, then the nested name
    assert extensions._demangle_name("_ZNK3c1010TensorImpl4sizeEl") == "c10::TensorImpl::size(...)"
    # foo(Tensor): a plain name ends after its one part, its parameters may start with a length too
    assert extensions._demangle_name("_Z3foo6Tensor") == "foo(...)"


def test_a_module_not_found_under_its_own_name_is_missing_and_under_another_is_other() -> None:
    own = {"status": "error", "exc_type": "ModuleNotFoundError", "message": "No module named 'amp_C'"}
    assert extensions.classify("amp_C", own).status == "missing"
    dependency = {**own, "message": "No module named 'einops'"}  # amp_C is there; what it imports is not
    assert extensions.classify("amp_C", dependency).status == "other"


def test_a_cxxfilt_that_fails_is_not_believed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "c++filt"
    fake.write_text("#!/bin/sh\necho 'c++filt: unknown option'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    # its words on a failed run are not a demangled name: the small reader answers instead
    symbol = "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs"
    assert extensions.demangle(symbol) == "c10::detail::torchCheckFail(...)"
