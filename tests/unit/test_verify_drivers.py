"""The driver rule: a node whose NVIDIA driver is too old for torch's CUDA is reported as that,
with the fix, not as "no CUDA device". The rule and its facts (verify/data/cuda_drivers.json), the
driver version read from a real file in the kernel module's format, and the layer-1 checks and exit
code built from a collected environment block (data, as environment.collect() returns it)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.support import REPO
from verify.checks import Status
from verify.domain.report_json import EnvironmentJSON, TorchJSON
from verify.layers import drivers, environment
from verify.report import assemble as report_mod
from verify.runtime import exit_codes

# What /proc/driver/nvidia/version holds (the R535 and R580 lines as NVIDIA's kernel module prints them)
PROC_535 = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
PROC_580_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    "(dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 09:43:39 UTC 2025\nGCC version:  gcc version 13.3.0\n"
)


@pytest.mark.parametrize(
    "driver, cuda, ok",
    [
        ("580.65.06", "13.0", True),
        ("580.95.05", "13.2", True),  # minor version compatibility: any 13.y on R580
        ("590.10", "13.0", True),  # newer branches always work
        ("575.57.08", "13.0", False),  # R575 is the last branch before CUDA 13
        ("535.104.05", "13.0", False),
        ("535.104.05", "12.8", True),
        ("525.60.13", "12.4", True),
        ("525.60.11", "12.4", False),  # inside the branch, below NVIDIA's documented 525.60.13
        ("520.61.05", "12.0", False),
        ("470.256.02", "11.8", True),
        ("450.80.02", "11.1", True),
        ("450.51.06", "11.0", False),
    ],
)
def test_the_rule(driver: str, cuda: str, ok: bool) -> None:
    assert drivers.judge(driver, cuda).ok is ok


def test_facts_are_data_with_a_source() -> None:
    by_major = {f.cuda_major: f.branch for f in drivers.floors()}
    assert by_major == {11: 450, 12: 525, 13: 580}
    assert "docs.nvidia.com/deploy/cuda-compatibility" in drivers.source()
    assert drivers.judge("999.1", "14.0").ok is None  # a CUDA major the facts do not know: no verdict


def test_the_fix_names_the_branch_and_an_image_the_driver_runs() -> None:
    verdict = drivers.judge("535.104.05", "13.0")
    assert verdict.summary == "NVIDIA driver 535.104.05 (R535); CUDA 13.x needs R580+"
    assert verdict.fix().startswith(
        "upgrade the node's NVIDIA driver to R580 or newer, or use an image built for CUDA 12.x (R525+)"
    )


@pytest.mark.parametrize("text, version", [(PROC_535, "535.104.05"), (PROC_580_OPEN, "580.95.05")])
def test_driver_version_from_the_kernel_modules_file(tmp_path: Path, text: str, version: str) -> None:
    proc = tmp_path / "version"
    proc.write_text(text)
    assert environment.driver_version(proc) == (version, str(proc))


def _env(driver: str | None, cuda: str | None, available: bool) -> EnvironmentJSON:
    torch_info: TorchJSON = {
        "version": "2.11.0+cu130",
        "path": "/x",
        "cuda": cuda,
        "cxx11_abi": True,
        "arch_list": ["sm_90"] if cuda else [],
        "cuda_available": available,
        "device_count": 1 if available else 0,
        "gpu": {
            "name": "NVIDIA H200",
            "capability": "9.0",
            "sm": "sm_90",
            "memory_gib": 139.8,
            "multiprocessors": 132,
        }
        if available
        else None,
    }
    return {
        "python": {"version": "3.12.3", "executable": "/usr/bin/python3", "implementation": "CPython"},
        "platform": {},
        "torch": torch_info,
        "torch_error": None,
        "driver": environment._driver_block(
            driver, "/proc/driver/nvidia/version" if driver else None, torch_info
        ),
        "nvcc": None,
        "gcc": None,
    }


def _by_id(checks) -> dict:
    return {c.id: c for c in checks}


def test_too_old_driver_is_a_fail_with_the_fix_not_no_cuda_device() -> None:
    env = _env("535.104.05", "13.0", available=False)
    checks = _by_id(environment._checks(env))
    driver = checks["environment.driver"]
    assert driver.status is Status.FAIL
    assert "driver too old for this torch's CUDA 13.0" in driver.summary and "R580 or newer" in driver.summary
    assert driver.details["driver_branch"] == 535 and driver.details["needs_branch"] == 580
    assert (
        "too old" in checks["environment.gpu"].summary
        and "no CUDA device visible" not in checks["environment.gpu"].summary
    )
    assert environment.driver_too_old(env)


def test_too_old_driver_is_exit_3_in_the_report() -> None:
    import datetime

    env = _env("535.104.05", "13.0", available=False)
    checks = environment._checks(env)
    report = report_mod.build(
        mode="static",
        started_at=datetime.datetime.now(datetime.timezone.utc),
        duration_s=0.1,
        environment=env,
        apex={"installed": False, "kind": "not_installed", "path": None},
        manifest=None,
        extensions=[],
        checks=checks,
        timings=[],
        options={},
        environment_unavailable=environment.driver_too_old(env),
    )
    assert report["exit_code"] == exit_codes.ENVIRONMENT
    jsonschema.Draft202012Validator(
        json.loads((REPO / "verify/schema/report.schema.json").read_text())
    ).validate(report)


def test_a_new_enough_driver_passes_and_forward_compat_only_warns() -> None:
    good = _by_id(environment._checks(_env("580.95.05", "13.0", available=True)))["environment.driver"]
    assert good.status is Status.PASS and "CUDA 13.x needs R580+: OK" in good.summary
    compat_env = _env("535.104.05", "13.0", available=True)  # cuda-compat in the image: torch sees the GPU
    compat = _by_id(environment._checks(compat_env))["environment.driver"]
    assert compat.status is Status.WARN and not environment.driver_too_old(compat_env)


def test_no_driver_or_a_cpu_torch_is_only_information() -> None:
    assert (
        _by_id(environment._checks(_env(None, "13.0", available=False)))["environment.driver"].status
        is Status.INFO
    )
    cpu = _env("535.104.05", None, available=False)
    assert _by_id(environment._checks(cpu))["environment.driver"].status is Status.INFO
    assert not environment.driver_too_old(cpu)
