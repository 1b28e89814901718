"""The index server (toolchain/index/serve.py) under hostile input: each start-up error is one
line and its exit code; a symlink out of the served folder is not followed; idle and half-sent connections
neither grow its threads past the bound nor stay open past the timeout; SIGTERM and Ctrl-C are one line and
exit 1. A real server on 127.0.0.1, in a subprocess, and real sockets."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support import REPO
from verify.runtime import exit_codes


@pytest.fixture
def index(tmp_path: Path) -> Path:
    folder = tmp_path / "index"
    (folder / "stack" / "simple").mkdir(parents=True)
    (folder / "stacks.json").write_text("{}")
    (folder / "stack" / "simple" / "index.html").write_text("<html>inside</html>")
    return folder


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "toolchain.index.serve", *args]


class Server:
    def __init__(self, index: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            _command(str(index), "--port", "0", *args),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        assert line.startswith("serving "), line + self.stop()[1]
        self.url = line.rsplit(" ", 1)[-1].strip()
        self.port = int(self.url.rstrip("/").rsplit(":", 1)[-1])

    def get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url + path.lstrip("/"), timeout=10) as answer:
                return answer.status
        except urllib.error.HTTPError as err:
            return err.code

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/task"))

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        _, err = self.proc.communicate(timeout=20)
        return self.proc.returncode, err


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    "args, code, words",
    [
        (["--port", "abc"], exit_codes.USAGE, "--port 'abc': not a TCP port number"),
        (["--port", "70000"], exit_codes.USAGE, "--port '70000': not a TCP port number"),
        (["--port", "-1"], exit_codes.USAGE, "--port '-1'"),
        (
            ["--port", "\u0663"],
            exit_codes.USAGE,
            "not a TCP port number",
        ),  # ARABIC-INDIC THREE: int() takes it
        (
            ["--bind", "no-such-host.invalid"],
            exit_codes.USAGE,
            "--bind 'no-such-host.invalid': not an address",
        ),
        (["--bind", "10.254.254.254"], exit_codes.ENVIRONMENT, "not an address of this machine"),
        (["--timeout", "nan"], exit_codes.USAGE, "--timeout 'nan': not a number of seconds"),
        (["--timeout", "0"], exit_codes.USAGE, "--timeout '0'"),
        (["--max-connections", "2.5"], exit_codes.USAGE, "--max-connections '2.5'"),
        (["--prot", "1"], exit_codes.USAGE, "unrecognized arguments: --prot"),
    ],
)
def test_each_start_up_error_is_one_line_and_its_exit_code(
    index: Path, args: list[str], code: int, words: str
) -> None:
    done = subprocess.run(
        _command(str(index), *args), cwd=REPO, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == code, done.stderr
    line = _one_line(done.stderr)
    assert line.startswith("python -m toolchain.index.serve: ") and words in line, line
    assert "; pass" in line or "see `" in line, line  # the fix


def test_a_port_in_use_is_exit_3_naming_the_port(index: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            _command(str(index), "--port", str(port)),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert done.returncode == exit_codes.ENVIRONMENT, done.stderr
    assert f"--port {port}: in use" in _one_line(done.stderr) and "--port 0" in done.stderr


def test_a_folder_that_is_no_index_is_exit_2_and_its_name_escaped(tmp_path: Path) -> None:
    folder = tmp_path / "a\n::warning::x"
    folder.mkdir()
    done = subprocess.run(
        _command(str(folder)), cwd=REPO, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == exit_codes.USAGE
    assert "a\\n::warning::x: no stacks.json here" in _one_line(done.stderr)


def test_a_symlink_out_of_the_served_folder_is_not_followed(index: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    (secret / "simple").mkdir(parents=True)
    (secret / "key").write_text("do not serve")
    (secret / "simple" / "index.html").write_text("outside")
    (index / "leak").symlink_to(secret / "key")
    (index / "leak-dir").symlink_to(secret)
    (index / "other").mkdir()
    (index / "other" / "index.html").symlink_to(secret / "simple" / "index.html")
    (index / "other" / "index.json").symlink_to(secret / "key")
    (index / "same").symlink_to(index / "stack")  # a link that stays inside is served
    server = Server(index)
    try:
        assert server.get("stack/simple/") == 200
        assert server.get("same/simple/") == 200
        assert server.get("leak") == 404
        assert server.get("leak-dir/key") == 404
        assert server.get("leak-dir/") == 404
        assert server.get("other/") == 404  # a folder whose index page is a link out
        assert server.get("%2e%2e/secret/key") == 404
    finally:
        server.stop()


def test_half_sent_requests_neither_grow_threads_past_the_bound_nor_outlive_the_timeout(index: Path) -> None:
    """16 connections that each send half a request and wait, against a bound of 4 and a 2 s timeout: the
    server never holds more than 4 handler threads; each connection is answered 503 (no free slot when it
    was accepted) or closed silently once the timeout passed (it had a slot); then the server serves again."""
    bound, held, timeout = 4, 16, 2.0
    server = Server(index, "--timeout", str(timeout), "--max-connections", str(bound))
    sockets = []
    try:
        baseline = server.threads()  # the main thread
        started = time.monotonic()
        for _ in range(held):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sock.sendall(b"GET /stack/simple/ HTTP/1.1\r\nHost: x\r\n")  # no blank line: never complete
            sockets.append(sock)
        most = baseline
        while time.monotonic() - started < timeout / 2:
            most = max(most, server.threads())
            time.sleep(0.05)
        answers = [sock.recv(200) for sock in sockets]
        elapsed = time.monotonic() - started
        most = max(most, server.threads())
        assert most <= baseline + bound, most
        busy = [a for a in answers if a.startswith(b"HTTP/1.0 503 ")]
        closed = [a for a in answers if a == b""]
        assert len(busy) + len(closed) == held, answers
        assert busy and len(closed) >= bound, answers
        assert elapsed < held / bound * timeout + 10  # none stayed open past its timeout
        assert server.get("stack/simple/") == 200  # the slots are free again
    finally:
        for sock in sockets:
            sock.close()
        code, err = server.stop()
    assert code == exit_codes.FAILED, err
    assert "Request timed out" in err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_is_one_line_and_exit_1(index: Path, signum: int) -> None:
    server = Server(index)
    assert server.get("stack/simple/") == 200
    code, err = server.stop(signum)
    assert code == exit_codes.FAILED, err
    name = signal.Signals(signum).name
    lines = [line for line in err.splitlines() if not line.startswith("[index] ")]  # the request log
    assert lines == [f"python -m toolchain.index.serve: interrupted by {name}; the server stopped (exit 1)"]
    assert "Traceback" not in err
