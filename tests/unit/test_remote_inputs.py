"""The network check before `build.py image` builds anything: which remote inputs a routed cell needs, the
probe against real sockets on 127.0.0.1, one line per unreachable input with its fix and exit 3, and the
order in cmd_image (the check runs before the local base is made and before the build)."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO
from toolchain.commands import cells
from toolchain.commands.parser import build_parser
from toolchain.errors import EnvironmentUnavailable
from toolchain.image import remote_inputs
from toolchain.spec.matrix import cli_cell
from verify.runtime import exit_codes

MATRIX = REPO / "matrix.toml"


def nvidia_cell():
    return cli_cell({"cuda": "12.4"}, matrix_path=MATRIX)


def local_cell():
    return cli_cell({"cuda": "13.2", "torch": "2.15", "python": "3.13", "os": "debian13"}, matrix_path=MATRIX)


@pytest.fixture
def server() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that answers 404 to everything (a host that is there)."""

    class Answers404(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers404)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/simple"
    httpd.shutdown()
    httpd.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_host_that_answers_even_404_is_reachable(server: str) -> None:
    assert remote_inputs.probe_url(server, timeout=2) is None


def test_a_refused_port_and_a_silent_host_are_unreachable_with_why() -> None:
    assert "refused" in (remote_inputs.probe_url(f"http://127.0.0.1:{closed_port()}/", timeout=2) or "")
    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        why = remote_inputs.probe_url(f"http://127.0.0.1:{silent.getsockname()[1]}/", timeout=0.3)
    assert why is not None and "0.3 s" in why


def test_an_ssh_git_url_is_probed_on_its_port() -> None:
    assert remote_inputs.probe_url(f"ssh://git@127.0.0.1:{closed_port()}/apex.git", timeout=2) is not None


def test_the_nvidia_route_needs_the_git_host_the_indexes_and_its_base_images() -> None:
    found = {i.what: i.where for i in remote_inputs.needed(nvidia_cell(), apex_src=None, wheelhouse=None)}
    assert found["Apex source (git)"] == "https://github.com/NVIDIA/apex.git"
    assert found["torch 2.6.0 index"] == "https://download.pytorch.org/whl/cu124"
    assert "base image" in found


def test_offline_inputs_drop_what_they_replace_but_the_local_route_still_needs_pypi_for_nvcc(
    tmp_path: Path,
) -> None:
    offline = remote_inputs.needed(nvidia_cell(), apex_src=tmp_path, wheelhouse=tmp_path)
    assert {i.kind for i in offline} == {"image"}  # only the base images are left
    local = remote_inputs.needed(local_cell(), apex_src=tmp_path, wheelhouse=tmp_path)
    assert [(i.what, i.where) for i in local] == [
        ("PyPI (the build requirements and CUDA's nvcc wheels)", "https://pypi.org/simple")
    ]


def test_each_unreachable_input_is_one_line_naming_it_and_its_fix_exit_3() -> None:
    inputs = remote_inputs.needed(nvidia_cell(), apex_src=None, wheelhouse=None)
    github_down = lambda url: "host name not resolved" if "github.com" in url else None  # noqa: E731
    with pytest.raises(EnvironmentUnavailable) as one:
        remote_inputs.check(inputs, probe=github_down, available=lambda ref: None)
    assert one.value.exit_code == exit_codes.ENVIRONMENT
    message = str(one.value)
    assert "https://github.com/NVIDIA/apex.git cannot be reached (host name not resolved)" in message
    assert "APEX_SRC=DIR" in message and "\n" not in message

    with pytest.raises(EnvironmentUnavailable) as every:
        remote_inputs.check(inputs, probe=lambda url: "refused", available=lambda ref: "no such host")
    lines = str(every.value).splitlines()
    assert len(lines) == 1 + len(inputs)
    assert any(
        "base image nvidia/cuda:12.4.1-devel-ubuntu22.04" in line and "BASE=local" in line for line in lines
    )
    assert any("WHEELHOUSE=DIR" in line for line in lines)
    remote_inputs.check(inputs, probe=lambda url: None, available=lambda ref: None)  # all answer: no error


def test_cmd_image_checks_the_network_before_the_local_base_or_any_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(cells, "route", lambda cells_, *a, **k: cells_)
    monkeypatch.setattr(cells, "preflight", lambda mode: None)
    monkeypatch.setattr(cells, "make_local_bases", lambda *a: ran.append("local base"))
    monkeypatch.setattr(remote_inputs, "probe_url", lambda url, **k: "refused")
    from toolchain.image import base_route
    from toolchain.runs import run_loop

    monkeypatch.setattr(base_route, "engine_availability", lambda: lambda ref: None)

    def build_one(*a: object) -> int:
        ran.append("build")
        return 0

    monkeypatch.setattr(run_loop, "build_one", build_one)
    argv = ["image", "--matrix", str(MATRIX), "--cuda", "12.4", "--out", str(tmp_path / "out")]
    args = build_parser().parse_args([*argv, "--network-check"])
    with pytest.raises(EnvironmentUnavailable, match="APEX_SRC=DIR"):
        cells.cmd_image(args, console=None)  # type: ignore[arg-type]
    assert ran == []
    args = build_parser().parse_args(argv)
    assert cells.cmd_image(args, console=None) == 0  # type: ignore[arg-type]
    assert ran == ["local base", "build"]
