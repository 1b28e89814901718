"""Every validation error path: a real TOML file per case, the message names the cell and the fix,
and `build.py validate` exits 2 with one line per problem and no traceback."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support import frozen_cell, frozen_matrix, run_build
from toolchain.errors import MatrixError, UsageError
from verify.runtime import exit_codes

# The rule tests read a frozen copy of the facts (frozen_cell, frozen_matrix), so a new torch or toolkit
# row does not change them.
HEADER = """
format_version = 1
[defaults]
python = "3.12"
archs = ["8.0", "9.0"]
"""

# name -> (matrix body after HEADER, fragments the message must hold: the cell, the problem, the fix)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "torch_without_wheel_for_cuda": (
        '[cells.old]\ncuda = "12.4"\ntorch = "2.8"\n',
        (
            "cell old",
            "torch 2.8 has no wheel for CUDA 12.4",
            "it ships cu126, cu128, cu129",
            'torch = "2.6" in [cells.old]',
        ),
    ),
    "python_outside_torch_range": (
        '[cells.py38]\ncuda = "12.6"\ntorch = "2.7"\npython = "3.8"\nos = "ubuntu20.04"\n',
        ("cell py38", "Python 3.8 is outside torch 2.7's range 3.9-3.13", 'python = "3.9"'),
    ),
    "python_too_new": (
        '[cells.py314]\ncuda = "12.6"\ntorch = "2.6"\npython = "3.14"\n',
        # the fix names a Python that ubuntu24.04 also ships, not just torch's upper bound
        ("cell py314", "Python 3.14 is outside torch 2.6's range 3.9-3.13", 'python = "3.12"'),
    ),
    "python_the_os_does_not_ship": (
        '[cells.jammy]\ncuda = "12.4"\npython = "3.12"\n',
        (
            "cell jammy",
            "ubuntu22.04 has no python3.12 package (it has 3.10, 3.11)",
            'python = "3.11"',
            # no "an os that has it": ubuntu24.04 has 3.12 but no CUDA 12.4 image, and no local base has 3.12
            "in [cells.jammy]",
        ),
    ),
    "gcc_newer_than_nvcc_allows": (
        '[cells.gcc]\ncuda = "12.4"\nos = "ubuntu22.04"\ngcc = "14"\n',
        # newest nvcc 12.4 allows is 13, but ubuntu22.04 packages gcc up to 12: the fix names one it has
        ("cell gcc", "GCC 14 is newer than nvcc 12.4 allows (newest: 13)", 'gcc = "12"', "CUDA 12.8+"),
    ),
    "gcc_the_os_does_not_have": (
        '[cells.gcc]\ncuda = "12.8"\nos = "ubuntu22.04"\ngcc = "13"\n',
        ("cell gcc", "ubuntu22.04 has no gcc-13 package", 'gcc = "11"'),
    ),
    "arch_the_toolkit_cannot_compile": (
        '[cells.blackwell]\ncuda = "12.4"\narchs = ["9.0", "10.0"]\n',
        ("cell blackwell", "arch 10.0 cannot be compiled by nvcc 12.4", "drop 10.0", "CUDA 12.8-13.5"),
    ),
    "arch_dropped_by_new_toolkit": (
        '[cells.volta]\ncuda = "13.0"\narchs = "7.0"\n',
        ("cell volta", "arch 7.0 cannot be compiled by nvcc 13.0", "CUDA 11.8-12.9"),
    ),
    "arch_not_a_capability": (
        '[cells.sm]\ncuda = "12.4"\narchs = ["sm_90"]\n',
        ("cell sm", "'sm_90' is not a compute capability", "write it as 9.0"),
    ),
    "unknown_key_in_cell": (
        '[cells.typo]\ncuda = "12.4"\narchz = ["9.0"]\n',
        ("cell typo", "unknown key 'archz'", "did you mean 'archs'?"),
    ),
    "unknown_key_in_defaults": (
        '[cells.ok]\ncuda = "12.4"\n[defaults.extra]\n',  # a sub-table of [defaults] is an unknown key
        ("[defaults]", "unknown key 'extra'", "did you mean 'extras'?"),
    ),
    "unknown_top_level_key": (
        '[cells.ok]\ncuda = "12.4"\n[cell.typo]\ncuda = "12.4"\n',
        ("top level", "unknown key 'cell'", "did you mean 'cells'?"),
    ),
    "cuda_as_a_number": (
        "[cells.num]\ncuda = 12.4\n",
        ("cell num", "cuda = 12.4 is a number", 'quote it: cuda = "12.4"'),
    ),
    "cuda_without_wheels": (
        '[cells.c125]\ncuda = "12.5"\n',
        ("cell c125", "CUDA '12.5' has no PyTorch wheels", 'cuda = "12.6" in [cells.c125]'),
    ),
    "os_without_images_for_cuda": (
        '[cells.noble]\ncuda = "12.4"\nos = "ubuntu24.04"\n',
        ("cell noble", "NVIDIA publishes no CUDA 12.4 images for ubuntu24.04", 'os = "ubuntu22.04"'),
    ),
    "invalid_tag_characters": (
        '[cells.tagged]\ncuda = "12.4"\ntag = "apex:cu124/latest"\n',
        ("cell tagged", "tag 'apex:cu124/latest' has characters '/:'", "only letters, digits"),
    ),
    "tag_too_long": (
        f'[cells.long]\ncuda = "12.4"\ntag = "{"x" * 129}"\n',
        (
            "cell long",
            "is 129 characters long (docker allows 128)",
        ),
    ),
    "apex_ref_that_cannot_be_a_tag": (
        '[cells.branch]\ncuda = "12.4"\napex_ref = "release/24.04"\n',
        (
            "cell branch",
            "apex_ref 'release/24.04' cannot be part of an image tag",
            'tag = "my-tag" in [cells.branch]',
        ),
    ),
    "apex_ref_not_a_ref": (
        '[cells.ref]\ncuda = "12.4"\napex_ref = "main branch"\n',
        ("cell ref", "apex_ref 'main branch' is not a git commit, tag or branch name", "a commit sha"),
    ),
    "unknown_extra": (
        '[cells.x]\ncuda = "12.4"\nextras = ["xentrpy"]\n',
        ("cell x", "unknown contrib extension 'xentrpy'", "did you mean 'xentropy'?"),
    ),
    "unknown_apex_flag": (
        '[cells.f]\ncuda = "12.4"\napex_flags = ["APEX_CUDA_EXTS"]\n',
        ("cell f", "unknown flag APEX_CUDA_EXTS", "did you mean 'APEX_CUDA_EXT'?"),
    ),
    "duplicate_tags": (
        '[cells.one]\ncuda = "12.4"\n[cells.two]\ncuda = "12.4"\ntorch = "2.6"\n',
        ("cell two", "same image tag as cell one", "change its python/archs/extras"),
    ),
    "unknown_torch": (
        '[cells.t]\ncuda = "12.4"\ntorch = "1.13"\n',
        ("cell t", "torch '1.13' is not in the compatibility facts", 'torch = "2.6"'),
    ),
    "no_cells": (
        "",
        ("[cells]", "no cells defined", "add at least one [cells.NAME]"),
    ),
}


def write(tmp_path: Path, body: str, header: str = HEADER) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(textwrap.dedent(header) + body)
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_problem_names_the_cell_and_the_fix(tmp_path: Path, case: str) -> None:
    body, fragments = CASES[case]
    path = write(tmp_path, body)
    with pytest.raises(MatrixError) as caught:
        frozen_matrix(path)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert caught.value.exit_code == exit_codes.USAGE


@pytest.mark.parametrize(
    "case",
    [
        "torch_without_wheel_for_cuda",
        "unknown_key_in_cell",
        "invalid_tag_characters",
        "gcc_newer_than_nvcc_allows",
        "arch_the_toolkit_cannot_compile",
    ],
)
def test_validate_cli_exits_2_with_one_line_and_no_traceback(tmp_path: Path, case: str) -> None:
    body, fragments = CASES[case]
    proc = run_build("validate", "--matrix", str(write(tmp_path, body)))
    assert proc.returncode == exit_codes.USAGE, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    # the repo's live facts: the cell and the problem (the fix may name the newest CUDA, which moves)
    assert all(f in lines[0] for f in fragments[:2]) and "; " in lines[0]
    assert proc.stdout == ""  # nothing was validated as OK, nothing built


def test_malformed_toml(tmp_path: Path) -> None:
    path = tmp_path / "matrix.toml"
    path.write_text('[cells.a]\ncuda = "12.4\n')
    with pytest.raises(UsageError, match=r"malformed TOML .*line 2.*fix the syntax"):
        frozen_matrix(path)
    proc = run_build("validate", "--matrix", str(path))
    assert proc.returncode == exit_codes.USAGE and "Traceback" not in proc.stderr
    assert str(path) in proc.stderr and "malformed TOML" in proc.stderr


def test_missing_matrix_file(tmp_path: Path) -> None:
    proc = run_build("plan", "--matrix", str(tmp_path / "nope.toml"))
    assert proc.returncode == exit_codes.USAGE
    assert "file not found" in proc.stderr and "--matrix" in proc.stderr


def test_all_problems_are_reported_together(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[cells.a]\ncuda = "12.4"\ntorch = "2.8"\n[cells.b]\ncuda = "12.4"\narchz = "9.0"\n'
    )
    with pytest.raises(MatrixError) as caught:
        frozen_matrix(path)
    assert len(caught.value.problems) == 2
    proc = run_build("validate", "--matrix", str(path))
    assert proc.returncode == exit_codes.USAGE
    assert "2 problems, nothing built" in proc.stderr
    assert "cell a: torch 2.8" in proc.stderr and "cell b: unknown key 'archz'" in proc.stderr


def test_defaults_are_checked_once_and_named(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[cells.a]\ncuda = "12.4"\n',
        header='[defaults]\npython = "3.12"\narchs = ["9.0"]\npyton = "3"\n',
    )
    with pytest.raises(MatrixError) as caught:
        frozen_matrix(path)
    assert [p.cell for p in caught.value.problems] == ["[defaults]"]
    assert "did you mean 'python'?" in str(caught.value)


def test_command_line_problems_name_the_option(tmp_path: Path) -> None:
    path = write(tmp_path, '[cells.a]\ncuda = "12.4"\n')
    with pytest.raises(MatrixError) as caught:
        frozen_cell({"cuda": "12.4", "torch": "2.8"}, matrix_path=path)
    message = str(caught.value)
    assert message.startswith("command line: torch 2.8 has no wheel for CUDA 12.4")
    assert "--torch 2.6" in message
    # nvcc 12.4 allows GCC 13, but the fix names the newest GCC the OS packages too
    with pytest.raises(MatrixError, match=r"cell a with command-line overrides: GCC 14 .*--gcc 12"):
        frozen_cell({"gcc": "14"}, matrix_path=path, base_cell="a")  # ubuntu22.04: gcc 9-12
    with pytest.raises(
        MatrixError, match=r"GCC 14 is newer than nvcc 12.4 allows \(newest: 13\); use --gcc 13"
    ):
        frozen_cell(
            {"gcc": "14", "os": "ubuntu24.04"}, matrix_path=path, base_cell="a"
        )  # ubuntu24.04: gcc 9-14


def test_unknown_cell_name(tmp_path: Path) -> None:
    path = write(tmp_path, '[cells.a]\ncuda = "12.4"\n')
    proc = run_build("plan", "--matrix", str(path), "--cell", "b")
    assert proc.returncode == exit_codes.USAGE
    assert "--cell b: no such cell" in proc.stderr and "use one of a" in proc.stderr
