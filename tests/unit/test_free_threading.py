"""Free-threaded Python on the Python axis and in verify: `3.14t` refused up front with the recorded reason,
and verify's reading of sys._is_gil_enabled() around each import (which module re-enabled the GIL)."""

from __future__ import annotations

import sys

import pytest

from tests.support import run_build
from toolchain.spec import compat
from verify.checks import Status
from verify.layers import extensions


def test_python_3_14t_is_a_value_of_the_axis_refused_with_the_measured_reason() -> None:
    proc = run_build("plan", "--cuda", "13.2", "--python", "3.14t")
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "Python 3.14t (free-threaded) cannot be built" in line and "not a MAJOR.MINOR" not in line
    refused = compat.load().free_threaded_refused
    assert refused and refused in line  # the reason is the facts' own text
    assert line.endswith("use --python 3.14 (the same Python with the GIL)") and "\n" not in line


def test_a_python_value_that_is_neither_form_is_still_refused_as_such() -> None:
    proc = run_build("plan", "--cuda", "13.2", "--python", "3.14x")
    assert proc.returncode == 2 and "is not a MAJOR.MINOR version" in proc.stderr


def test_python_3_14_resolves_on_the_forky_local_base() -> None:
    import json

    proc = run_build("plan", "--cell", "cu132-py314", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["tag"] == "apex-6424da3-torch2.15.0-cu13.2-py3.14-debian14"
    facts = compat.load()
    assert facts.local_bases["debian14"].suite == "forky" and "3.14" in facts.os["debian14"].python
    # forky's default gcc 16 is past nvcc 13.2's limit: the OS's gcc-15 is taken
    assert plan["build_args"]["GCC_VERSION"] == "15"


def test_on_this_interpreter_the_probe_reads_the_gil_and_says_not_free_threaded() -> None:
    """The real import probe (a child process that imports torch) on the test interpreter, a GIL build."""
    probed = extensions.probe([{"id": "module:_json", "op": "import", "target": "_json"}], timeout_s=120)
    reading = getattr(sys, "_is_gil_enabled", None)
    expected = None if reading is None else reading()
    assert probed["module:_json"]["status"] == "ok"
    assert probed["module:_json"]["gil_before"] == expected == probed["module:_json"]["gil_after"]
    check = extensions.gil_check(probed, ["_json"])
    assert check.status is Status.INFO and check.summary.startswith("not free-threaded")
    assert check.details == {"free_threaded": False, "enabled_at_start": expected, "enabled_by": None}


def _readings(after_torch: bool, modules: dict[str, tuple[bool, bool]]) -> dict[str, dict]:
    """The probe's JSON lines for a free-threaded interpreter, as import_probe.py writes them."""
    found: dict[str, dict] = {
        extensions.GIL_KEY: {"free_threaded": True, "start": False, "after_torch": after_torch}
    }
    for name, (before, after) in modules.items():
        found[f"module:{name}"] = {"status": "ok", "gil_before": before, "gil_after": after}
    return found


@pytest.mark.parametrize(
    ("after_torch", "modules", "status", "enabled_by"),
    [
        (False, {"apex_C": (False, False), "amp_C": (False, False)}, Status.PASS, None),
        # on before the import (not by it): no import turned it on here
        (False, {"apex_C": (True, True)}, Status.PASS, None),
        (
            False,
            {"apex_C": (False, False), "amp_C": (False, True), "syncbn": (True, True)},
            Status.WARN,
            "amp_C",
        ),
        (True, {"apex_C": (True, True)}, Status.WARN, "torch"),
    ],
)
def test_the_first_import_that_turned_the_gil_on_is_named(after_torch, modules, status, enabled_by) -> None:
    check = extensions.gil_check(_readings(after_torch, modules), list(modules))
    assert (check.status, check.details["enabled_by"]) == (status, enabled_by)
    if enabled_by:
        assert f"importing {enabled_by} re-enabled the GIL" in check.summary


def test_a_free_threaded_python_started_with_the_gil_names_no_module() -> None:
    probed = _readings(True, {"amp_C": (True, True)})
    probed[extensions.GIL_KEY]["start"] = True
    check = extensions.gil_check(probed, ["amp_C"])
    assert (
        check.status is Status.INFO
        and check.details["enabled_by"] is None
        and "PYTHON_GIL=1" in check.summary
    )


def test_python_3_14_on_ubuntu_names_only_an_os_this_cuda_can_stand_on() -> None:
    """Ubuntu 26.04 packages 3.14 but NVIDIA has no CUDA 13.2 image of it: the advice names the local base."""
    proc = run_build("plan", "--cuda", "13.2", "--python", "3.14")
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().endswith("or an os that has it (debian14)") and "ubuntu26.04" not in proc.stderr
    )
