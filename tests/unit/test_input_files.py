"""verify.runtime.input_files, the one bounded reader, on real files: a FIFO with no writer, /dev/zero, a directory,
a socket, a file over its kind's limit, bad UTF-8, bad and too-deep JSON; then the CLIs that read through
it (`build.py validate --matrix`, `verify --manifest`) given the same, each a one-line exit 2."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO
from verify.runtime import input_files

SMALL = dataclasses.replace(input_files.MATRIX, max_bytes=64)


def _refused(path: Path | str, kind: input_files.InputKind = SMALL) -> input_files.InputFileError:
    start = time.monotonic()
    with pytest.raises(input_files.InputFileError) as caught:
        input_files.read_json(path, kind)
    assert time.monotonic() - start < 5, "the reader waited: it must refuse before reading"
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)
    return caught.value


def test_regular_files_and_links_to_them_are_read(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"a": "é"}')
    (tmp_path / "link.json").symlink_to(path)
    assert input_files.read_json(tmp_path / "link.json", SMALL) == {"a": "é"}
    assert input_files.read_text(path, SMALL) == '{"a": "é"}'


def test_special_files_are_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: an open() without O_NONBLOCK would block forever
    assert _refused(fifo).problem.startswith("is a FIFO (named pipe)")
    assert "character device" in _refused("/dev/zero").problem  # endless: must not be read at all
    assert _refused(tmp_path).reason == "not_regular" and "directory" in _refused(tmp_path).problem
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s"))
        assert "socket" in _refused(tmp_path / "s").problem
    error = _refused(tmp_path / "nope.json")
    assert error.reason == "missing" and error.problem == "does not exist"


def test_size_cap_utf8_position_and_json_errors(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text('"' + "x" * 100 + '"')
    error = _refused(big)
    assert (
        error.reason == "too_large" and "larger than 64 bytes, the limit for a matrix file" in error.problem
    )
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a":\n  "caf\xe9"}')
    error = _refused(bad)
    assert error.problem == "is not UTF-8 text (unreadable byte 0xe9 at line 2, column 7, byte offset 12)"
    assert error.fix == "save it as UTF-8"
    broken = tmp_path / "broken.json"
    broken.write_text('{"a": [1, 2,]}')
    assert _refused(broken).problem.startswith("is not valid JSON (line 1, column 13:")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    assert _refused(deep, input_files.MANIFEST).reason == "too_deep"
    huge_int = tmp_path / "int.json"
    huge_int.write_text('{"jobs": ' + "1" * 5000 + "}")  # valid JSON; Python refuses > 4300 digits
    assert _refused(huge_int, input_files.MANIFEST).problem == (
        "is not valid JSON here (a value cannot be read: Exceeds the limit (4300 digits) for integer string"
        " conversion)"
    )


def _cli(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("APEX_BUILD_MANIFEST", "GITHUB_ACTIONS")}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert time.monotonic() - start < timeout - 5
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc


def test_matrix_from_a_fifo_dev_zero_bad_bytes_or_deep_nesting_is_exit_2(tmp_path: Path) -> None:
    fifo = tmp_path / "matrix.fifo"
    os.mkfifo(fifo)
    assert "is a FIFO (named pipe)" in _cli("build.py", "validate", "--matrix", str(fifo)).stderr
    assert "/dev/zero: is a character device" in _cli("build.py", "validate", "--matrix", "/dev/zero").stderr
    latin1 = tmp_path / "matrix.toml"
    latin1.write_bytes((REPO / "matrix.toml").read_bytes() + b"\n# na\xefve comment\n")
    err = _cli("build.py", "plan", "--matrix", str(latin1)).stderr
    assert f"{latin1}: is not UTF-8 text (unreadable byte 0xef at line" in err and "save it as UTF-8" in err
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
    assert "nested too deeply" in _cli("build.py", "validate", "--matrix", str(deep)).stderr
    big_int = tmp_path / "int.toml"
    big_int.write_text('[cells.a]\ncuda = "12.4"\ngcc = ' + "1" * 5000 + "\n")
    assert (
        "malformed TOML (a value cannot be read: Exceeds the limit (4300 digits)"
        in _cli("build.py", "validate", "--matrix", str(big_int)).stderr
    )
    huge = tmp_path / "huge.toml"
    huge.write_text("# " + "x" * (2 << 20) + "\n")
    assert (
        "is larger than 1 MiB, the limit for a matrix file"
        in _cli("build.py", "validate", "--matrix", str(huge)).stderr
    )


def test_manifest_from_a_fifo_or_dev_zero_is_exit_2(tmp_path: Path) -> None:
    fifo = tmp_path / "m.fifo"
    os.mkfifo(fifo)
    err = _cli("-m", "verify", "--static", "--manifest", str(fifo)).stderr
    assert f"build manifest {fifo} (from --manifest) is unreadable: it is a FIFO" in err
    err = _cli("-m", "verify", "--static", "--manifest", "/dev/zero").stderr
    assert "is unreadable: it is a character device" in err


def _good_manifest() -> dict:
    return json.loads((REPO / "tests/fixtures/evidence/manifests/manifest-9.0-warm-ccache.json").read_text())


def test_manifest_with_wrong_types_names_every_field(tmp_path: Path) -> None:
    data = _good_manifest()
    data["versions"]["torch"] = ["2.11.0"]
    data["expected_modules"][1] = 7
    data["apex"] = "6424da3b"
    data["skipped_extensions"] = [{"module": "x", "warning": None}]
    data["flags"]["APEX_CUDA_EXT"] = 1
    data["parallelism"]["max_jobs"] = True
    data["future_field"] = json.loads("[" * 40 + "]" * 40)  # an unknown key is allowed, not unbounded
    data["cell"] = "x" * 2_000_000  # a huge value: reported by size, never echoed
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    err = _cli("-m", "verify", "--static", "--manifest", str(path)).stderr
    assert err.startswith(f"verify: build manifest {path}: ")
    for needle in (
        "manifest.versions.torch: expected a string or null, got a list",
        "manifest.expected_modules[1]: expected a string, got an integer",
        "manifest.apex: expected an object, got a string",
        "manifest.skipped_extensions[0].warning: expected a string, got null",
        "manifest.flags.APEX_CUDA_EXT: expected a string, got an integer",
        "(and 3 more)",
    ):
        assert needle in err
    assert len(err) < 2000
    data = _good_manifest()
    data["future_field"] = json.loads("[" * 40 + "]" * 40)
    data["cell"] = "x" * 2_000_000
    path.write_text(json.dumps(data))
    err = _cli("-m", "verify", "--static", "--manifest", str(path)).stderr
    assert "manifest.future_field" in err and "nested deeper than 32 levels" in err
    assert "manifest.cell: a string of 2000000 characters (at most 1000000)" in err and len(err) < 2000


def test_a_real_builder_manifest_still_passes(tmp_path: Path) -> None:
    from verify.layers import manifest

    for path in sorted((REPO / "tests/fixtures/evidence/manifests").glob("*manifest*.json")):
        assert manifest.load(path, "--manifest")["manifest_version"] == "1"


def test_read_url_is_bounded_and_names_each_refusal(tmp_path: Path) -> None:
    """A real HTTP server on 127.0.0.1: an answer within the limit, one over it, a 404, a file URL."""
    import functools
    import http.server
    import threading

    (tmp_path / "small.json").write_text("{}")
    (tmp_path / "big.json").write_text("x" * 100)
    tiny = dataclasses.replace(input_files.INDEX_STACKS, max_bytes=10)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *_: None  # type: ignore[attr-defined]
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        try:
            assert input_files.read_url(base + "small.json", tiny, timeout_s=10) == b"{}"
            for name, reason in (("big.json", "too_large"), ("missing.json", "http_error")):
                with pytest.raises(input_files.InputFileError) as caught:
                    input_files.read_url(base + name, tiny, timeout_s=10)
                assert caught.value.reason == reason and base + name in str(caught.value)
        finally:
            server.shutdown()
    assert input_files.read_url((tmp_path / "small.json").as_uri(), tiny, timeout_s=1) == b"{}"
    for url in ("ftp://host/x", "stacks.json", "http://[::1/"):
        with pytest.raises(input_files.InputFileError) as caught:
            input_files.read_url(url, tiny, timeout_s=1)
        assert caught.value.reason == "bad_url"


def test_a_logs_tail_is_read_without_the_rest_and_its_cut_first_line_dropped(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("".join(f"line {n}\n" for n in range(200_000)))  # ~2.2 MB
    lines = input_files.read_log_tail(log, max_bytes=1000)
    assert lines[-1] == "line 199999" and len(lines) < 110 and all(line.startswith("line ") for line in lines)
    assert input_files.read_log_tail(tmp_path / "none.log") == []


def test_a_wheel_is_hashed_in_pieces_and_a_fifo_or_device_refused(tmp_path: Path) -> None:
    import hashlib

    wheel = tmp_path / "w.whl"
    wheel.write_bytes(b"x" * (3 << 20))
    assert input_files.sha256_file(wheel, input_files.WHEEL) == (
        hashlib.sha256(wheel.read_bytes()).hexdigest(),
        3 << 20,
    )
    os.mkfifo(tmp_path / "fifo.whl")
    (tmp_path / "zero.whl").symlink_to("/dev/zero")
    for path in (tmp_path / "fifo.whl", tmp_path / "zero.whl"):
        with pytest.raises(input_files.InputFileError) as caught:
            input_files.sha256_file(path, input_files.WHEEL)
        assert caught.value.reason == "not_regular"
    small = dataclasses.replace(input_files.WHEEL, max_bytes=1 << 20)
    with pytest.raises(input_files.InputFileError, match="larger than 1 MiB"):
        input_files.sha256_file(wheel, small)
