"""Child-process side of the import probe: import Apex's modules and report each result as a JSON line.

Run by verify.layers.extensions as `python -c <this file's text> FD` with the request on stdin; results go to
file descriptor FD (not stdout, which extension code may print to). Every task is announced before it
runs, so when a broken `.so` kills this process (segfault in a static initialiser, abort), the parent
knows exactly which module did it and restarts a child for the remaining tasks.
Standard library only; must not import verify (it runs with the caller's sys.path, nothing else).
"""

import importlib
import importlib.util
import json
import os
import sys
import sysconfig


def _error(exc: BaseException) -> dict:
    return {"status": "error", "exc_type": type(exc).__name__, "message": str(exc)}


def _gil():
    """sys._is_gil_enabled() (Python >= 3.13); None where the function is absent (an older Python)."""
    reading = getattr(sys, "_is_gil_enabled", None)
    return None if reading is None else bool(reading())


def _import_module(name: str) -> dict:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        return _error(exc)
    if spec is None:
        return {"status": "missing"}
    # on a free-threaded Python, importing an extension that does not declare Py_MOD_GIL_NOT_USED turns the
    # GIL back on for the whole process: the reading around each import says which module did
    result = {"origin": spec.origin, "gil_before": _gil()}
    try:
        module = importlib.import_module(name)
    except BaseException as exc:  # SystemExit from a module body is a finding too
        result.update(_error(exc), gil_after=_gil())
        return result
    result["gil_after"] = _gil()
    result.update(
        status="ok", file=getattr(module, "__file__", None), version=getattr(module, "__version__", None)
    )
    return result


def _resolve_attr(path: str) -> dict:
    module_name, _, attr = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        getattr(module, attr)
    except BaseException as exc:
        return _error(exc)
    return {"status": "ok"}


def main() -> None:
    out = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    request = json.loads(sys.stdin.read())
    sys.path[:] = request["sys_path"]

    def emit(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    # Extensions link against libtorch/libc10, which resolve only once torch is loaded (as in real use).
    # one message: torch's import error (None when it imports) and the GIL before and after that import
    gil = {"free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")), "start": _gil()}
    torch_error = None
    try:
        import torch  # noqa: F401
    except BaseException as exc:
        torch_error = f"{type(exc).__name__}: {exc}"
    emit({"torch_error": torch_error, "gil": {**gil, "after_torch": _gil()}})
    for task in request["tasks"]:
        emit({"start": task["id"]})
        if task["op"] == "import":
            result = _import_module(task["target"])
        else:
            result = _resolve_attr(task["target"])
        emit({"id": task["id"], **result})


if __name__ == "__main__":  # run as `python -c`, never on import
    main()
