"""Apex ref x torch x CUDA: the compat.toml table, and validation refusing known-impossible cells before
any build (exit 2 from the CLI, nothing fetched). Resolved against the frozen facts of 2026-12-01; the live
table's evidence is checked in tests/unit/test_live_facts.py."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, frozen_facts, unpack_apex
from toolchain.builder import apex_setup
from toolchain.errors import MatrixError
from toolchain.spec import apex_refs, compat
from toolchain.spec.matrix import Cell, cli_cell, load_matrix
from verify.runtime import exit_codes

FACTS = frozen_facts()
HEAD = FACTS.apex_default_ref
BASE = {"python": "3.12", "archs": "9.0"}


def cell(values: dict[str, str]) -> Cell:
    return cli_cell({**BASE, **values}, facts=FACTS)


def test_the_table_has_both_kinds_of_row() -> None:
    rows = apex_refs.rows(FACTS)
    assert {r.status for r in rows} == {"compiles", "fails"}
    assert all(r.error and r.cause and r.fix_ref for r in rows if r.status == "fails")


@pytest.mark.parametrize("ref", ["25.04", "22.03", "24.04.01", "25.09"])
def test_pre_26bba57d_tags_on_cuda_13_are_refused_with_the_fix(ref: str) -> None:
    with pytest.raises(MatrixError) as stop:
        cell({"cuda": "13.0", "torch": "2.11", "apex_ref": ref})
    message = str(stop.value)
    assert f"Apex {ref} does not compile against CUDA 13.0" in message
    assert "Unsupported gpu architecture 'compute_70'" in message and "26bba57d" in message
    assert "use --cuda 12.8 (torch 2.11 ships it)" in message and f"--apex-ref {HEAD[:12]}" in message


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"cuda": "12.8", "torch": "2.11", "apex_ref": "25.04"}, "CUDA 12.8 still compiles sm_70"),
        (
            {"cuda": "13.0", "torch": "2.11", "apex_ref": "25.04", "apex_flags": "APEX_CPP_EXT"},
            "no nvcc compile",
        ),
        ({"cuda": "13.0", "torch": "2.11", "apex_ref": HEAD[:7]}, "upstream dropped the hard-coded archs"),
        ({"cuda": "13.0", "torch": "2.11", "apex_ref": "master"}, "a branch is left to the builder"),
        ({"cuda": "13.0", "torch": "2.11", "apex_ref": "25.10"}, "a tag after the known failure"),
    ],
)
def test_possible_pairs_pass(overrides: dict[str, str], why: str) -> None:
    assert cell(overrides).apex_ref == overrides["apex_ref"], why


def test_torch_without_an_older_cuda_gets_the_ref_fix_only() -> None:
    # facts where torch 2.11 ships cu130 alone: no CUDA to fall back to, so the fix is the Apex ref
    only_13 = dataclasses.replace(
        FACTS, torch={**FACTS.torch, "2.11": dataclasses.replace(FACTS.torch["2.11"], cuda=("13.0",))}
    )
    with pytest.raises(MatrixError) as stop:
        cli_cell({**BASE, "cuda": "13.0", "torch": "2.11", "apex_ref": "24.04"}, facts=only_13)
    assert "use --cuda" not in str(stop.value) and f"use --apex-ref {HEAD[:12]}" in str(stop.value)


def test_extras_a_ref_lacks_are_refused() -> None:
    with pytest.raises(MatrixError) as stop:
        cell({"cuda": "12.8", "torch": "2.7", "extras": "fmha"})  # the default commit: fmha removed
    assert "has no module for APEX_FMHA" in str(stop.value) and "526871a2" in str(stop.value)
    with pytest.raises(MatrixError) as stop:
        cell({"cuda": "12.4", "torch": "2.6", "apex_ref": "23.05", "extras": "group_norm"})
    assert "group_norm_cuda first appears in tag 23.08" in str(stop.value)
    assert cell({"cuda": "12.8", "torch": "2.7", "apex_ref": "25.04", "extras": "fmha"}).extras == ("fmha",)


def test_matrix_file_refuses_the_pair_with_the_cell_named(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(
        '[defaults]\npython = "3.12"\narchs = ["9.0"]\n\n'
        '[cells.ngc]\ncuda = "13.0"\ntorch = "2.11"\napex_ref = "24.04"\n\n'
        '[cells.ok]\ncuda = "12.8"\ntorch = "2.11"\napex_ref = "24.04"\n'
    )
    with pytest.raises(MatrixError) as stop:
        load_matrix(path, facts=FACTS)
    assert len(stop.value.problems) == 1 and stop.value.problems[0].cell == "cell ngc"
    assert 'use cuda = "12.8" in [cells.ngc]' in str(stop.value)
    done = subprocess.run(
        [sys.executable, "build.py", "validate", "--matrix", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == exit_codes.USAGE and "Traceback" not in done.stderr
    assert "cell ngc: Apex 24.04 does not compile against CUDA 13.0" in done.stderr


def test_table_and_source_check_agree_on_the_real_trees(tmp_path: Path) -> None:
    """The row refuses tag 25.04 on CUDA 13.0 by name; the builder refuses the 25.04 tree by its setup.py."""
    nvcc13 = set(FACTS.toolkit("13.0").archs)
    for name, ref in (("25.04", "25.04"), ("6424da3b", HEAD)):
        setup = apex_setup.read(unpack_apex(name, tmp_path / name))
        flags = {"APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1"}
        by_source = bool(setup.dropped_archs("--cuda_ext", nvcc13))
        by_table = apex_refs.known_failure(ref, "2.11.0", "13.0", list(flags), FACTS) is not None
        assert by_source == by_table == (name == "25.04")


def test_shown_to_compile_ranges() -> None:
    shown = apex_refs.shown_to_compile(HEAD, FACTS)
    torches = sorted({r.torch_min for r in shown if r.torch_min}, key=compat.version_key)
    assert torches[0] == "2.11" and torches[-1] == "2.14"
    assert any(r.flags == ("APEX_CPP_EXT",) for r in apex_refs.shown_to_compile("25.04", FACTS))
