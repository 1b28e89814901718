"""What run_gpu_layers runs or skips, decided before any kernel: CUDA present, extension modules usable."""

from __future__ import annotations

import time

import pytest

from verify.checks import LAYERS, Status
from verify.gpu import GpuResults, cases, plan, run_gpu_layers

CORE = frozenset({"amp_C", "fused_layer_norm_cuda"})


def test_the_case_table_is_consistent():
    ids = [(c.layer, c.name) for c in cases.ALL_CASES]
    assert len(ids) == len(set(ids))
    for c in cases.ALL_CASES:
        assert c.layer in LAYERS and c.group in cases.GROUP_MODULES
    # needs come from the module map, not from literals here
    assert cases.case("fused_adam.adamw.bf16").needs == {"amp_C"}
    assert cases.case("fused_rms_norm.plain.fp16").needs == {"fused_layer_norm_cuda"}
    assert cases.case("amp_step.bf16_autocast").needs == CORE
    assert {c.param("dtype") for c in cases.cases_of("parity_adam")} == {"fp32", "bf16", "fp16"}
    with pytest.raises(KeyError, match="unknown check group 'nope'"):
        cases.cases_of("nope")


def test_case_seeds_are_reproducible_and_distinct():
    names = [c.name for c in cases.ALL_CASES]
    assert len({cases.case_seed(7, n) for n in names}) == len(names)
    assert cases.case_seed(7, names[0]) == cases.case_seed(7, names[0]) != cases.case_seed(8, names[0])


def test_with_everything_usable_everything_runs():
    to_run, skipped = plan(CORE, None)
    assert skipped == []
    # one GPU: the report is what it always was, no smoke group (device 0 runs the full layers)
    assert list(to_run) == [g for g in cases.DEFAULT_GROUPS if g != "smoke"]
    assert sum(len(v) for v in to_run.values()) == sum(
        len(cases.cases_of(g)) for g in cases.DEFAULT_GROUPS if g != "smoke"
    )
    assert "large" not in to_run  # opt-in: --large


def test_every_further_gpu_gets_a_smoke_case_and_a_mismatched_one_is_skipped_by_name():
    to_run, skipped = plan(CORE, None, device_count=8)
    assert to_run["smoke"] == [f"smoke.cuda{i}" for i in range(1, 8)]
    assert all(cases.device_of(cases.case(n)) == i for i, n in enumerate(to_run["smoke"], 1))
    assert skipped == []
    # cuda:3 is another GPU whose arch the build does not cover: only its smoke case is skipped, by name
    usable = {i: CORE for i in range(8)} | {3: frozenset()}
    to_run, skipped = plan(CORE, None, device_count=8, device_usable=usable)
    assert "smoke.cuda3" not in to_run["smoke"] and len(to_run["smoke"]) == 6
    assert [c.id for c in skipped] == ["parity.smoke.cuda3"]
    assert skipped[0].summary.startswith("smoke.cuda3 (cuda:3): needs amp_C, fused_layer_norm_cuda")
    assert len(to_run["timing"]) == 5  # timing stays on cuda:0


def test_a_missing_module_skips_what_needs_it_naming_the_module():
    to_run, skipped = plan(frozenset({"amp_C"}), None)
    assert set(to_run) == {"parity_adam", "compile", "timing"}
    assert to_run["timing"] == ["fused_adam.fp32"]
    assert to_run["compile"] == ["fused_adam.fp32.compiled_step"]
    by_id = {c.id: c for c in skipped}
    assert set(by_id) == {
        "parity.fused_layer_norm",
        "parity.fused_rms_norm",
        "parity.amp_step",
        "compile.fused_layer_norm",
        "compile.fused_rms_norm",
        "compile.amp_step",
        "compile.opcheck",
        "timing.fused_layer_norm",
        "timing.fused_rms_norm",
    }
    for check in skipped:
        assert check.status is Status.SKIP
        assert "needs fused_layer_norm_cuda" in check.summary and "no kernel was run" in check.summary
        assert check.details["missing"] == ["fused_layer_norm_cuda"]


def test_nothing_usable_skips_every_family_once():
    to_run, skipped = plan(frozenset(), None)
    assert to_run == {}
    # parity: adam, layer norm, rms norm, amp step; compile: the same and opcheck; timing: adam, the norms
    assert len(skipped) == 12


def test_on_this_cpu_machine_everything_is_skip_and_nothing_is_spawned():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    started = time.monotonic()
    results = run_gpu_layers(seed=11, check_timeout_s=5, usable_modules=CORE)
    assert isinstance(results, GpuResults)
    assert time.monotonic() - started < 5
    assert results.groups == [] and results.timings == []
    assert results.checks and all(c.status is Status.SKIP for c in results.checks)
    assert all("no CUDA device visible to torch" in c.summary for c in results.checks)
    assert [c.layer for c in results.checks] == sorted(
        (c.layer for c in results.checks), key=["parity", "compile", "timing"].index
    )


def test_results_serialize_with_the_check_contract():
    results = run_gpu_layers(seed=1, check_timeout_s=5, usable_modules=frozenset())
    for check in results.checks:
        data = check.to_json()
        assert data["id"] == f"{check.layer}.{check.name}" and data["status"] in {
            "SKIP",
            "PASS",
            "FAIL",
            "INFO",
        }


def test_compile_is_on_by_default_large_only_when_asked():
    from verify.gpu import opted_out, selected_groups

    assert "compile" in selected_groups() and "large" not in selected_groups()
    assert "large" in selected_groups(large=True)
    assert "compile" not in selected_groups(compile_layer=False)
    assert [c.id for c in opted_out(compile_layer=False)] == ["compile.all"]
    assert opted_out(compile_layer=True) == []


def test_large_cases_are_refused_by_the_memory_they_need_with_the_figures():
    from verify.gpu import large_refusals, large_sizes, selected_groups

    to_run, skipped = plan(CORE, None, selected_groups(large=True))
    assert to_run["large"] == ["fused_layer_norm.bf16.past_2_31", "fused_adam.fp32.past_2_31"]
    needs = {n: large_sizes.SIZES[n].bytes_needed for n in to_run["large"]}
    # every case is past 2^31 elements, and says so in its size record
    assert all(large_sizes.SIZES[n].numel > large_sizes.LIMIT for n in needs)
    # a 24 GiB device holds the norm case (4 bf16 tensors + headroom) but not Adam's four fp32 tensors
    small = 24 * 2**30
    assert needs["fused_layer_norm.bf16.past_2_31"] <= small < needs["fused_adam.fp32.past_2_31"]
    kept, refused = large_refusals(to_run, small)
    assert kept["large"] == ["fused_layer_norm.bf16.past_2_31"]
    assert [c.id for c in refused] == ["large.fused_adam.fp32.past_2_31"]
    assert refused[0].status is Status.SKIP
    assert "needs 36.0 GiB of GPU memory; cuda:0 has 24.0 GiB: not run" in refused[0].summary
    # a device too small for both: no large group is left to start; unknown memory: the worker decides
    kept, refused = large_refusals(to_run, 8 * 2**30)
    assert "large" not in kept and len(refused) == 2
    assert large_refusals(to_run, None) == (to_run, [])


def test_a_large_case_that_crashed_names_the_limit_and_the_upstream_issues():
    from verify.checks import Check
    from verify.gpu import large_sizes, name_the_limit

    crashed = Check("large", "fused_adam.fp32.past_2_31", Status.FAIL, "the worker process died (SIGABRT)")
    passed = Check("large", "fused_layer_norm.bf16.past_2_31", Status.PASS, "this build handles it")
    other = Check("parity", "fused_adam.adam.fp32", Status.FAIL, "wrong")
    name_the_limit([crashed, passed, other])
    assert crashed.summary.endswith(f"(past the 2^31-element limit: {large_sizes.UPSTREAM})")
    assert "Apex #2014" in crashed.summary and "#1989" in crashed.summary
    assert passed.summary == "this build handles it" and other.summary == "wrong"
