"""verify.runtime.atomic, the one write path, on real special files: regular files replaced atomically, symlinks
followed, character devices, FIFOs and this process's descriptors written in place, directories, block
devices and sockets refused; and `python -m verify --json /dev/null` in a private mount namespace."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import jsonschema
import pytest
import torch

from tests.support import REPO, run_verify
from verify.runtime import atomic
from verify.timing import kernel_compare
from verify.timing import rules as timing_rules
from verify.timing.kernel_compare import Variant

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="making device nodes (mknod) needs root")


def _python(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        **kwargs,
    )


def test_regular_file_is_replaced_atomically_and_no_temp_file_stays(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    before = target.stat().st_ino
    assert atomic.write_text(target, "new") == target
    assert target.read_text() == "new" and target.stat().st_ino != before  # a new inode: renamed over
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    assert (
        atomic.write_text(tmp_path / "sub" / "dir" / "x.md", "made") and (tmp_path / "sub/dir/x.md").is_file()
    )


def test_symlinks_are_followed_to_the_final_target_which_is_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real" / "report.json"
    real.parent.mkdir()
    real.write_text("old")
    (tmp_path / "hop").symlink_to(real)
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "hop")  # a chain: link -> hop -> real
    atomic.write_text(link, "new")
    assert link.is_symlink() and (tmp_path / "hop").is_symlink()
    assert real.read_text() == "new"
    assert sorted(p.name for p in real.parent.iterdir()) == ["report.json"]
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "real" / "not-yet.json")
    atomic.write_text(dangling, "created")
    assert dangling.is_symlink() and (tmp_path / "real" / "not-yet.json").read_text() == "created"


@ROOT_ONLY
def test_a_character_device_is_written_in_place_never_replaced(tmp_path: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a second node of the null device
    inode = null.stat().st_ino
    atomic.write_json(null, {"a": 1})
    info = null.lstat()
    assert stat.S_ISCHR(info.st_mode) and info.st_ino == inode and info.st_rdev == os.makedev(1, 3)
    link = tmp_path / "out.json"
    link.symlink_to(null)
    atomic.write_text(link, "through a link")
    assert link.is_symlink() and stat.S_ISCHR(null.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "out.json"]


@ROOT_ONLY
def test_a_full_device_reports_enospc(tmp_path: Path) -> None:
    full = tmp_path / "full"
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # /dev/full: every write is ENOSPC
    with pytest.raises(OSError) as caught:
        atomic.write_text(full, "x")
    assert caught.value.errno == errno.ENOSPC and stat.S_ISCHR(full.lstat().st_mode)


def test_a_fifo_is_written_in_place_to_its_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        time.sleep(0.3)  # the writer starts first and waits for this reader
        with open(fifo, "rb") as handle:
            got.append(handle.read())

    reader = threading.Thread(target=read)
    reader.start()
    payload = "x" * 300_000  # more than a pipe holds: the writer must block on a full pipe, not fail
    atomic.write_text(fifo, payload)
    reader.join(10)
    assert got == [payload.encode()] and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_fifo_without_reader_fails_after_a_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(atomic, "FIFO_READER_WAIT_S", 0.5)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(atomic.UnwritableTarget) as caught:
        atomic.write_text(fifo, "nobody reads this")
    assert 0.4 < time.monotonic() - start < 5
    assert caught.value.errno == errno.ENXIO and caught.value.filename == str(fifo)
    assert "no process opened for reading within 0.5 s" in (caught.value.strerror or "")
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_directories_block_devices_and_sockets_are_refused(tmp_path: Path) -> None:
    with pytest.raises(atomic.UnwritableTarget) as caught:
        atomic.write_text(tmp_path, "x")
    assert caught.value.errno == errno.EISDIR and "is a directory" in (caught.value.strerror or "")
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(atomic.UnwritableTarget, match="is a socket"):
            atomic.write_text(sock_path, "x")
    assert stat.S_ISSOCK(sock_path.lstat().st_mode)
    if os.geteuid() == 0:
        block = tmp_path / "blk"
        os.mknod(block, stat.S_IFBLK | 0o600, os.makedev(240, 0))  # 240: reserved for local use, no driver
        with pytest.raises(atomic.UnwritableTarget, match="is a block device"):
            atomic.write_text(block, "x")
        assert stat.S_ISBLK(block.lstat().st_mode)


def test_dev_stdout_writes_this_process_descriptor_in_order(tmp_path: Path) -> None:
    code = """
        from verify.runtime import atomic
        print("before", flush=False)
        atomic.write_text("/dev/stdout", "REPORT\\n")
        atomic.write_text("/dev/fd/1", "AGAIN\\n")
        print("after")
    """
    piped = _python(code, capture_output=True, text=True)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == "before\nREPORT\nAGAIN\nafter\n"
    redirected = tmp_path / "out.txt"  # stdout a regular file (`> out.txt`): appended to, not replaced
    with open(redirected, "w") as handle:
        inode = os.fstat(handle.fileno()).st_ino
        done = _python(code, stdout=handle, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr
    assert redirected.read_text() == "before\nREPORT\nAGAIN\nafter\n" and redirected.stat().st_ino == inode
    closed = _python(
        """
        from verify.runtime import atomic
        try:
            atomic.write_text("/dev/fd/7", "x")
        except atomic.UnwritableTarget as exc:
            print(exc.strerror)
    """,
        capture_output=True,
        text=True,
    )
    assert "file descriptor 7, which is not open" in closed.stdout


def test_json_never_holds_bare_infinity_or_nan_and_the_schema_still_validates(tmp_path: Path) -> None:
    schema = json.loads((REPO / "verify" / "schema" / "report.schema.json").read_text())
    real = tmp_path / "real.json"
    assert _run_verify("--json", str(real)).returncode == 1  # a real static report (no Apex here)
    report = json.loads(real.read_text())
    # a real v2 timing row (kernel_compare on the CPU), then non-finite values where a broken clock would put them
    a = torch.ones(8, 8)
    variants = [
        Variant("fused", "fused", lambda: lambda: a @ a),
        Variant("native", "native", lambda: lambda: a @ a),
    ]
    row = kernel_compare.compare("FusedAdam", "fp32", variants, "cpu", timing_rules.CPU_ROUNDS).to_json()
    row["details"] = [math.nan, (1.5,), -math.inf]
    report["timings"] = [row]
    report["checks"][0]["details"]["ratio"] = -math.inf
    path = atomic.write_json(tmp_path / "r.json", report)
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text

    def refuse(name: str) -> None:
        raise AssertionError(f"bare {name} in the JSON")

    data = json.loads(text, parse_constant=refuse)
    row = data["timings"][0]
    assert row["details"] == [None, [1.5], None]
    jsonschema.Draft202012Validator(schema).validate(data)
    assert atomic.json_dumps({"x": [float("nan")]}, indent=None) == '{"x": [null]}'


def test_verify_cli_refuses_a_non_finite_check_timeout(tmp_path: Path) -> None:
    for value in ("inf", "nan"):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "verify",
                "--static",
                "--check-timeout",
                value,
                "--json",
                str(tmp_path / "r.json"),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2 and "--check-timeout" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r.json").exists()


def _run_verify(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return run_verify("--static", "--quiet", *args, timeout=timeout)


@pytest.mark.slow
def test_verify_json_to_a_fifo_with_a_reader_and_without(tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    proc = _run_verify("--json", str(fifo))
    reader.join(30)
    assert proc.returncode == 1, proc.stderr  # no Apex here: the checks FAIL, the report is written
    assert json.loads(got[0])["verdict"] == "FAIL" and stat.S_ISFIFO(fifo.lstat().st_mode)
    start = time.monotonic()
    proc = _run_verify("--json", str(fifo))  # nobody reads now
    assert proc.returncode == 2 and time.monotonic() - start < 60
    assert f"cannot write report to {fifo}: is a FIFO (named pipe) that no process opened" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_verify_json_to_a_directory_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _run_verify("--json", str(tmp_path), "--markdown", str(tmp_path / "r.md"))
    assert proc.returncode == 2 and f"cannot write report to {tmp_path}: is a directory" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


_NAMESPACE_SCRIPT = """
set -e
mount -t tmpfs -o mode=755 apex-files-test-dev /dev
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/urandom c 1 9
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
mkdir /dev/shm && mount -t tmpfs apex-files-test-shm /dev/shm
before=$(stat -c %i /dev/null)
rc=0
"$PYTHON" -m verify --static --quiet --json /dev/null --markdown /dev/null > "$LOG" 2>&1 || rc=$?
echo "rc=$rc type=$(stat -c %F /dev/null) same_inode=$([ "$(stat -c %i /dev/null)" = "$before" ] && echo yes || echo no)"
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a private mount namespace (unshare --mount) needs root and util-linux's unshare",
)
def test_verify_json_dev_null_in_a_private_mount_namespace(tmp_path: Path) -> None:
    """The issue's case: as root, `verify --json /dev/null` replaced /dev/null with a report. Here /dev is
    a tmpfs of this namespace's own, so the host's /dev/null is never at risk whatever the code does."""
    log = tmp_path / "verify.log"
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", _NAMESPACE_SCRIPT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "PYTHON": sys.executable, "LOG": str(log), "PYTHONPATH": str(REPO)},
    )
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip(f"no private mount namespace here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "rc=1 type=character special file same_inode=yes", log.read_text()[-2000:]
    assert "verify static: FAIL" in log.read_text()  # it really ran (no Apex here: FAIL, exit 1)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "GITHUB_ACTIONS"},
    )


def test_bake_output_follows_links_and_report_refuses_them_and_directories(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere" / "docker-bake.json"
    real.parent.mkdir()
    real.write_text("{}")
    link = tmp_path / "bake.json"
    link.symlink_to(real)
    assert _cli("build.py", "bake", "-o", str(link)).returncode == 0
    assert link.is_symlink() and "target" in json.loads(real.read_text())
    proc = _cli("build.py", "bake", "-o", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: {tmp_path}: is a directory, not a file; name a file (e.g. DIR/report.json)"
    )
    out = tmp_path / "out"
    out.mkdir()
    # --out is a folder the tool owns: a link in it is refused, never followed (its target is not made)
    (out / "matrix-report.md").symlink_to(tmp_path / "elsewhere" / "table.md")
    proc = _cli("build.py", "report", "--out", str(out))
    assert proc.returncode == 2 and f"{out / 'matrix-report.md'}: is a symbolic link (to " in proc.stderr
    assert not (tmp_path / "elsewhere" / "table.md").exists()
    (out / "matrix-report.md").unlink()
    (out / "matrix-report.html").mkdir()
    proc = _cli("build.py", "report", "--out", str(out))
    assert proc.returncode == 2 and f"{out / 'matrix-report.html'}: is a directory" in proc.stderr


def test_bench_results_refuse_a_device_link_and_a_directory(tmp_path: Path) -> None:
    args = (
        "-m",
        "verify",
        "bench",
        "--device",
        "cpu",
        "--stages",
        "none",
        "--no-micro",
        "--no-plots",
        "--out",
    )
    blocked = tmp_path / "blocked"
    (blocked / "bench.json").mkdir(parents=True)
    proc = _cli(*args, str(blocked))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"verify bench: error: cannot write {blocked / 'bench.json'}: is a directory,"
        " not a file; remove it, so the tool can write its file"
    )
    if os.geteuid() != 0:
        return  # the device half needs mknod
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "bench.json").symlink_to(null)
    proc = _cli(*args, str(linked))  # --out is a folder the tool owns: the link is refused, not followed
    assert proc.returncode == 2 and "bench.json: is a symbolic link (to " in proc.stderr, proc.stderr
    assert stat.S_ISCHR(null.lstat().st_mode) and (linked / "bench.json").is_symlink()
    assert not (linked / "bench.md").exists()  # the results are written together or not at all


def test_verify_checks_its_report_paths_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for option, path in (("--json", tmp_path), ("--markdown", tmp_path / "file" / "r.md")):
        proc = _run_verify(option, str(path))
        assert proc.returncode == 2 and "(checked before the run)" in proc.stderr, proc.stderr
        assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1  # no check ran
