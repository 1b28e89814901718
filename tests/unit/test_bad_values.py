"""Hostile and bad values, made for real: real `make`, real scripts, real matrix files, build.py and
verify as subprocesses. Each is refused before anything is built (exit 2, one message naming the
input, the problem and the fix), and nothing in a value ever runs as a command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import REPO, frozen_matrix, unpack_apex
from toolchain.errors import MatrixError
from verify.runtime import exit_codes, messages
from verify.runtime.out_dirs import OutputDirs

HEADER = 'format_version = 1\n[defaults]\npython = "3.11"\narchs = ["8.0", "9.0"]\n'


def run(
    argv: list[str], *, cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "DOCKER_HOST")}
    full_env.update(env or {})
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=full_env, timeout=timeout)


def build(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, str(REPO / "build.py"), *args], cwd=cwd, env=env)


def refused(proc: subprocess.CompletedProcess[str], *fragments: str, code: int = exit_codes.USAGE) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)
    return proc.stderr


def matrix(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(HEADER + textwrap.dedent(body), encoding="utf-8")
    return path


# --- 1. one quoting rule for the Makefile -----------------------------------------------------

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


@needs_make
@pytest.mark.parametrize("variable", ["CUDA", "TORCH", "ARCHS", "CELL", "TARGET", "GCC"])
@pytest.mark.parametrize("shape", ["quote", "make-function", "command-substitution", "backtick"])
def test_make_never_runs_a_value(tmp_path: Path, variable: str, shape: str) -> None:
    marker = tmp_path / f"pwned-{variable}-{shape}"
    value = {
        "quote": f"12.4'; touch {marker}; echo '",
        "make-function": f"$(shell touch {marker})",
        "command-substitution": f"$(touch {marker})",
        "backtick": f"`touch {marker}`;x",
    }[shape]
    proc = run(["make", "plan", "CUDA=12.4", f"{variable}={value}", f"PY={sys.executable}"])
    assert not marker.exists(), f"make ran part of {variable}={value!r}"
    assert proc.returncode == 2, (proc.stdout, proc.stderr)  # make's own code for a failed recipe
    assert "Traceback" not in proc.stderr
    # build.py got the text (ARCHS is split into archs, so look for the marker's name) and refused it
    assert marker.name in proc.stderr and "error: " in proc.stderr, proc.stderr


@needs_make
def test_make_stops_on_a_line_break_even_with_ignore_errors(tmp_path: Path) -> None:
    marker = tmp_path / "pwned-newline"
    proc = run(["make", "-i", "plan", f"CUDA=12.4\ntouch {marker} #", f"PY={sys.executable}"])
    assert not marker.exists()
    assert proc.returncode == 2 and "CUDA holds a line break" in proc.stderr


@needs_make
def test_make_exit_code_is_2_and_names_build_py_code(tmp_path: Path) -> None:
    """The README's rule: make exits 2 when build.py fails; `Error N` carries build.py's own code."""
    ok = run(["make", "-s", "plan", "CUDA=12.4", f"PY={sys.executable}"])
    assert ok.returncode == 0, ok.stderr
    bad = run(["make", "plan", "CUDA=12.5", f"PY={sys.executable}"])
    assert bad.returncode == 2 and "Error 2" in bad.stderr
    no_daemon = run(
        ["make", "image", "CUDA=12.4", f"PY={sys.executable}"],
        env={"DOCKER_HOST": f"unix://{tmp_path}/nobody.sock"},
    )
    assert no_daemon.returncode == 2 and "Error 3" in no_daemon.stderr, no_daemon.stderr  # build.py said 3


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("BASE_IMAGE", "--help", "BASE_IMAGE is not an image name"),
        ("BASE_SUITE", "--variant=x", "BASE_SUITE is not a Debian suite name"),
        ("DEBIAN_MIRROR", "x'; touch {marker}; '", "DEBIAN_MIRROR is not an http(s):// or file:// URL"),
    ],
)
def test_ensure_docker_refuses_option_like_values_before_doing_anything(
    tmp_path: Path, variable: str, value: str, needle: str
) -> None:
    marker = tmp_path / "pwned"
    proc = run(
        ["bash", str(REPO / "scripts" / "ensure-docker.sh")],
        cwd=tmp_path,
        env={variable: value.format(marker=marker)},
    )
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert "[ensure-docker]" in proc.stderr and not marker.exists()
    assert "installing" not in proc.stdout and "starting dockerd" not in proc.stdout


# --- 2. bad input refused before any build ----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--archs", ";"], ("archs is empty", "--archs 9.0")),
        (
            ["--apex-flags", "APEX_CPP_EXT=0,APEX_CUDA_EXT"],
            ("'APEX_CPP_EXT=0' turns a flag off", "drop APEX_CPP_EXT"),
        ),
        (["--apex-flags", "APEX_CPP_EXT=false"], ("turns a flag off",)),
        (["--apex-flags", "APEX_CPP_EXT=yes"], ("is not a flag to turn on", "write APEX_CPP_EXT")),
        (
            ["--torch", "2.6.99"],
            ("torch 2.6.99 is not a release in the compatibility facts (torch 2.6: 2.6.0)", "--torch 2.6.0"),
        ),
        (
            ["--apex-repo=--upload-pack=touch /tmp/x"],
            (
                "apex_repo '--upload-pack=touch /tmp/x' is not a git URL",
                "--apex-repo https://github.com/NVIDIA/apex.git",
            ),
        ),
        (["--apex-repo", "github.com/NVIDIA/apex"], ("is not a git URL or an absolute path",)),
        (
            ["--torch-index-url", "download.pytorch.org/whl/cu124"],
            ("torch_index_url", "not an http(s):// or file:// URL"),
        ),
        (["--torch-index-url=--extra-index-url=http://evil"], ("torch_index_url",)),
        (
            ["--cuda", "１２.4"],
            (
                "cuda '１２.4' has non-ASCII characters (U+FF11 FULLWIDTH DIGIT ONE",
                "write it in ASCII: --cuda 12.4",
            ),
        ),
        (["--python", "٣.١١"], ("U+0663 ARABIC-INDIC DIGIT THREE", "--python 3.11")),
        (["--gcc", "١١"], ("gcc '١١' has non-ASCII characters", "--gcc 11")),
        (["--archs", "９.0"], ("archs '９.0' has non-ASCII characters", "9.0")),
    ],
)
def test_bad_cli_values_are_refused_before_any_build(
    tmp_path: Path, args: list[str], fragments: tuple
) -> None:
    # `image` with a dead daemon: had the value been accepted, the run would reach the daemon check (exit 3)
    proc = build(
        "image",
        "--matrix",
        str(REPO / "matrix.toml"),
        "--cuda",
        "12.4",
        *args,
        "--out",
        str(tmp_path / "out"),
        "--logs",
        str(tmp_path / "logs"),
        cwd=tmp_path,
        env={"DOCKER_HOST": f"unix://{tmp_path}/nobody.sock"},
    )
    refused(proc, *fragments)
    assert not (tmp_path / "out").exists() and not (tmp_path / "logs").exists()


def test_flags_written_as_1_still_build() -> None:
    proc = build("plan", "--cuda", "12.4", "--apex-flags", "APEX_CPP_EXT=1,apex_cuda_ext", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["build_args"]["APEX_FLAGS"] == "APEX_CPP_EXT=1 APEX_CUDA_EXT=1"


def test_known_patches_are_accepted() -> None:
    # 2.4.0 with an Apex ref that takes it (the pinned commit declares torch>=2.6.0); 2.14.0 added once the facts check found it
    for torch, cuda, *more in (
        ("2.7.0", "12.6"),
        ("2.7.1", "12.6"),
        ("2.4.0", "12.4", "--apex-ref", "25.04"),
        ("2.14.0", "13.0"),
    ):
        proc = build("plan", "--cuda", cuda, "--torch", torch, *more, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["build_args"]["TORCH_VERSION"] == torch


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        ('[cells.e]\ncuda = "12.4"\narchs = []\n', ("cell e: archs is empty", 'archs = "9.0" in [cells.e]')),
        (
            '[cells.s]\ncuda = "12.4"\narchs = 9.0\n',
            ("cell s: archs = 9.0 is a number, not a list", 'archs = ["9.0"]'),
        ),
        ('[cells.b]\ncuda = "12.4"\nextras = true\n', ("extras must be an array of strings, not a boolean",)),
        (
            '[cells.n]\ncuda = "12.4"\narchs = ["9.0", ["8.0"], {a = 1}]\n',
            ("archs[1] must be a string, not an array", "archs[2] must be a string, not a table"),
        ),
        ('[cells.l]\ncuda = ["12.4"]\n', ("cuda must be a string, not an array",)),
        ("[cells.d]\ncuda = 1979-05-27\n", ("cuda must be a string, not a date/time",)),
        (
            '[cells.h]\ncuda = "12.4"\ngcc = 99999999999999999999999999\n',
            ("gcc = 99999999999999999999999999 is a number",),
        ),
        (
            '[cells.u]\ncuda = "１２.4"\n',
            ("cell u: cuda '１２.4' has non-ASCII characters", 'write it in ASCII: "12.4"'),
        ),
        ('[cells.a]\ncuda = "12.4"\narchs = ["٩.٠"]\n', ("archs[0] '٩.٠' has non-ASCII", '"9.0"')),
        (
            '[cells.z]\ncuda = "12.4"\nos = "ubuntu22.04\\u200b"\n',
            ("U+200B ZERO WIDTH SPACE", '"ubuntu22.04"'),
        ),
        ('[cells.c]\ncuda = "12.4"\napex_ref = "main\\u0000"\n', ("holds a control character (U+0000)",)),
        (
            '[cells.r]\ncuda = "12.4"\napex_repo = "--upload-pack=touch /tmp/x"\n',
            ("apex_repo", "not a git URL"),
        ),
        ('[cells.i]\ncuda = "12.4"\ntorch_index_url = "ftp://x"\n', ("torch_index_url 'ftp://x'",)),
        ('[cells."a b"]\ncuda = "12.4"\n', ("cell 'a b': the cell name has characters", "rename the table")),
        ('[cells.f]\ncuda = "12.4"\napex_flags = ["APEX_CPP_EXT=0"]\n', ("turns a flag off",)),
    ],
)
def test_bad_matrix_values_name_the_field_and_the_fix(tmp_path: Path, body: str, fragments: tuple) -> None:
    proc = build("validate", "--matrix", str(matrix(tmp_path, body)))
    refused(proc, *fragments)


def test_one_bad_axis_does_not_hide_the_other_problems_of_the_cell(tmp_path: Path) -> None:
    """CUDA 12.5 has no wheels; the cell's torch, python, arch, base image, tag and repo are wrong too."""
    path = matrix(
        tmp_path,
        """
        [cells.many]
        cuda = "12.5"
        torch = "2.99"
        archs = ["9.x"]
        base_devel = "Not An Image"
        tag = "a:b"
        apex_repo = "-x"
        apex_flags = ["APEX_CPP_EXT=0"]
        [cells.other]
        cuda = "12.4"
        torch = "2.6.7"
        python = "3.12"
    """,
    )
    with pytest.raises(MatrixError) as caught:
        frozen_matrix(path)
    text = str(caught.value)
    for fragment in (
        "cell many: CUDA '12.5' has no PyTorch wheels",
        "cell many: torch '2.99' is not in the",
        "cell many: arch '9.x'",
        "cell many: base_devel 'Not An Image'",
        "cell many: tag 'a:b'",
        "cell many: apex_repo '-x'",
        "cell many: apex_flags: 'APEX_CPP_EXT=0'",
        "cell other: torch 2.6.7 is not a release",
        "cell other: ubuntu22.04 has no python3.12",
    ):
        assert fragment in text, (fragment, text)
    assert len(caught.value.problems) == 9


def test_cells_that_differ_only_in_dot_and_underscore_are_two_bake_targets_no_more(tmp_path: Path) -> None:
    path = matrix(
        tmp_path, '[cells."cu12.4"]\ncuda = "12.4"\n[cells.cu12_4]\ncuda = "12.4"\npython = "3.10"\n'
    )
    assert build("validate", "--matrix", str(path)).returncode == 0  # both are fine cells on their own
    out = tmp_path / "bake.json"
    proc = build("bake", "--matrix", str(path), "-o", str(out))
    refused(proc, "cells cu12.4 and cu12_4 both become bake target 'cu12_4'", "rename one of them")
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "env", "fragment"),
    [
        (
            ["gh-matrix", "--registry", "ghcr.io/Acme/apex:latest"],
            {},
            "--registry 'ghcr.io/Acme/apex:latest': not an image",
        ),
        (["bake", "--registry", "--x"], {}, "expected one argument"),
        (["bake", "--registry=-x"], {}, "--registry '-x': not an image repository"),
        (["bake", "--cache", "registry", "--cache-ref", "a b"], {}, "--cache-ref 'a b'"),
        (
            ["gh-matrix"],
            {"APEX_IMAGE_REGISTRY": "x y"},
            "$APEX_IMAGE_REGISTRY 'x y': not an image repository",
        ),
        (["pull", "--cuda", "12.4", "--registry", "ghcr.io/acme/apex;rm"], {}, "not an image repository"),
    ],
)
def test_registry_shape_is_checked(args: list[str], env: dict, fragment: str) -> None:
    refused(build(*args, env=env), fragment)


def test_a_good_registry_still_works() -> None:
    proc = build("gh-matrix", "--registry", "127.0.0.1:5000/acme/apex", "--cell", "cu124")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["include"][0]["image"].startswith("127.0.0.1:5000/acme/apex:apex-")


# --- 3. messages ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (
            ["plna", "--cuda", "12.4"],
            ("unknown command 'plna'; did you mean 'plan'?", "(commands: plan, validate"),
        ),
        (["valdate"], ("did you mean 'validate'?",)),
        (["xyzzy"], ("unknown command 'xyzzy'; (commands:",)),
        (["plan", "--cdua", "12.4"], ("build.py plan: unknown option '--cdua'; did you mean '--cuda'?",)),
        (["plan", "--cuda", "12.4", "stray"], ("unexpected argument 'stray'",)),
        (
            ["plan", "--cell", "cu1288"],
            ("--cell cu1288: no such cell", "did you mean 'cu128'?", "cells: cu124, cu126"),
        ),
        (
            ["plan", "--cuda", "cu124"],
            ("CUDA 'cu124' is a PyTorch wheel tag, not a CUDA version; use --cuda 12.4",),
        ),
        (["plan", "--cuda", "cu130"], ("use --cuda 13.0",)),
        (["plan", "--cuda", "cu125"], ("use --cuda 12.6 (CUDA 12.5 has no PyTorch wheels)",)),
        (
            ["plan", "--progress", "loud"],
            ("build.py plan: argument --progress: invalid choice", "see `build.py plan --help`"),
        ),
    ],
)
def test_build_py_suggests_what_was_meant(args: list[str], fragments: tuple) -> None:
    err = refused(build(*args), *fragments)
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1  # one line, no usage block


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (
            ["--cuda", "12.4", "--os", "ubuntu20.04", "--gcc", "14"],
            ("newest: 13", "--gcc 10"),
        ),  # 20.04: gcc 7-10
        (["--cuda", "12.8", "--os", "ubuntu22.04", "--gcc", "13"], ("ubuntu22.04 has no gcc-13", "--gcc 11")),
        (
            ["--cuda", "12.8", "--torch", "2.8", "--python", "3.9", "--os", "ubuntu20.04", "--gcc", "13"],
            ("ubuntu20.04 has no gcc-13", "--gcc 9"),
        ),
        (["--cuda", "12.4", "--gcc", "x"], ("GCC 'x' is not a major version", "--gcc 11")),
    ],
)
def test_gcc_fixes_name_one_the_os_packages_and_nvcc_accepts(args: list[str], fragments: tuple) -> None:
    refused(build("plan", *args), *fragments)
    fix = fragments[-1].split()[-1]
    ok = build("plan", *[a for a in args if a not in ("--gcc", args[args.index("--gcc") + 1])], "--gcc", fix)
    assert ok.returncode == 0, ok.stderr  # the suggested fix works on the first try


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["bnech"], "unknown command 'bnech'; did you mean 'bench'?"),
        (["static"], "did you mean '--static'?"),
        (["--static", "--require", "FusedAdm"], "did you mean 'FusedAdam'"),
        (["--statik"], "unrecognized arguments: --statik; see `verify --help`"),
    ],
)
def test_verify_suggests_what_was_meant(args: list[str], fragment: str) -> None:
    proc = run([sys.executable, "-m", "verify", *args])
    err = refused(proc, fragment)
    assert err.startswith("verify: ") and len(err.strip().splitlines()) == 1


HUGE = "9" * (50 * 1024 * 1024)  # a 50 MB value


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--cuda", "{huge}"],
        ["plan", "--cell", "{huge}"],
        ["plan", "--progress", "{huge}"],
        ["{huge}"],
    ],
    ids=["cuda", "cell", "argparse-choice", "command"],
)
def test_a_50_mb_value_is_never_echoed_whole(tmp_path: Path, args: list[str]) -> None:
    """Passed through a file (an argv this long is over the kernel's limit): the CLI in-process, real stderr."""
    script = tmp_path / "huge.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from toolchain.cli import main
        huge = "9" * {len(HUGE)}
        raise SystemExit(main([a.replace("{{huge}}", huge) for a in {args!r}]))
    """)
    )
    proc = run([sys.executable, str(script)])
    assert proc.returncode == exit_codes.USAGE and "Traceback" not in proc.stderr, proc.stderr[:2000]
    assert len(proc.stderr) < 3 * messages.LINE_MAX, len(proc.stderr)


def test_a_huge_matrix_value_is_shown_by_its_length(tmp_path: Path) -> None:
    # 500 KB: inside the reader's 1 MiB bound for a matrix file (a larger file is refused before it is parsed)
    path = matrix(tmp_path, f'[cells.h]\ncuda = "{"1" * 500_000}"\nextras = ["{"x" * 2000}"]\n')
    err = refused(build("validate", "--matrix", str(path)))
    assert (
        "cuda is 500000 characters long (at most 1024)" in err and "extras[0] is 2000 characters long" in err
    )
    assert len(err) < 1000


def test_shown_and_bounded() -> None:
    assert messages.shown("12.4") == "'12.4'" and messages.shown("a b", quote=False) == "a b"
    long = messages.shown("x" * 1000)
    assert long.endswith("… (1000 characters)") and len(long) < messages.SHOWN_MAX
    assert messages.shown(list(range(1000))).endswith("characters)")
    line = messages.bounded("y" * 5000)
    assert line.endswith("(4000 more characters)") and len(line) < messages.LINE_MAX + 40
    assert messages.closest("12.5", ["12.4", "12.6", "13.0"]) == ["12.6"]  # a tie goes to the newer
    assert messages.closest("x" * 5000, ["x"]) == []  # no quadratic work on a huge word
    assert messages.did_you_mean("pyhton", ["python", "torch"]) == "did you mean 'python'?"


def test_every_suggestion_comes_from_the_one_helper() -> None:
    """verify/runtime/messages.py is the only place that finds a close spelling or words a "did you mean"."""
    own = REPO / "verify" / "runtime" / "messages.py"
    for path in sorted([*(REPO / "toolchain").rglob("*.py"), *(REPO / "verify").rglob("*.py")]):
        if path == own:
            continue
        text = path.read_text()
        assert "difflib" not in text and "get_close_matches" not in text, f"{path} finds suggestions itself"
        assert "did you mean" not in text.replace('"did you mean"', "").lower(), (
            f"{path} words a suggestion itself"
        )


# --- 3b. --out folders a failed command made ----------------------------------------------------


def test_a_failed_wheel_build_removes_the_out_folders_it_made(tmp_path: Path) -> None:
    """The builder makes --out first (to fail early when unwritable), then finds no CUDA torch: exit 3."""
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build: the wheel build would go on")
    src = unpack_apex("6424da3b", tmp_path)
    existing = tmp_path / "existing"
    (existing / "keep-me-empty").mkdir(parents=True)
    proc = build(
        "wheel",
        "--apex-src",
        str(src),
        "--out",
        str(existing / "new" / "deeper"),
        "--archs",
        "9.0",
        cwd=tmp_path,
    )
    assert proc.returncode == exit_codes.ENVIRONMENT and "CPU-only build" in proc.stderr, proc.stderr
    assert not (existing / "new").exists(), "the empty folders the failed build made are left"
    assert (existing / "keep-me-empty").is_dir(), "a folder that existed before was removed"


def test_output_dirs_remove_only_what_was_made_and_is_empty(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    noted = OutputDirs([tmp_path / "old", tmp_path / "new" / "a", tmp_path / "full" / "b", None])
    (tmp_path / "old" / "inner").mkdir()  # inside a folder that existed: never looked into
    (tmp_path / "new" / "a" / "cells" / "x").mkdir(parents=True)
    (tmp_path / "full" / "b").mkdir(parents=True)
    (tmp_path / "full" / "b" / "result.json").write_text("{}")
    removed = noted.remove_empty()
    assert not (tmp_path / "new").exists() and tmp_path / "new" in removed
    assert (tmp_path / "old" / "inner").is_dir() and (tmp_path / "full" / "b" / "result.json").is_file()
