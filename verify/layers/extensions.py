"""Layer 3 (extensions): import every known Apex module and say why one fails (layer 4, the archs each
compiled `.so` carries, is verify.layers.arch).

Imports happen in a child process (verify/layers/import_probe.py), never in verify's own process: a `.so` built
against another torch can abort or segfault while loading, and that must become one FAIL line, not the
end of the report. One child imports everything (one torch import, so --static stays fast); when it
dies or hangs on a module, that module is recorded as crashed / timed out and a fresh child carries on
with the rest.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from verify.checks import Check, Status
from verify.domain.report_json import ExtensionJSON
from verify.layers import module_map
from verify.runtime import resources
from verify.runtime.json_lines_child import TIMEOUT, JsonLinesChild

_PROBE_SOURCE = "layers/import_probe.py"  # run as `python -c SOURCE`, so it needs no importable verify

# Shared libraries whose absence means "the CUDA runtime this build needs is not here".
_CUDA_LIB = re.compile(
    r"^lib(cudart|cuda|cublas|cublasLt|cusparse|cusparseLt|cusolver|curand|cufft|nvrtc|nvJitLink|cudnn\w*|nccl"
    r"|nvToolsExt|cupti|cufile|nvshmem\w*)\.so"
)
_MISSING_LIB = re.compile(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file")
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")


GIL_KEY = "gil:interpreter"  # probe()'s entry for the child's GIL readings before any Apex import

# ----------------------------------------------------------------------------- child-process runner
PROBE_STARTUP_S = (
    300.0  # the probe child's start and torch import; a cold torch import on a loaded node: ~30 s
)


def probe(
    tasks: list[dict[str, str]], *, timeout_s: float, cancel: threading.Event | None = None
) -> dict[str, dict[str, Any]]:
    """Run import tasks ({"id", "op": "import"|"attr", "target"}) in child processes; results by id."""
    source = resources.read_text(_PROBE_SOURCE)
    results: dict[str, dict[str, Any]] = {}
    pending = list(tasks)
    torch_error: str | None = None
    while pending and not (cancel and cancel.is_set()):
        done_before = len(results)
        tail, torch_error = _probe_once(source, pending, results, timeout_s, cancel)
        pending = [t for t in pending if t["id"] not in results]
        if len(results) == done_before:  # the child could not even start: no point retrying
            said = f": {' | '.join(tail)}" if tail else ""
            for task in pending:
                results[task["id"]] = {
                    "status": "error",
                    "exc_type": "ProbeError",
                    "message": f"the import probe process failed to start (or to import torch "
                    f"within {max(timeout_s, PROBE_STARTUP_S):g} s){said}",
                }
            break
    if torch_error:  # every extension links against torch: its own failure is the first thing to fix
        for result in results.values():
            if result.get("status") == "error":
                result["message"] = (
                    f"{result.get('message', '')} (torch itself failed to import: {torch_error})"
                )
    return results


def _probe_once(
    source: str,
    tasks: list[dict[str, str]],
    results: dict[str, dict[str, Any]],
    timeout_s: float,
    cancel: threading.Event | None,
) -> tuple[list[str], str | None]:
    """One child process; fills `results`. Returns the child's last output lines and torch's import error."""
    torch_error: str | None = None
    # its own process group, killed with verify (Ctrl-C, SIGTERM); results on a pipe, not stdout, which
    # extension code may print to
    child = JsonLinesChild(
        [sys.executable, "-c", source],
        label="import-probe",
        events_on_fd=True,
        stdin_pipe=True,
        is_event=lambda _message: True,
        tail_chars=None,
    )
    current: str | None = None
    # the first task starts after Python's start and `import torch` in the child (seconds, more on a busy
    # host): that gets its own allowance, so --check-timeout measures the imports it names,
    # not a loaded node's start-up
    deadline = time.monotonic() + max(timeout_s, PROBE_STARTUP_S)
    timed_out = False
    try:
        child.send_and_close(json.dumps({"sys_path": sys.path, "tasks": tasks}).encode())
        while not (cancel and cancel.is_set()):
            wait = deadline - time.monotonic()
            if wait <= 0:
                timed_out = True
                break
            message = child.next_event(min(wait, 0.2))
            if message is TIMEOUT:
                continue
            if message is None:
                break  # child exited (or closed its end)
            if "start" in message:
                current = message["start"]
                deadline = time.monotonic() + timeout_s  # the timeout is per module
            elif "id" in message:
                results[message.pop("id")] = message
                current = None
            elif "torch_error" in message:  # with the interpreter's GIL before and after `import torch`
                torch_error = message["torch_error"]
                results.setdefault(GIL_KEY, message.get("gil") or {})
    finally:  # on a timeout, a cancel, or an exception in this thread: never leave the child behind
        child.kill()
        returncode, log = child.finish(0)
    tail = log.strip().splitlines()[-5:]
    if current is not None and current not in results:
        if timed_out:
            results[current] = {
                "status": "error",
                "exc_type": "Timeout",
                "message": f"importing took longer than {timeout_s:g} s (--check-timeout)",
            }
        else:
            how = (
                f"signal {-returncode}"
                if returncode is not None and returncode < 0
                else f"exit code {returncode}"
            )
            results[current] = {
                "status": "error",
                "exc_type": "Crash",
                "message": f"the importing process died ({how})" + (f": {' | '.join(tail)}" if tail else ""),
            }
    return tail, torch_error


# ----------------------------------------------------------------------------- classification
@dataclasses.dataclass(frozen=True)
class ExtensionResult:
    module: str
    flag: str | None
    kind: str  # core | contrib | deprecated | unknown (named by a manifest, not in the module map)
    cuda: bool
    status: str  # ok | missing | undefined_symbol | missing_cuda_library | other
    path: str | None = None  # the .so file found for this module
    origin: str | None = None  # its directory
    error: str | None = None
    demangled_symbol: str | None = None
    arch: dict[str, Any] | None = None
    features: tuple[str, ...] = ()

    def to_json(self) -> ExtensionJSON:
        return {
            "module": self.module,
            "flag": self.flag,
            "kind": self.kind,
            "status": self.status,
            "path": self.path,
            "origin": self.origin,
            "error": self.error,
            "demangled_symbol": self.demangled_symbol,
            "arch": self.arch,
        }


def demangle(symbol: str) -> str:
    """c++filt when present (build images); else a small reader for the nested name (runtime images).

    The symbol comes from an error text, so it goes to c++filt on stdin, never on its command line,
    where `-n`, `--help` or `@FILE` (read options from a file) would be taken as options."""
    tool = shutil.which("c++filt")
    if tool:
        try:
            done = subprocess.run(
                [tool],
                input=symbol.replace("\n", " ") + "\n",
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
                errors="replace",
            )
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return _demangle_name(symbol) or symbol


def _demangle_name(symbol: str) -> str | None:
    """The qualified function name of an Itanium-mangled symbol (`_ZN3c106detail14torchCheckFailE...` ->
    `c10::detail::torchCheckFail(...)`): enough to see which torch API the build expected."""
    if not symbol.startswith("_Z"):
        return None
    rest = symbol[2:]
    nested = rest.startswith("N")
    rest = rest[1:] if nested else rest
    while rest[:1] in ("K", "V", "r"):  # cv-qualifiers of a member function
        rest = rest[1:]
    if rest.startswith("St"):
        parts, rest = ["std"], rest[2:]
    else:
        parts = []
    while digits_match := re.match(r"[0-9]+", rest):  # ASCII: str.isdigit() also takes '²', which \d does not
        digits = digits_match.group(0)
        length = int(digits)
        parts.append(rest[len(digits) : len(digits) + length])
        rest = rest[len(digits) + length :]
        if not nested:
            break
    if not parts:
        return None
    name = "::".join(parts)
    if rest.startswith("I"):  # template arguments: not decoded here
        return name + "<...>"
    params = rest[1:] if nested and rest.startswith("E") else rest
    return name + ("(...)" if params else "")


def classify(name: str, result: dict[str, Any]) -> ExtensionResult:
    """One import-probe result as an ExtensionResult: which module, its flag, and why it fails if it does."""
    try:
        info = module_map.module(name)
        flag, kind, cuda, features = info.flag, info.kind, info.cuda, info.features
    except KeyError:
        flag, kind, cuda, features = None, "unknown", True, ()
    path = result.get("file") or result.get("origin")
    path = path if path and path not in ("built-in", "frozen") else None
    found: dict[str, Any] = {
        "module": name,
        "flag": flag,
        "kind": kind,
        "cuda": cuda,
        "path": path,
        "origin": str(Path(path).parent) if path else None,
        "features": features,
    }
    if result.get("status") == "ok":
        return ExtensionResult(status="ok", **found)
    if result.get("status") == "missing":
        return ExtensionResult(status="missing", error=f"No module named '{name}'", **found)
    message = f"{result.get('exc_type', 'Error')}: {result.get('message', '')}".strip()
    undefined = _UNDEFINED.search(message)
    missing_lib = _MISSING_LIB.search(message)
    if undefined:
        return ExtensionResult(
            status="undefined_symbol", error=message, demangled_symbol=demangle(undefined.group(1)), **found
        )
    if missing_lib and _CUDA_LIB.match(missing_lib.group(1)):
        status = "missing_cuda_library"
    elif result.get("exc_type") == "ModuleNotFoundError" and f"'{name}'" in message:
        status = "missing"
    else:
        status = "other"
    return ExtensionResult(status=status, error=message, **found)


def _deprecated_at(name: str, apex_commit: str | None) -> str | None:
    try:
        return module_map.module(name).deprecated_at(apex_commit)
    except KeyError:  # a module a manifest names that the map does not know
        return None


def _fix_for(ext: ExtensionResult, apex_kind: str = "nvidia") -> str:
    if ext.status == "missing" and apex_kind == "not_installed":
        return "not installed: NVIDIA Apex is not installed (see identity.apex)"
    if ext.status == "missing" and apex_kind != "nvidia":
        return "not installed: the installed `apex` is not NVIDIA Apex (see identity.apex)"
    if ext.status == "missing":
        flag = f"{ext.flag}=1" if ext.flag else "its build flag"
        return f"not built (Python-only fallback): rebuild Apex with {flag}"
    if ext.status == "undefined_symbol":
        return (
            f"undefined symbol {ext.demangled_symbol}: built against another torch;"
            " rebuild Apex against the torch in this image"
        )
    if ext.status == "missing_cuda_library":
        lib = _MISSING_LIB.search(ext.error or "")
        return (
            f"missing CUDA library {lib.group(1) if lib else ''}: built for another CUDA, or the runtime"
            " libraries are not on the loader path; use a matching CUDA runtime image"
        )
    return f"import failed: {ext.error}"


def extension_checks(
    results: list[ExtensionResult],
    expected: set[str],
    apex_kind: str = "nvidia",
    apex_commit: str | None = None,
) -> list[Check]:
    """One check per module: PASS when it imports; FAIL when broken, or expected and missing. `apex_kind`
    (identity.locate): with no NVIDIA Apex at all a missing module is "not installed", not a fallback.
    `apex_commit` (identity): a module upstream deprecated at that commit says so where it imports."""
    present_flags = {e.flag for e in results if e.status != "missing"}
    checks: list[Check] = []
    not_built: dict[str, list[str]] = {}  # optional modules nobody asked for: one line, not thirty
    for ext in results:
        details = {"status": ext.status, "path": ext.path, "flag": ext.flag}
        needed_by = f" (needed by {', '.join(ext.features[:4])})" if ext.features else ""
        if ext.status == "ok":
            status, summary = Status.PASS, f"imports from {ext.path}"
            deprecated = _deprecated_at(ext.module, apex_commit)
            if deprecated:
                summary, details["deprecated"] = f"{summary}; {deprecated}", deprecated
        elif ext.status == "missing" and ext.module in expected:
            status, summary = Status.FAIL, f"missing{needed_by}: {_fix_for(ext, apex_kind)}"
        elif ext.status == "missing" and ext.flag in present_flags and ext.kind == "core":
            status, summary = (
                Status.WARN,
                f"missing although other {ext.flag} modules are built: partial build",
            )
        elif ext.status == "missing":
            not_built.setdefault(ext.flag or "unknown flag", []).append(ext.module)
            continue
        else:
            status, summary = Status.FAIL, _fix_for(ext) + needed_by
        checks.append(Check("extensions", ext.module, status, summary, details=details))
    if not_built:
        count = sum(len(v) for v in not_built.values())
        listed = ", ".join(f"{flag} ({len(mods)})" for flag, mods in not_built.items())
        checks.append(
            Check(
                "extensions",
                "not_built",
                Status.SKIP,
                f"{count} optional modules not built, by flag: {listed}; names in the JSON report",
                details={"by_flag": not_built},
            )
        )
    return checks


def gil_check(probed: dict[str, dict[str, Any]], module_names: list[str] | tuple[str, ...]) -> Check:
    """Whether importing Apex re-enabled the GIL on a free-threaded Python, and which import did, from the
    probe's readings of sys._is_gil_enabled() (the interpreter at start, after torch, around each module).
    Once on, the GIL stays on: the first import that turned it on is the one named."""
    start = probed.get(GIL_KEY) or {}
    details: dict[str, Any] = {
        "free_threaded": bool(start.get("free_threaded")),
        "enabled_at_start": start.get("start"),
        "enabled_by": None,
    }
    if not start:
        return Check(
            "extensions", "gil", Status.INFO, "GIL not read (the import probe did not start)", details=details
        )
    if not start.get("free_threaded"):
        return Check(
            "extensions",
            "gil",
            Status.INFO,
            "not free-threaded: this Python is a GIL build, so no import can re-enable the GIL",
            details=details,
        )
    if start.get("start"):
        return Check(
            "extensions",
            "gil",
            Status.INFO,
            "free-threaded Python running with the GIL from the start (PYTHON_GIL=1 or -X gil=1): "
            "which import would enable it is not visible",
            details=details,
        )
    if start.get("after_torch"):
        details["enabled_by"] = "torch"
        return Check(
            "extensions",
            "gil",
            Status.WARN,
            "importing torch re-enabled the GIL on this free-threaded Python (before any Apex module): "
            "threads run one at a time",
            details=details,
        )
    imported = [n for n in module_names if probed.get(f"module:{n}", {}).get("gil_after") is not None]
    turned_on = next(
        (
            n
            for n in imported
            if probed[f"module:{n}"].get("gil_before") is False and probed[f"module:{n}"].get("gil_after")
        ),
        None,
    )
    if turned_on is not None:
        details["enabled_by"] = turned_on
        return Check(
            "extensions",
            "gil",
            Status.WARN,
            f"importing {turned_on} re-enabled the GIL on this free-threaded Python (it does not declare "
            "Py_MOD_GIL_NOT_USED): threads run one at a time; PYTHON_GIL=0 forces it off, at the risk of "
            "races in code written for the GIL",
            details=details,
        )
    return Check(
        "extensions",
        "gil",
        Status.PASS,
        f"free-threaded Python: the GIL stays disabled after importing torch and {len(imported)} Apex modules",
        details=details,
    )
