"""verify.layers.extensions' rules, each with inputs on both sides: the import probe on real child processes
(Python modules that import, raise, hang, exit or kill their own process), the classification of its
results, the demangler, and the one check per module (PASS, FAIL, partial-build WARN, the not-built SKIP).

The probe children find a torch that imports at once first on their sys.path (what is measured here is the
probe's bookkeeping, not torch's import: tests/unit/test_verify_extensions.py runs the real one); its
clock is injected, scaled, so a timeout of seconds takes tenths of one. Fast: the mutation run's guard.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

from verify.checks import Status
from verify.layers import extensions, module_map
from verify.layers.extensions import ExtensionResult

_REAL_CLOCK = time.monotonic


def _scaled_clock(monkeypatch: pytest.MonkeyPatch, speed: float) -> None:
    """extensions' clock runs `speed` times as fast as the real one (from a large reading, as uptime is)."""
    t0 = _REAL_CLOCK()
    fake = types.SimpleNamespace(monotonic=lambda: 1e6 + (_REAL_CLOCK() - t0) * speed)
    monkeypatch.setattr(extensions, "time", fake)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder first on sys.path (the probe child gets this process's): an empty `torch` and the modules."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return tmp_path


def _write(site: Path, **bodies: str) -> None:
    for name, body in bodies.items():
        (site / f"{name}.py").write_text(textwrap.dedent(body))


def _tasks(*names: str) -> list[dict[str, str]]:
    return [{"id": n, "op": "import", "target": n} for n in names]


def _outcome(result: dict[str, Any]) -> tuple[Any, ...]:
    return (result.get("status"), result.get("exc_type"), result.get("message"))


# ----------------------------------------------------------------------------- the probe
def test_extensions_rules_probe_records_each_import_by_id_and_classify_reads_it(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scaled_clock(monkeypatch, 0.1)  # the 0.5 s timeout lasts 5 real seconds: a quick import never nears it
    _write(
        site,
        ext_ok="",
        ext_raises="raise ValueError('bad .so')",
        ext_itself="raise ModuleNotFoundError(\"No module named 'ext_itself'\")",
    )
    tasks = [
        *_tasks("ext_ok", "ext_raises", "ext_itself", "ext_absent"),
        {"id": "a", "op": "attr", "target": "json.dumps"},
    ]
    results = extensions.probe(tasks, timeout_s=0.5)

    assert set(results) == {extensions.GIL_KEY, "ext_ok", "ext_raises", "ext_itself", "ext_absent", "a"}
    assert set(results[extensions.GIL_KEY]) == {"free_threaded", "start", "after_torch"}
    assert _outcome(results["ext_ok"]) == ("ok", None, None)
    assert _outcome(results["ext_raises"]) == (
        "error",
        "ValueError",
        "bad .so",
    )  # torch imported: no word of it
    assert results["ext_absent"] == {"status": "missing"}
    assert results["a"] == {"status": "ok"}
    # the statuses arrive as JSON, as in verify: classify compares their values
    by_name = {
        n: extensions.classify(n, results[n]) for n in ("ext_ok", "ext_raises", "ext_itself", "ext_absent")
    }
    assert by_name["ext_ok"].status == "ok"
    assert (by_name["ext_ok"].path, by_name["ext_ok"].origin) == (str(site / "ext_ok.py"), str(site))
    assert (by_name["ext_raises"].status, by_name["ext_raises"].error) == ("other", "ValueError: bad .so")
    assert by_name["ext_itself"].status == "missing"
    assert (by_name["ext_absent"].status, by_name["ext_absent"].error) == (
        "missing",
        "No module named 'ext_absent'",
    )


def test_extensions_rules_torchs_own_import_error_is_added_to_each_failed_import_only(site: Path) -> None:
    (site / "torch" / "__init__.py").write_text(
        "raise ImportError('libc10.so: cannot open shared object file')"
    )
    _write(site, ext_ok="", ext_raises="raise ValueError('bad .so')")
    results = extensions.probe(_tasks("ext_ok", "ext_raises", "ext_absent"), timeout_s=60)
    torch_said = " (torch itself failed to import: ImportError: libc10.so: cannot open shared object file)"
    assert _outcome(results["ext_raises"]) == ("error", "ValueError", "bad .so" + torch_said)
    assert _outcome(results["ext_ok"]) == ("ok", None, None)
    assert results["ext_absent"] == {"status": "missing"}


def test_extensions_rules_a_child_that_dies_is_named_with_how_and_its_last_lines(site: Path) -> None:
    _write(
        site,
        ext_loud="""
            import os, signal, sys
            for i in range(1, 8):
                print(f"line {i}", file=sys.stderr)
            os.kill(os.getpid(), signal.SIGTERM)
        """,
        ext_hup="import os, signal\nos.kill(os.getpid(), signal.SIGHUP)\n",
        ext_exit0="import os\nos._exit(0)\n",
        ext_exit3="import os\nos._exit(3)\n",
        ext_ok="",
    )
    names = ("ext_loud", "ext_hup", "ext_exit0", "ext_exit3", "ext_ok")
    results = extensions.probe(_tasks(*names), timeout_s=3)
    died = "the importing process died"
    assert {n: _outcome(results[n]) for n in names} == {  # a fresh child for the modules after each death
        "ext_loud": ("error", "Crash", f"{died} (signal 15): line 3 | line 4 | line 5 | line 6 | line 7"),
        "ext_hup": ("error", "Crash", f"{died} (signal 1)"),
        "ext_exit0": ("error", "Crash", f"{died} (exit code 0)"),
        "ext_exit3": ("error", "Crash", f"{died} (exit code 3)"),
        "ext_ok": ("ok", None, None),
    }
    assert set(results) == {extensions.GIL_KEY, *names}


def test_extensions_rules_an_import_past_its_timeout_is_timed_out_and_the_rest_carry_on(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scaled_clock(monkeypatch, 0.1)  # the 0.03 s timeout lasts 0.3 real seconds, the import 3
    _write(site, ext_slow="import time\ntime.sleep(3)\n", ext_ok="")
    results = extensions.probe(_tasks("ext_slow", "ext_ok"), timeout_s=0.03)
    assert _outcome(results["ext_slow"]) == (
        "error",
        "Timeout",
        "importing took longer than 0.03 s (--check-timeout)",
    )
    assert _outcome(results["ext_ok"]) == ("ok", None, None)


def test_extensions_rules_a_child_that_cannot_start_fails_every_task_once(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _scaled_clock(monkeypatch, 1000)  # the 300 s start-up allowance lasts 0.3 real seconds
    # the first child's torch import outlasts it; a second child's would not (it is never started)
    (site / "torch" / "__init__.py").write_text(
        textwrap.dedent(f"""
            import os, sys, time
            if not os.path.exists({str(site / "started")!r}):
                open({str(site / "started")!r}, "w").close()
                print("loading libtorch", file=sys.stderr)
                time.sleep(3)
        """)
    )
    results = extensions.probe(_tasks("ext_a", "ext_b"), timeout_s=1)
    said = "the import probe process failed to start (or to import torch within 300 s): loading libtorch"
    assert results == {
        n: {"status": "error", "exc_type": "ProbeError", "message": said} for n in ("ext_a", "ext_b")
    }


def test_extensions_rules_a_cancelled_probe_starts_nothing(site: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    assert extensions.probe(_tasks("ext_a"), timeout_s=1, cancel=cancel) == {}


def test_extensions_rules_the_probes_timeout_and_cancel_are_named_never_placed() -> None:
    assert extensions.probe(tasks=[], timeout_s=1) == {}  # nothing to import: no child
    with pytest.raises(TypeError):
        extensions.probe([], 1)  # type: ignore[call-arg]


# ----------------------------------------------------------------------------- classification
UNDEFINED = "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs"


@pytest.mark.parametrize(
    ("name", "result", "status", "error"),
    [
        ("amp_C", {"status": "ok"}, "ok", None),
        ("amp_C", {"status": "missing"}, "missing", "No module named 'amp_C'"),
        ("amp_C", {"status": "error", "exc_type": "ValueError", "message": "x"}, "other", "ValueError: x"),
        ("amp_C", {"status": "error"}, "other", "Error:"),
        # ModuleNotFoundError under its own name is the module missing; under another, or another error, not
        (
            "amp_C",
            {"status": "error", "exc_type": "ModuleNotFoundError", "message": "No module named 'amp_C'"},
            "missing",
            None,
        ),
        (
            "amp_C",
            {"status": "error", "exc_type": "ModuleNotFoundError", "message": "No module named 'einops'"},
            "other",
            None,
        ),
        (
            "amp_C",
            {"status": "error", "exc_type": "ImportError", "message": "cannot import name 'x' from 'amp_C'"},
            "other",
            None,
        ),
        (
            "amp_C",
            {"status": "error", "exc_type": "RuntimeError", "message": "'amp_C' failed"},
            "other",
            None,
        ),
        # a missing shared library: a CUDA one is the CUDA runtime missing, another is not
        (
            "syncbn",
            {
                "status": "error",
                "exc_type": "ImportError",
                "message": "libcudart.so.12: cannot open shared object file: No such file",
            },
            "missing_cuda_library",
            None,
        ),
        (
            "syncbn",
            {
                "status": "error",
                "exc_type": "ImportError",
                "message": "libfoo.so.1: cannot open shared object file: No such file",
            },
            "other",
            None,
        ),
        (
            "fused_layer_norm_cuda",
            {"status": "error", "exc_type": "ImportError", "message": f"x.so: undefined symbol: {UNDEFINED}"},
            "undefined_symbol",
            None,
        ),
    ],
)
def test_extensions_rules_classify_says_why_an_import_fails(name, result, status, error) -> None:
    found = extensions.classify(name, result)
    assert found.status == status
    if error is not None:
        assert found.error == error


def test_extensions_rules_an_undefined_symbol_is_demangled_from_its_name_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no c++filt: the small reader answers
    message = f"x.so: undefined symbol: {UNDEFINED}"
    found = extensions.classify("amp_C", {"status": "error", "exc_type": "ImportError", "message": message})
    assert found.demangled_symbol == "c10::detail::torchCheckFail(...)"


@pytest.mark.parametrize(
    ("result", "path"),
    [
        ({"status": "ok", "file": "/a/amp_C.so", "origin": "/b/amp_C.so"}, "/a/amp_C.so"),
        ({"status": "ok", "origin": "/b/amp_C.so"}, "/b/amp_C.so"),
        ({"status": "ok", "origin": "built-in"}, None),
        ({"status": "ok", "origin": "frozen"}, None),
        ({"status": "ok"}, None),
    ],
)
def test_extensions_rules_the_path_is_the_file_else_the_origin_never_a_pseudo_origin(result, path) -> None:
    found = extensions.classify("amp_C", result)
    assert (found.path, found.origin) == (path, str(Path(path).parent) if path else None)


def test_extensions_rules_a_module_the_map_does_not_know_is_unknown_and_taken_for_cuda() -> None:
    found = extensions.classify("mystery_cuda", {"status": "ok", "file": "/p/mystery_cuda.so"})
    assert (found.flag, found.kind, found.cuda, found.features) == (None, "unknown", True, ())
    known = extensions.classify("apex_C", {"status": "ok"})
    assert (known.flag, known.kind, known.cuda) == ("APEX_CPP_EXT", "core", False)


def test_extensions_rules_a_result_is_frozen() -> None:
    found = extensions.classify("amp_C", {"status": "ok"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.status = "missing"  # type: ignore[misc]


# ----------------------------------------------------------------------------- demangling
@pytest.mark.parametrize(
    ("symbol", "name"),
    [
        (UNDEFINED, "c10::detail::torchCheckFail(...)"),
        ("_ZN3c1019UndefinedTensorImpl10_singletonE", "c10::UndefinedTensorImpl::_singleton"),
        ("_ZN3Foo3getEv", "Foo::get(...)"),
        ("_ZNK3c1010TensorImpl4sizeEl", "c10::TensorImpl::size(...)"),  # a const member function
        ("_ZNVKr3Foo3getEv", "Foo::get(...)"),  # every cv-qualifier skipped
        ("_Z3foo6Tensor", "foo(...)"),  # a plain name is one part; its parameters may start with a length
        ("_Z3foo", "foo"),
        ("_Z3fooE", "foo(...)"),  # only a nested name ends with an E
        ("_ZSt9terminatev", "std::terminate(...)"),
        ("_ZNSt6vectorIiE4sizeEv", "std::vector<...>"),  # template arguments: not decoded
        ("_Z3maxIiET_S0_S0_", "max<...>"),
        ("not_mangled", None),
        ("_Z", None),
        ("_Zx", None),
        ("_Z²x", None),  # '²' is a digit to str.isdigit(), not to the ASCII reader
        ("_ZN3c10²E", "c10(...)"),
    ],
)
def test_extensions_rules_the_small_reader_gives_the_qualified_name(symbol: str, name: str | None) -> None:
    assert extensions._demangle_name(symbol) == name


def _tool(directory: Path, script: str) -> None:
    tool = directory / "c++filt"
    tool.write_text(script)
    tool.chmod(0o755)


@pytest.mark.parametrize(
    ("script", "symbol", "said"),
    [
        # the symbol on stdin, one line; what a tool that succeeds prints is the answer
        ('#!/bin/sh\nread line\necho "demangled<$line>"\n', f"{UNDEFINED}\nx", f"demangled<{UNDEFINED} x>"),
        # a failed run, one killed by a signal, or one that prints nothing is not believed
        (
            "#!/bin/sh\necho 'c++filt: unknown option'\nexit 1\n",
            UNDEFINED,
            "c10::detail::torchCheckFail(...)",
        ),
        ("#!/bin/sh\necho 'half'\nkill -TERM $$\n", UNDEFINED, "c10::detail::torchCheckFail(...)"),
        ("#!/bin/sh\necho '  '\n", UNDEFINED, "c10::detail::torchCheckFail(...)"),
        ("#!/nonexistent/interpreter\n", UNDEFINED, "c10::detail::torchCheckFail(...)"),  # OSError
        ("#!/bin/sh\nexit 1\n", "plain_name", "plain_name"),  # nothing to read: the symbol as it came
    ],
)
def test_extensions_rules_demangle_believes_only_a_c_filt_that_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, symbol: str, said: str
) -> None:
    _tool(tmp_path, script)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert extensions.demangle(symbol) == said


@pytest.mark.parametrize("error", [OSError("exec format error"), subprocess.TimeoutExpired("c++filt", 5)])
def test_extensions_rules_a_c_filt_that_cannot_run_or_hangs_leaves_the_small_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    _tool(tmp_path, "#!/bin/sh\necho never\n")
    monkeypatch.setenv("PATH", str(tmp_path))

    limits: list[float] = []

    def run(*_args: Any, timeout: float, **_kwargs: Any) -> Any:
        limits.append(timeout)
        raise error

    monkeypatch.setattr(extensions.subprocess, "run", run)
    assert extensions.demangle(UNDEFINED) == "c10::detail::torchCheckFail(...)"
    assert limits == [5]  # a hung c++filt is waited for 5 s


def test_extensions_rules_without_c_filt_the_small_reader_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert extensions.demangle(UNDEFINED) == "c10::detail::torchCheckFail(...)"
    assert extensions.demangle("plain_name") == "plain_name"


# ----------------------------------------------------------------------------- one check per module
def _ext(
    name: str, status: str = "ok", error: str | None = None, symbol: str | None = None
) -> ExtensionResult:
    if status == "ok":
        return extensions.classify(name, {"status": "ok", "file": f"/p/{name}.so"})
    if status == "missing":
        return extensions.classify(name, {"status": "missing"})
    missing = extensions.classify(name, {"status": "missing"})
    return dataclasses.replace(missing, status=status, error=error, demangled_symbol=symbol)


def _checks(
    results: list[ExtensionResult], expected: set[str], **kwargs: Any
) -> dict[str, tuple[Status, str]]:
    return {c.name: (c.status, c.summary) for c in extensions.extension_checks(results, expected, **kwargs)}


AMP_C_FOR = " (needed by FusedAdam, FusedSGD, FusedLAMB, FusedNovoGrad)"  # the first four of its features
CUDART = "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"


@pytest.mark.parametrize(
    ("kind", "fix"),
    [
        ("nvidia", "not built (Python-only fallback): rebuild Apex with APEX_CUDA_EXT=1"),
        ("not_installed", "not installed: NVIDIA Apex is not installed (see identity.apex)"),
        ("pypi_unrelated", "not installed: the installed `apex` is not NVIDIA Apex (see identity.apex)"),
        ("unknown", "not installed: the installed `apex` is not NVIDIA Apex (see identity.apex)"),
    ],
)
def test_extensions_rules_an_expected_missing_module_fails_with_the_fix_for_this_apex(
    kind: str, fix: str
) -> None:
    assert _checks([_ext("amp_C", "missing")], {"amp_C"}, apex_kind=kind) == {
        "amp_C": (Status.FAIL, f"missing{AMP_C_FOR}: {fix}")
    }


def test_extensions_rules_an_unknown_module_is_rebuilt_with_its_build_flag() -> None:
    assert _checks([_ext("mystery_cuda", "missing")], {"mystery_cuda"}) == {
        "mystery_cuda": (
            Status.FAIL,
            "missing: not built (Python-only fallback): rebuild Apex with its build flag",
        )
    }


@pytest.mark.parametrize(
    ("ext", "summary"),
    [
        (
            _ext("syncbn", "undefined_symbol", "ImportError: x.so: undefined symbol: _ZN3c10", "c10(...)"),
            "undefined symbol c10(...): built against another torch; rebuild Apex against the torch in this image"
            " (needed by SyncBatchNorm)",
        ),
        (
            _ext("syncbn", "missing_cuda_library", CUDART),
            "missing CUDA library libcudart.so.12: built for another CUDA, or the runtime libraries are not on"
            " the loader path; use a matching CUDA runtime image (needed by SyncBatchNorm)",
        ),
        (
            _ext("syncbn", "missing_cuda_library", None),
            "missing CUDA library : built for another CUDA, or the runtime libraries are not on"
            " the loader path; use a matching CUDA runtime image (needed by SyncBatchNorm)",
        ),
        (
            _ext("syncbn", "other", "ValueError: bad"),
            "import failed: ValueError: bad (needed by SyncBatchNorm)",
        ),
        (_ext("mystery_cuda", "other", "ValueError: bad"), "import failed: ValueError: bad"),
    ],
)
def test_extensions_rules_a_broken_module_fails_with_its_fix_expected_or_not(ext, summary) -> None:
    for expected in (set(), {ext.module}):
        # broken beside a module of its flag that imports: still a FAIL, not a partial build
        others = [_ext("amp_C")] if ext.module == "syncbn" else []
        assert _checks([ext, *others], expected)[ext.module] == (Status.FAIL, summary)


def test_extensions_rules_an_importing_module_passes_and_says_when_it_is_deprecated() -> None:
    commit = "6424da3b4faa6c8f062da4a48c424fff3f02d42d"
    said = module_map.module("fused_adam_cuda").deprecated_at(commit)
    assert said
    checks = {
        c.name: c
        for c in extensions.extension_checks(
            [_ext("fused_adam_cuda"), _ext("amp_C"), _ext("mystery_cuda")], set(), apex_commit=commit
        )
    }
    assert (checks["fused_adam_cuda"].status, checks["fused_adam_cuda"].summary) == (
        Status.PASS,
        f"imports from /p/fused_adam_cuda.so; {said}",
    )
    assert checks["fused_adam_cuda"].details["deprecated"] == said
    for name in ("amp_C", "mystery_cuda"):
        assert (checks[name].status, checks[name].summary) == (Status.PASS, f"imports from /p/{name}.so")
        assert "deprecated" not in checks[name].details


@pytest.mark.parametrize(
    ("results", "warned"),
    [
        # a core module missing beside a module of its flag that imports: a partial build
        ([_ext("amp_C"), _ext("fused_layer_norm_cuda", "missing")], ["fused_layer_norm_cuda"]),
        (
            [_ext("syncbn", "other", "E: x"), _ext("fused_layer_norm_cuda", "missing")],
            ["fused_layer_norm_cuda"],
        ),
        # the same for a contrib, a deprecated or an unknown module: optional, so not built, not a warning
        ([_ext("group_norm_cuda"), _ext("group_norm_v2_cuda", "missing")], []),
        ([_ext("mystery_a"), _ext("mystery_b", "missing")], []),
        # no module of its flag imports: the flag is off, nothing partial
        ([_ext("syncbn", "missing"), _ext("fused_layer_norm_cuda", "missing")], []),
        ([_ext("fused_adam_cuda", "missing"), _ext("amp_C")], []),
    ],
)
def test_extensions_rules_a_partial_build_is_a_core_module_missing_beside_its_flags_others(
    results, warned
) -> None:
    checks = _checks(results, set())
    assert sorted(n for n, (status, _) in checks.items() if status is Status.WARN) == warned
    for name in warned:
        flag = next(e.flag for e in results if e.module == name)
        assert checks[name][1] == f"missing although other {flag} modules are built: partial build"


def test_extensions_rules_the_modules_nobody_asked_for_are_one_skip_by_flag() -> None:
    results = [
        _ext("xentropy_cuda", "missing"),
        _ext("group_norm_cuda", "missing"),
        _ext("mystery_cuda", "missing"),
        _ext("group_norm_v2_cuda", "missing"),
        _ext("amp_C"),
    ]
    checks = {c.name: c for c in extensions.extension_checks(results, set())}
    assert set(checks) == {"amp_C", "not_built"}
    skip = checks["not_built"]
    assert (skip.status, skip.summary) == (
        Status.SKIP,
        "4 optional modules not built, by flag: APEX_XENTROPY (1), APEX_GROUP_NORM (2), unknown flag (1);"
        " names in the JSON report",
    )
    assert skip.details == {
        "by_flag": {
            "APEX_XENTROPY": ["xentropy_cuda"],
            "APEX_GROUP_NORM": ["group_norm_cuda", "group_norm_v2_cuda"],
            "unknown flag": ["mystery_cuda"],
        }
    }
    assert "not_built" not in {c.name for c in extensions.extension_checks([_ext("amp_C")], set())}
