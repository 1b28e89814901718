"""Property tests: generated argument vectors and matrix files thrown at the CLIs, in-process.

The contract every run must keep, valid input or not: the exit code is 0, 1, 2 or 3; no traceback
(an exception escaping `main` fails the example); a usage error is one `error: ...` message; nothing
is written outside the example's own temp dir (the working directory, --out, --logs, -o all live
there) and the checkout stays as it was. Deterministic (derandomized, no example database) and
bounded: about 20 s for build.py and 30 s for verify on 2 busy cores.

Inputs the generators leave out on purpose (a matrix that is not UTF-8, an integer beyond Python's
4300 digits, a FIFO or /dev/zero as the matrix) are the reproducers at the end.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import REPO
from toolchain import cli as toolchain_cli
from toolchain.spec import cell_fields
from verify import cli as verify_cli

pytestmark = pytest.mark.property

PROPERTY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

# --- value generators -------------------------------------------------------------------------

ODD_CHARS = "１２٣.\u200b\u00a0\t\n\r'\"$`;|&<>\\ -=,\udcff\x7f\x01é中🙂"
odd_text = st.text(alphabet=st.sampled_from(list(ODD_CHARS) + list("0123456789.abcuXYZ_/:@")), max_size=40)
huge_text = st.integers(1025, 200_000).map(lambda n: "9" * n)
version_like = st.sampled_from(
    [
        "12.4",
        "12.5",
        "13.0",
        "13.2",
        "cu124",
        "cu130",
        "12.4.1",
        "2.6",
        "2.6.0",
        "2.6.99",
        "2.14",
        "3.11",
        "3.12",
        "3.14",
        "9.0",
        "9.0+PTX",
        "10.0",
        "8.0;9.0",
        ";",
        "",
        "0",
        "-1",
        "--x",
        "1e308",
        "inf",
        "nan",
        "99999999999999999999",
    ]
)
cli_value = st.one_of(
    version_like,
    odd_text,
    huge_text,
    st.sampled_from(
        [
            "ubuntu22.04",
            "ubuntu24.04",
            "debian12",
            "xentropy",
            "all",
            "APEX_CPP_EXT=0",
            "APEX_CUDA_EXT",
            "cu124",
            "cu130",
            "nope",
            "--upload-pack=touch x",
            "https://github.com/NVIDIA/apex.git",
            "ghcr.io/acme/apex",
            "Bad Repo:tag",
        ]
    ),
)

CELL_OPTIONS = [
    "--cuda",
    "--torch",
    "--python",
    "--os",
    "--gcc",
    "--archs",
    "--apex-repo",
    "--apex-ref",
    "--extras",
    "--apex-flags",
    "--base-devel",
    "--base-runtime",
    "--torch-index-url",
    "--tag",
    "--cell",
]
OTHER_OPTIONS = [
    "--target",
    "--progress",
    "--json",
    "--registry",
    "--cache",
    "--cache-ref",
    "--pretty",
    "--cdua",
    "--out",
    "--logs",
    "-o",
    "--matrix",
    "--help",
]
FLAG_ONLY = {"--json", "--pretty", "--help"}

toml_scalar = st.one_of(
    version_like,
    odd_text,
    huge_text,
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
)
toml_value = st.recursive(
    toml_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["a", "cuda"]), inner, max_size=2)
    ),
    max_leaves=6,
)
CELL_KEYS = [*cell_fields.CELL_KEYS, "pyhton", "archz"]  # every field, and two typos
GOOD_CELLS: list[dict[str, object]] = [
    {"cuda": "12.4"},
    {"cuda": "12.6", "torch": "2.7"},
    {"cuda": "13.0", "archs": ["9.0"]},
    {"cuda": "12.8", "extras": ["xentropy"]},
    {"cuda": "12.4", "torch": "2.6.0", "python": "3.10"},
]
cell_table = st.one_of(
    st.sampled_from(GOOD_CELLS),
    st.dictionaries(st.sampled_from(CELL_KEYS), toml_value, max_size=6),
    st.sampled_from(GOOD_CELLS).flatmap(
        lambda good: st.dictionaries(st.sampled_from(CELL_KEYS), toml_value, max_size=2).map(
            lambda bad: {**good, **bad}
        )
    ),
)
cell_name = st.one_of(st.sampled_from(["cu124", "cu12.4", "cu12_4", "a", "x-y"]), odd_text)
matrix_doc = st.fixed_dictionaries(
    {"cells": st.dictionaries(cell_name, cell_table, max_size=4)},
    optional={
        "format_version": st.one_of(st.just(1), toml_scalar),
        "defaults": st.one_of(
            st.just({"python": "3.12", "archs": ["8.0", "9.0"]}),
            st.dictionaries(st.sampled_from(CELL_KEYS), toml_value, max_size=3),
        ),
        "extra": toml_value,
    },
)


def toml_text(value: Any) -> str:
    """A TOML literal (strings as basic strings with every control character escaped)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            "nan"
            if value != value
            else ("inf" if value > 0 else "-inf")
            if abs(value) == float("inf")
            else repr(value)
        )
    if isinstance(value, str):
        out = []
        for ch in value:
            if ch in '"\\':
                out.append("\\" + ch)
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\u{ord(ch):04X}")
            elif 0xD800 <= ord(ch) <= 0xDFFF:  # a lone surrogate cannot be UTF-8: the TOML file would not be
                out.append("?")
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_text(k)} = {toml_text(v)}" for k, v in value.items()) + "}"


def toml_document(doc: dict[str, Any]) -> str:
    lines = [f"{toml_text(k)} = {toml_text(v)}" for k, v in doc.items() if k not in ("cells", "defaults")]
    if isinstance(doc.get("defaults"), dict):
        lines.append("[defaults]")
        lines += [f"{toml_text(k)} = {toml_text(v)}" for k, v in doc["defaults"].items()]
    for name, table in doc.get("cells", {}).items():
        lines.append(f"[cells.{toml_text(name)}]")
        lines += [f"{toml_text(k)} = {toml_text(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


# --- running a CLI in-process and checking the contract ---------------------------------------


def _checkout_state() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _keeps_checkout(examples) -> None:
    """Run every example of a @given function; the checkout must be the same afterwards."""
    before = _checkout_state()
    examples()
    assert _checkout_state() == before, "a CLI run changed the checkout"


@contextlib.contextmanager
def _sandbox() -> Iterator[Path]:
    """A fresh temp dir as the working directory; the previous one restored afterwards."""
    old = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="apex-prop-") as where:
        os.chdir(where)
        try:
            yield Path(where)
        finally:
            os.chdir(old)


def _call(main, argv: list[str]) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's --help (and verify's one-line usage error)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, err.getvalue()


def _assert_contract(code: int, stderr: str, *, usage_prefix: str) -> None:
    assert code in (0, 1, 2, 3), (code, stderr[:2000])
    assert "Traceback" not in stderr, stderr[:4000]
    if code == 2 and stderr:
        assert stderr.startswith(usage_prefix) or stderr.lstrip().startswith("usage:"), stderr[:2000]
    assert len(stderr) < 50_000, "an error echoed a huge value"


def _files_under(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file() or p.is_symlink()}


# --- build.py ---------------------------------------------------------------------------------

option_pair = st.one_of(
    st.tuples(st.sampled_from(CELL_OPTIONS), cli_value),
    st.tuples(
        st.sampled_from(OTHER_OPTIONS),
        st.one_of(cli_value, st.sampled_from(["auto", "plain", "gha", "none", "runtime", "out/x"])),
    ),
)
build_argv = st.tuples(
    st.one_of(
        st.sampled_from(["validate", "plan", "bake"]), st.sampled_from(["plna", "bkae", "", "-x", "wheel2"])
    ),
    st.lists(option_pair, max_size=5),
    st.sampled_from(["generated", "repo", "missing", "directory"]),
    matrix_doc,
)


@pytest.mark.slow
def test_build_py_keeps_the_contract() -> None:
    _keeps_checkout(_build_py_examples)


@settings(PROPERTY, max_examples=200)
@given(build_argv)
def _build_py_examples(case: tuple) -> None:
    command, pairs, matrix_kind, doc = case
    with _sandbox() as tmp:
        matrix = {
            "generated": tmp / "m.toml",
            "repo": REPO / "matrix.toml",
            "missing": tmp / "none.toml",
            "directory": tmp,
        }[matrix_kind]
        if matrix_kind == "generated":
            matrix.write_text(toml_document(doc), encoding="utf-8")
        argv = [command, "--matrix", str(matrix)]
        for option, value in pairs:
            if option in ("--out", "--logs", "-o", "--matrix"):
                value = str(tmp / "given" / value.replace("\x00", "").replace("/", "_")[:50] or "v")
            argv += [option] if option in FLAG_ONLY else [option, value.replace("\x00", "")]
        before = _files_under(tmp)
        code, stderr = _call(toolchain_cli.main, argv)
        _assert_contract(code, stderr, usage_prefix="error: ")
        written = _files_under(tmp) - before
        assert all(p.parts[0] == "given" for p in written), written  # only under --out/--logs/-o
        if command == "bake" and code == 0 and "-o" in argv:
            json.loads(Path(argv[argv.index("-o") + 1]).read_text())


@pytest.mark.slow
def test_every_generated_matrix_is_valid_or_refused_with_exit_2() -> None:
    _keeps_checkout(_matrix_examples)


@settings(PROPERTY, max_examples=100)
@given(matrix_doc)
def _matrix_examples(doc: dict) -> None:
    with _sandbox() as tmp:
        path = tmp / "matrix.toml"
        path.write_text(toml_document(doc), encoding="utf-8")
        for command in ("validate", "plan", "bake"):
            code, stderr = _call(toolchain_cli.main, [command, "--matrix", str(path)])
            _assert_contract(code, stderr, usage_prefix="error: ")
            assert code in (0, 2), (command, code, stderr)
        assert _files_under(tmp) == {Path("matrix.toml")}


# --- python -m verify --static ----------------------------------------------------------------

verify_option = st.one_of(
    st.tuples(
        st.sampled_from(["--require", "--manifest", "--seed", "--check-timeout", "--json", "--markdown"]),
        st.one_of(
            cli_value,
            st.sampled_from(["FusedAdam", "amp_C", "", "FusedAdm", "0", "-5", "1e999", "reports/r.json"]),
        ),
    ),
    st.tuples(st.sampled_from(["--quiet", "--require-gpu", "--statik", "--help"]), st.none()),
)
verify_argv = st.tuples(
    st.sampled_from(["--static", "static", "bnech", "--static"]),
    st.lists(verify_option, min_size=1, max_size=3),
)


def test_verify_static_keeps_the_contract() -> None:
    _keeps_checkout(_verify_examples)


@settings(PROPERTY, max_examples=30)
@given(verify_argv)
def _verify_examples(case: tuple) -> None:
    first, options = case
    with _sandbox() as tmp:
        argv = [first]
        for option, value in options:
            if value is None:
                argv.append(option)
                continue
            if option in ("--json", "--markdown", "--manifest"):
                value = str(tmp / "given" / (value.replace("\x00", "").replace("/", "_")[:50] or "v"))
            argv += [option, value.replace("\x00", "")]
        if (
            not any(o in argv for o in ("--statik", "--help", "static", "bnech", "--require-gpu"))
            and "--seed" not in argv
        ):
            argv += [
                "--require",
                "Nope",
            ]  # keep the slow full static run rare: most examples stop at validation
        before = _files_under(tmp)
        code, stderr = _call(verify_cli.main, argv)
        _assert_contract(code, stderr, usage_prefix="verify: ")
        written = _files_under(tmp) - before
        assert all(p.parts[0] == "given" for p in written), written


# --- reproducers: the bounded reader refuses what is not a small regular UTF-8 file --------------


def _build_in_child(
    tmp: Path, matrix: Path, *, memory_bytes: int | None = None
) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    # the timeout guards against a hang (a FIFO read blocks forever), not for speed: Python's start-up alone
    # can take seconds on a loaded machine
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), "validate", "--matrix", str(matrix)],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
    )


def _assert_refused(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.startswith("error: "), (
        proc.stderr
    )


def test_matrix_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_bytes(b'[cells.a]\ncuda = "12.4"\n\xff = 1\n')
    _assert_refused(_build_in_child(tmp_path, tmp_path / "m.toml"))


def test_matrix_with_an_integer_beyond_the_digit_limit(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text('[cells.a]\ncuda = "12.4"\ngcc = ' + "1" * 5000 + "\n")
    _assert_refused(_build_in_child(tmp_path, tmp_path / "m.toml"))


def test_matrix_that_is_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "m.toml")
    _assert_refused(_build_in_child(tmp_path, tmp_path / "m.toml"))


def test_matrix_that_is_dev_zero(tmp_path: Path) -> None:
    _assert_refused(_build_in_child(tmp_path, Path("/dev/zero"), memory_bytes=1 << 30))
