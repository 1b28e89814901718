"""The network check before `build.py image` builds anything (on by default): which remote inputs a routed
cell's --target fetches, probed against real sockets on 127.0.0.1 (a server that records what it was asked, a
port nothing listens on), one line per unreachable input with its fix and exit 3, and its place in cmd_image
(after the base route is chosen, before the local base is made and before the build)."""

from __future__ import annotations

import dataclasses
import http.server
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO, dockerfile
from toolchain.commands import cells
from toolchain.commands.parser import build_parser
from toolchain.errors import EnvironmentUnavailable
from toolchain.image import buildkit_build, remote_inputs
from toolchain.spec import compat as compat_mod
from toolchain.spec import targets
from toolchain.spec.matrix import cli_cell
from verify.runtime import exit_codes

MATRIX = REPO / "matrix.toml"


def nvidia_cell(**fields: str):
    return cli_cell({"cuda": "12.4", **fields}, matrix_path=MATRIX)


def local_cell(**fields: str):
    values = {"cuda": "13.2", "torch": "2.15", "python": "3.13", "os": "debian13", **fields}
    return cli_cell(values, matrix_path=MATRIX)


@dataclasses.dataclass
class Host:
    url: str  # http://127.0.0.1:PORT
    asked: list[str]  # the paths it was asked for, in order


@pytest.fixture
def host() -> Iterator[Host]:
    """An HTTP server on 127.0.0.1 that answers 404 to everything (a host that is there) and records paths."""
    asked: list[str] = []

    class Answers404(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            asked.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers404)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield Host(f"http://127.0.0.1:{httpd.server_address[1]}", asked)
    httpd.shutdown()
    httpd.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def facts_with_pypi(url: str) -> compat_mod.Compat:
    return dataclasses.replace(compat_mod.load(), pypi_index_url=url)


class ImagesAsked:
    """The engine's side of the check: records each base image it is asked about; all are there."""

    def __init__(self) -> None:
        self.refs: list[str] = []

    def __call__(self, ref: str) -> str | None:
        self.refs.append(ref)
        return None


def test_a_host_that_answers_even_404_is_reachable(host: Host) -> None:
    assert remote_inputs.probe_url(host.url + "/simple", timeout=2) is None
    assert host.asked == ["/simple"]


def test_a_refused_port_and_a_silent_host_are_unreachable_with_why() -> None:
    assert "refused" in (remote_inputs.probe_url(f"http://127.0.0.1:{closed_port()}/", timeout=2) or "")
    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        why = remote_inputs.probe_url(f"http://127.0.0.1:{silent.getsockname()[1]}/", timeout=0.3)
    assert why is not None and "0.3 s" in why


def test_an_ssh_git_url_is_probed_on_its_port() -> None:
    assert remote_inputs.probe_url(f"ssh://git@127.0.0.1:{closed_port()}/apex.git", timeout=2) is not None


# target -> (the paths of the local host its stages fetch, the base images: d devel, r runtime, s slim)
ON_NVIDIAS_ROUTE = {
    "devel": (set(), "d"),
    "torch": ({"/whl", "/pypi"}, "d"),
    "apex-src": ({"/apex.git"}, "d"),
    "apex-build": ({"/apex.git", "/whl", "/pypi"}, "d"),
    "runtime-devel": ({"/apex.git", "/whl", "/pypi"}, "d"),
    "runtime": ({"/apex.git", "/whl", "/pypi"}, "dr"),
    "runtime-slim": ({"/apex.git", "/whl", "/pypi"}, "ds"),
    "verify-runtime": ({"/whl", "/pypi"}, "dr"),
}


@pytest.mark.parametrize("target", sorted(ON_NVIDIAS_ROUTE))
def test_each_target_probes_only_what_its_stages_fetch(host: Host, target: str) -> None:
    cell = nvidia_cell(apex_repo=host.url + "/apex.git", torch_index_url=host.url + "/whl")
    inputs = remote_inputs.needed(
        cell, target=target, apex_src=None, wheelhouse=None, facts=facts_with_pypi(host.url + "/pypi")
    )
    images = ImagesAsked()
    remote_inputs.check(inputs, probe=remote_inputs.probe_url, available=images)
    paths, bases = ON_NVIDIAS_ROUTE[target]
    assert set(host.asked) == paths and len(host.asked) == len(paths)
    named = {"d": cell.base_devel, "r": cell.base_runtime, "s": "ubuntu:22.04"}
    assert images.refs == [named[b] for b in bases]
    assert "ubuntu:22.04" not in (cell.base_devel, cell.base_runtime)  # the slim base is its own image


def test_offline_inputs_keep_their_hosts_out_even_when_those_are_down(tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{closed_port()}"
    cell = nvidia_cell(apex_repo=down + "/apex.git", torch_index_url=down + "/whl")
    facts = facts_with_pypi(down + "/pypi")
    for target in ON_NVIDIAS_ROUTE:  # --apex-src and --wheelhouse: nothing but the base images is left
        inputs = remote_inputs.needed(
            cell, target=target, apex_src=tmp_path, wheelhouse=tmp_path, facts=facts
        )
        assert {i.kind for i in inputs} == {"image"}
        remote_inputs.check(inputs, probe=remote_inputs.probe_url, available=ImagesAsked())
    with pytest.raises(EnvironmentUnavailable) as refused:  # the control: without --apex-src the same fails
        inputs = remote_inputs.needed(
            cell, target="apex-src", apex_src=None, wheelhouse=tmp_path, facts=facts
        )
        remote_inputs.check(inputs, probe=remote_inputs.probe_url, available=ImagesAsked())
    assert f"Apex source (git) {down}/apex.git cannot be reached (" in str(refused.value)


def test_an_image_from_the_index_never_probes_the_git_host_or_the_cuda_wheels(tmp_path: Path) -> None:
    """--apex-index: the wheel is fetched on the host before the build; apex-src and apex-build never run, so
    neither the Apex git host nor PyPI's nvcc wheels are asked (both down here), only what torch fetches."""
    down = f"http://127.0.0.1:{closed_port()}"
    cell = local_cell(apex_repo=down + "/apex.git", torch_index_url=down + "/whl")
    facts = facts_with_pypi(down + "/pypi")
    for target in ("runtime", "runtime-slim", "runtime-devel"):
        inputs = remote_inputs.needed(
            cell, target=target, apex_src=None, wheelhouse=tmp_path, apex_index=True, facts=facts
        )
        assert inputs == [], (target, inputs)
        compiled = remote_inputs.needed(cell, target=target, apex_src=None, wheelhouse=tmp_path, facts=facts)
        assert {i.what for i in compiled} == {"Apex source (git)", "PyPI (CUDA's nvcc wheels)"}, compiled


@pytest.mark.parametrize("target", sorted(ON_NVIDIAS_ROUTE))
def test_the_local_route_never_asks_for_a_base_image(host: Host, target: str, tmp_path: Path) -> None:
    """Its bases are made here (debootstrap): NVIDIA's registry is never probed; PyPI only for what it fetches:
    the torch stage's requirements, and nvcc's wheels for the Apex build."""
    cell = local_cell(torch_index_url=host.url + "/whl")
    assert cell.base_route == "local"
    facts = facts_with_pypi(host.url + "/pypi")
    images = ImagesAsked()
    inputs = remote_inputs.needed(cell, target=target, apex_src=tmp_path, wheelhouse=tmp_path, facts=facts)
    remote_inputs.check(inputs, probe=remote_inputs.probe_url, available=images)
    compiles = target in ("apex-build", "runtime-devel", "runtime", "runtime-slim")
    assert images.refs == [] and host.asked == (["/pypi"] if compiles else [])
    if compiles:
        (pypi,) = inputs
        assert pypi.what == "PyPI (CUDA's nvcc wheels)" and "BASE=nvidia" in pypi.fix


def test_each_unreachable_input_is_one_line_naming_it_and_its_fix_exit_3() -> None:
    inputs = remote_inputs.needed(nvidia_cell(), apex_src=None, wheelhouse=None)
    github_down = lambda url: "host name not resolved" if "github.com" in url else None  # noqa: E731
    with pytest.raises(EnvironmentUnavailable) as one:
        remote_inputs.check(inputs, probe=github_down, available=lambda ref: None)
    assert one.value.exit_code == exit_codes.ENVIRONMENT
    message = str(one.value)
    assert "https://github.com/NVIDIA/apex.git cannot be reached (host name not resolved)" in message
    assert "APEX_SRC=DIR" in message and "--no-network-check" in message and "\n" not in message

    with pytest.raises(EnvironmentUnavailable) as every:
        remote_inputs.check(inputs, probe=lambda url: "refused", available=lambda ref: "no such host")
    lines = str(every.value).splitlines()
    assert len(lines) == 1 + len(inputs)
    assert any(
        "base image nvidia/cuda:12.4.1-devel-ubuntu22.04 cannot be pulled (no such host)" in line
        and "BASE=local" in line
        for line in lines
    )
    assert any("WHEELHOUSE=DIR" in line for line in lines)
    remote_inputs.check(inputs, probe=lambda url: None, available=lambda ref: None)  # all answer: no error


def _reached(parent: str, text: str, runtime_os: str) -> set[str]:
    # the table is the compile route: APEX_FROM's default (--apex-index is `needed(apex_index=True)`)
    edges = {parent.replace("${RUNTIME_OS}", runtime_os).replace("${APEX_FROM}", "build")}
    edges |= set(re.findall(r"COPY --from=([\w-]+)", text)) | set(re.findall(r"[,\s]from=([\w-]+)", text))
    return edges


def test_the_stage_table_is_the_dockerfiles() -> None:
    """FETCHING_STAGES against docker/Dockerfile's own graph: a stage that starts fetching, or a target that
    reaches a fetching stage by a new edge, fails here until the table says so."""
    stages = dockerfile().stages
    fetching = {"devel", "torch", "apex-src", "apex-build", "os-runtime", "os-slim"}
    every_target = set(buildkit_build.TARGETS + buildkit_build.CARRY_TARGETS)
    assert set(remote_inputs.FETCHING_STAGES) == every_target
    for target in every_target:
        runtime_os = targets.RUNTIME_OS.get(target, targets.DEFAULT_RUNTIME_OS)
        seen, todo = set(), [target]
        while todo:
            name = todo.pop()
            if name in seen or name not in stages:
                continue
            seen.add(name)
            todo += _reached(stages[name].parent, stages[name].text, runtime_os)
        assert seen & fetching == set(remote_inputs.FETCHING_STAGES[target]), target
    assert "os-slim" not in remote_inputs.FETCHING_STAGES["runtime"]  # the walk tells the two bases apart


@pytest.fixture
def image_steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """cmd_image with the engine's parts recorded: the probes answer 'refused' (nothing leaves this host), the
    local base and the build only record that they ran."""
    ran: list[str] = []
    monkeypatch.setattr(cells, "preflight", lambda mode: None)
    monkeypatch.setattr(cells, "make_local_bases", lambda *a: ran.append("local base"))

    def refused(url: str, **options: object) -> str:
        ran.append(f"probe {url}")
        return "refused"

    monkeypatch.setattr(remote_inputs, "probe_url", refused)
    from toolchain.runs import run_loop

    def build_one(cell, *a: object) -> int:
        ran.append(f"build {cell.base_route}")
        return 0

    monkeypatch.setattr(run_loop, "build_one", build_one)
    return ran


def test_cmd_image_checks_the_network_by_default_before_the_local_base_or_any_build(
    image_steps: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from toolchain.image import base_route

    monkeypatch.setattr(base_route, "engine_availability", lambda: lambda ref: None)
    argv = ["image", "--matrix", str(MATRIX), "--cuda", "12.4", "--out", str(tmp_path / "out")]
    with pytest.raises(EnvironmentUnavailable, match="APEX_SRC=DIR"):
        cells.cmd_image(build_parser().parse_args(argv), console=None)  # type: ignore[arg-type]
    assert image_steps and all(step.startswith("probe ") for step in image_steps)
    image_steps.clear()
    args = build_parser().parse_args([*argv, "--no-network-check"])
    assert cells.cmd_image(args, console=None) == 0  # type: ignore[arg-type]
    assert image_steps == ["local base", "build nvidia"]


def test_the_base_fallback_is_taken_before_the_check(
    image_steps: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An NVIDIA base that cannot be pulled moves the cell to the local base (--base auto); the check then
    asks the engine for no base image at all, so it cannot stop what the fallback would build."""
    from toolchain.console import Console
    from toolchain.image import base_route

    asked: list[str] = []

    def nvidia_gone(ref: str) -> str | None:
        asked.append(ref)
        return "no such host" if ref.startswith("nvidia/cuda") else None

    monkeypatch.setattr(base_route, "engine_availability", lambda: nvidia_gone)
    argv = ["image", "--matrix", str(MATRIX), "--cell", "cu130", "--target", "devel", "--out", str(tmp_path)]
    assert cells.cmd_image(build_parser().parse_args(argv), console=Console()) == 0
    nvidia = cli_cell({}, matrix_path=MATRIX, base_cell="cu130")
    assert asked == [nvidia.base_devel, nvidia.base_runtime]  # the route's own asks, none by the check
    assert image_steps == ["local base", "build local"]  # devel on the local base fetches nothing: no probe
