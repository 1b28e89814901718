"""Each verdict verify's static layers make, with inputs on both sides of its rule, so that a broken rule
turns a test red (`make mutation` checks that it does).

The inputs are real: ELF files with a real fatbin layout (tests/unit/test_verify_fatbin.py's writer), a
real git checkout, the module map verify ships. Nothing here stands in for the code under test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.test_verify_fatbin import elf_with_sections, fatbin_container
from verify.checks import Status
from verify.domain.report_json import EnvironmentJSON
from verify.layers import expectations, extensions, identity
from verify.layers.arch import arch_layer
from verify.layers.extensions import ExtensionResult
from verify.layers.manifest import BuildManifest

SASS, PTX = 2, 1  # fatbin entry kinds
H200 = (9, 0)
COMMIT_A = "6424da3b4faa6c8f062da4a48c424fff3f02d42d"
COMMIT_B = "0123456789abcdef0123456789abcdef01234567"


def _cuda_module(directory: Path, name: str, entries: list[tuple[int, int, int]]) -> ExtensionResult:
    so = directory / f"{name}.so"
    so.write_bytes(elf_with_sections({".nv_fatbin": fatbin_container(entries)}))
    return extensions.classify(name, {"status": "ok", "file": str(so)})


def _layers(tmp_path: Path, amp_c: list[tuple[int, int, int]]) -> tuple[dict, dict]:
    """(arch checks, expectation checks) by name for an amp_C with these fatbin entries and a FusedLayerNorm
    module with native sm_90, on an H200."""
    results = [
        _cuda_module(tmp_path, "amp_C", amp_c),
        _cuda_module(tmp_path, "fused_layer_norm_cuda", [(SASS, 90, 0x11)]),
    ]
    layer = arch_layer(results, H200, [H200])
    ok = {"status": "ok"}
    checks = expectations.expectation_checks(
        ("FusedAdam", "FusedLayerNorm"),
        list(layer.extensions),
        {"FusedAdam": ok, "FusedLayerNorm": ok},
        None,
        arch_fix="rebuild with TORCH_CUDA_ARCH_LIST=9.0",
    )
    return {c.name: c for c in layer.checks}, {c.name: c for c in checks}


# ----------------------------------------------------------------------------- arch + expectations
def test_native_sass_passes_and_the_feature_is_usable(tmp_path: Path) -> None:
    arch, expect = _layers(tmp_path, [(SASS, 90, 0x11)])
    assert arch["amp_C"].status is Status.PASS and arch["amp_C"].details["via"] == "sm_90"
    assert expect["feature.FusedAdam"].status is Status.PASS


def test_ptx_only_is_a_warn_since_it_runs_through_a_jit_compile(tmp_path: Path) -> None:
    arch, expect = _layers(tmp_path, [(SASS, 80, 0x11), (PTX, 80, 0x11)])
    assert arch["amp_C"].status is Status.WARN, arch["amp_C"].summary
    assert arch["amp_C"].details["via"] == "compute_80"
    assert arch["fused_layer_norm_cuda"].status is Status.PASS
    assert expect["feature.FusedAdam"].status is Status.PASS  # it runs: usable, with the arch WARN beside it


def test_a_feature_whose_module_has_no_code_for_this_gpu_is_unusable(tmp_path: Path) -> None:
    arch, expect = _layers(tmp_path, [(SASS, 80, 0x11)])
    assert arch["amp_C"].status is Status.FAIL
    fused_adam = expect["feature.FusedAdam"]
    assert fused_adam.status is Status.FAIL, fused_adam.summary
    assert "amp_C has no code for this GPU (built for sm_80 only)" in fused_adam.summary
    assert fused_adam.summary.endswith("; rebuild with TORCH_CUDA_ARCH_LIST=9.0")
    assert expect["feature.FusedLayerNorm"].status is Status.PASS  # only the feature that needs amp_C


def test_a_second_gpu_that_cannot_run_the_code_fails_the_arch_check(tmp_path: Path) -> None:
    results = [_cuda_module(tmp_path, "amp_C", [(SASS, 90, 0x11), (PTX, 90, 0x11)])]
    assert arch_layer(results, H200, [H200, H200]).checks[0].status is Status.PASS
    # an A100 beside the H200: sm_90 SASS and compute_90 PTX cannot run on 8.0
    assert arch_layer(results, H200, [H200, (8, 0)]).checks[0].status is Status.FAIL
    # a B200 beside it: only through PTX (a JIT compile), so a WARN
    assert arch_layer(results, H200, [H200, (10, 0)]).checks[0].status is Status.WARN


def test_an_entry_point_that_does_not_resolve_makes_the_feature_unusable(tmp_path: Path) -> None:
    results = [_cuda_module(tmp_path, "amp_C", [(SASS, 90, 0x11)])]
    layer = arch_layer(results, H200, [H200])
    broken = {"status": "error", "exc_type": "ImportError", "message": "cannot import name 'FusedAdam'"}
    check = expectations.expectation_checks(
        ("FusedAdam",), list(layer.extensions), {"FusedAdam": broken}, None
    )[0]
    assert check.status is Status.FAIL and "does not resolve (ImportError" in check.summary


def test_the_manifest_expected_modules_fail_when_one_is_not_usable() -> None:
    ok = extensions.classify("amp_C", {"status": "ok", "file": "/site/amp_C.so"})
    missing = extensions.classify("fused_layer_norm_cuda", {"status": "missing"})
    manifest = BuildManifest(
        expected_modules=("amp_C", "fused_layer_norm_cuda"),
        skipped_extensions=({"module": "fused_layer_norm_cuda", "warning": "no cuDNN"},),
    )
    checks = {c.name: c for c in expectations.expectation_checks((), [ok, missing], {}, manifest)}
    bad = checks["manifest.expected_modules"]
    assert bad.status is Status.FAIL
    assert bad.summary.startswith(
        "1 of 2 modules the build expected are not usable: fused_layer_norm_cuda (missing)"
    )
    assert "build warnings: fused_layer_norm_cuda: no cuDNN" in bad.summary
    good = {
        c.name: c
        for c in expectations.expectation_checks((), [ok], {}, BuildManifest(expected_modules=("amp_C",)))
    }
    assert good["manifest.expected_modules"].status is Status.PASS
    newer = BuildManifest(expected_modules=("amp_C", "a_module_from_the_future"))
    checks = {c.name: c for c in expectations.expectation_checks((), [ok], {}, newer)}
    assert checks["manifest.unknown_modules"].status is Status.WARN
    assert checks["manifest.expected_modules"].status is Status.FAIL  # still import-checked: it is missing


# ----------------------------------------------------------------------------- extensions
def _extension_verdicts(statuses: dict[str, str], expected: set[str]) -> dict[str, Status]:
    results = [
        extensions.classify(
            name, {"status": status, "file": f"/site/{name}.so"} if status == "ok" else {"status": status}
        )
        for name, status in statuses.items()
    ]
    return {c.name: c.status for c in extensions.extension_checks(results, expected)}


def test_a_core_module_missing_beside_built_ones_of_its_flag_is_a_partial_build_warn() -> None:
    verdicts = _extension_verdicts(
        {"amp_C": "ok", "fused_layer_norm_cuda": "missing", "xentropy_cuda": "missing"}, expected={"amp_C"}
    )
    assert verdicts["amp_C"] is Status.PASS
    assert verdicts["fused_layer_norm_cuda"] is Status.WARN  # APEX_CUDA_EXT built amp_C but not this one
    assert (
        "xentropy_cuda" not in verdicts and verdicts["not_built"] is Status.SKIP
    )  # a contrib flag never set
    # nothing of the flag built: the optional modules are one SKIP line, not a partial build
    nothing = _extension_verdicts({"amp_C": "missing", "fused_layer_norm_cuda": "missing"}, expected=set())
    assert nothing == {"not_built": Status.SKIP}
    # expected and missing: a FAIL whatever else is built
    assert (
        _extension_verdicts(
            {"amp_C": "ok", "fused_layer_norm_cuda": "missing"}, expected={"fused_layer_norm_cuda"}
        )["fused_layer_norm_cuda"]
        is Status.FAIL
    )


def test_a_module_that_imports_but_is_broken_fails_even_when_nobody_expects_it() -> None:
    broken = extensions.classify(
        "mlp_cuda",
        {
            "status": "error",
            "exc_type": "ImportError",
            "message": "undefined symbol: _ZN3c104cuda9SetDeviceEa",
        },
    )
    check = extensions.extension_checks([broken], set())[0]
    assert broken.status == "undefined_symbol" and check.status is Status.FAIL
    assert "built against another torch" in check.summary


# ----------------------------------------------------------------------------- identity
def _nvidia_info(package: Path, direct_url: dict | None = None) -> dict:
    return {
        "installed": True,
        "kind": "nvidia",
        "path": str(package),
        "distribution": None,
        "direct_url": direct_url,
        "legacy_apis": {},
    }


def _identity(info: dict, manifest: BuildManifest | None, exts: list[ExtensionResult]) -> dict:
    layer = identity.identity_layer(info, {"status": "ok"}, manifest, exts)
    return {c.name: c for c in layer.checks}


def test_compiled_modules_beside_the_package_are_one_install_and_elsewhere_a_mixed_one(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site-packages"
    (site / "apex").mkdir(parents=True)
    beside = extensions.classify("amp_C", {"status": "ok", "file": str(site / "amp_C.so")})
    checks = _identity(_nvidia_info(site / "apex"), None, [beside])
    assert checks["mixed_install"].status is Status.PASS, checks["mixed_install"].summary
    stale = extensions.classify(
        "fused_layer_norm_cuda", {"status": "ok", "file": str(tmp_path / "old" / "f.so")}
    )
    checks = _identity(_nvidia_info(site / "apex"), None, [beside, stale])
    assert checks["mixed_install"].status is Status.WARN
    assert f"fused_layer_norm_cuda from {tmp_path / 'old'}" in checks["mixed_install"].summary
    assert "amp_C" not in checks["mixed_install"].details["elsewhere"]
    missing = extensions.classify("amp_C", {"status": "missing"})
    assert _identity(_nvidia_info(site / "apex"), None, [missing])["mixed_install"].status is Status.SKIP


def test_the_commit_comes_from_the_manifest_and_a_disagreeing_package_record_is_a_warn(
    tmp_path: Path,
) -> None:
    package = tmp_path / "apex"
    package.mkdir()
    manifest = BuildManifest(apex={"commit": COMMIT_A})
    same = {"url": "https://github.com/NVIDIA/apex", "vcs_info": {"vcs": "git", "commit_id": COMMIT_A[:12]}}
    checks = _identity(_nvidia_info(package, same), manifest, [])
    assert checks["commit"].status is Status.INFO and checks["commit"].summary == (
        f"commit {COMMIT_A[:12]} (from build manifest)"
    )
    other = {"url": "https://github.com/NVIDIA/apex", "vcs_info": {"vcs": "git", "commit_id": COMMIT_B}}
    commit = _identity(_nvidia_info(package, other), manifest, [])["commit"]
    assert commit.status is Status.WARN, commit.summary
    assert f"package metadata (direct_url.json vcs_info) says {COMMIT_B[:12]}" in commit.summary
    unknown = _identity(_nvidia_info(package), None, [])["commit"]
    assert unknown.status is Status.WARN and "Apex commit unknown (no build manifest" in unknown.summary


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_git_checkout_at_another_commit_than_the_manifest_is_a_warn(tmp_path: Path) -> None:
    checkout = tmp_path / "apex-src"
    (checkout / "apex" / "optimizers").mkdir(parents=True)
    (checkout / "apex" / "__init__.py").write_text("")
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "apex"]):
        subprocess.run(
            ["git", "-C", str(checkout), *args], check=True, env=env, capture_output=True, timeout=60
        )
    head = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    info = _nvidia_info(checkout / "apex")  # an in-tree (develop) install: git is asked
    assert identity.resolve_commit(info, None) == (head, f"git checkout {checkout}", [])
    commit, source, disagree = identity.resolve_commit(info, BuildManifest(apex={"commit": COMMIT_B}))
    assert (commit, source) == (COMMIT_B, "build manifest")
    assert disagree == [f"git checkout {checkout} says {head[:12]}"]
    check = _identity(info, BuildManifest(apex={"commit": COMMIT_B}), [])["commit"]
    assert check.status is Status.WARN and "come from different builds" in check.summary


def test_a_package_that_is_not_nvidia_apex_fails_identity(tmp_path: Path) -> None:
    info = {
        "installed": True,
        "kind": "pypi_unrelated",
        "path": str(tmp_path / "apex"),
        "distribution": {"name": "apex", "version": "0.9.10dev", "summary": "Pyramid toolkit"},
        "direct_url": None,
        "legacy_apis": {},
    }
    failed_import = {
        "status": "error",
        "exc_type": "ModuleNotFoundError",
        "message": "No module named 'pyramid_mailer'",
    }
    layer = identity.identity_layer(info, failed_import, None, [])
    checks = {c.name: c for c in layer.checks}
    assert checks["apex"].status is Status.FAIL and "pip uninstall -y apex" in checks["apex"].summary
    assert checks["import"].status is Status.INFO  # not NVIDIA Apex: its import failing is not the finding
    assert "commit" not in checks and "mixed_install" not in checks
    nvidia = identity.identity_layer(_nvidia_info(tmp_path / "apex"), failed_import, None, [])
    assert {c.name: c for c in nvidia.checks}["import"].status is Status.FAIL
    absent = identity.identity_layer(
        {"installed": False, "kind": "not_installed", "path": None}, None, None, []
    )
    assert [c.status for c in absent.checks] == [Status.FAIL]


def test_the_report_block_says_what_identity_found(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "apex").mkdir(parents=True)
    layer = identity.identity_layer(
        _nvidia_info(site / "apex"), {"status": "ok"}, BuildManifest(apex={"commit": COMMIT_A}), []
    )
    assert layer.apex["commit"] == COMMIT_A and layer.apex["commit_source"] == "build manifest"
    assert json.loads(json.dumps(layer.apex))["mixed_install"] == {}


# ----------------------------------------------------------------------------- environment, report
def _h200_env(arch_list: list[str]) -> EnvironmentJSON:
    from tests.unit.test_verify_drivers import _env

    env = _env("580.95.05", "13.0", available=True)
    assert env["torch"]
    env["torch"]["arch_list"] = arch_list
    return env


def test_a_torch_not_built_for_this_gpu_is_a_warn_unless_its_ptx_covers_it() -> None:
    from verify.layers import environment

    def torch_arch(arch_list: list[str]) -> Status | None:
        return {c.id: c.status for c in environment._checks(_h200_env(arch_list))}.get(
            "environment.torch_arch"
        )

    assert torch_arch(["sm_80", "sm_90"]) is None
    assert torch_arch(["sm_80", "sm_86"]) is Status.WARN
    assert torch_arch(["sm_80", "compute_80"]) is None  # its PTX runs on sm_90
    assert torch_arch(["sm_100", "compute_100"]) is Status.WARN  # PTX never runs downwards


def test_any_fail_makes_the_run_fail_and_warn_skip_info_do_not() -> None:
    from verify.checks import Check
    from verify.report import assemble as report
    from verify.runtime import exit_codes

    def run(*statuses: Status) -> int:
        return report.exit_code(
            [Check("arch", f"m{i}", s, "x") for i, s in enumerate(statuses)], environment_unavailable=False
        )

    assert run(Status.PASS, Status.WARN, Status.SKIP, Status.INFO) == exit_codes.OK
    assert run(Status.PASS, Status.FAIL) == exit_codes.FAILED
    assert report.exit_code([], environment_unavailable=True) == exit_codes.ENVIRONMENT


def test_the_report_verdict_follows_the_checks_and_the_exit_code() -> None:
    import datetime

    from verify.checks import Check
    from verify.report import assemble as report

    def verdict(status: Status, unavailable: bool = False) -> tuple[str, int]:
        data = report.build(
            mode="static",
            started_at=datetime.datetime.now(datetime.timezone.utc),
            duration_s=0.1,
            environment={},
            apex={},
            manifest=None,
            extensions=[],
            checks=[Check("arch", "amp_C", status, "x")],
            timings=[],
            options={},
            environment_unavailable=unavailable,
        )
        return data["verdict"], data["exit_code"]

    assert verdict(Status.WARN) == ("PASS", 0)
    assert verdict(Status.FAIL) == ("FAIL", 1)
    assert verdict(Status.PASS, unavailable=True) == ("FAIL", 3)
