"""What a build fetches from the network, probed from this host before any build stage runs.

Without this, an unreachable input shows up only in the stage that fetches it: no GitHub fails the
apex-src stage after the devel and torch stages ran (~290 s on 2 cores). `check()` asks each remote input
that the chosen --target's stages fetch on the cell's route (the Apex git host for apex-src unless
--apex-src, the torch index and PyPI for torch unless --wheelhouse, PyPI for the local route's CUDA wheels in
apex-build, the base images a forced route stands on) with a short timeout, all at once, and raises one
EnvironmentUnavailable (exit 3) with one line per input that did not answer, each naming the input and the
fix. Any HTTP answer counts as reachable (a 404 still proves the host is there).

It runs after the route is chosen: `--base auto` has already moved a cell whose NVIDIA base cannot be pulled
to the local base, whose images the build makes here, so the check never stands in the fallback's way.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from toolchain.errors import EnvironmentUnavailable
from toolchain.spec import compat as compat_mod
from toolchain.spec import targets as targets_mod
from toolchain.spec.cell import Cell
from verify.runtime import input_files

TIMEOUT_S = 5.0  # per probe; the probes run at once, so the whole check takes about this long at most
SKIP_HINT = "--no-network-check (make: NETWORK_CHECK=no) builds anyway"

# The stages of docker/Dockerfile that fetch something, as each target reaches them (FROM, COPY --from and
# RUN --mount from= edges; os-runtime/os-slim by the RUNTIME_OS the target stands on, toolchain/spec/targets.py).
# BuildKit runs only the stages a target reaches. tests/unit/test_remote_inputs.py derives this from the file.
_APEX_BUILD = ("devel", "torch", "apex-src", "apex-build")
FETCHING_STAGES: dict[str, tuple[str, ...]] = {
    "devel": ("devel",),  # the devel base
    "torch": ("devel", "torch"),  # + the torch index and PyPI
    "apex-src": ("devel", "apex-src"),  # + the Apex git host
    "apex-build": _APEX_BUILD,  # + PyPI for CUDA's wheels on the local route
    "runtime-devel": _APEX_BUILD,
    "runtime": (*_APEX_BUILD, "os-runtime"),  # + the runtime base
    "runtime-slim": (*_APEX_BUILD, "os-slim"),  # + the slim base (an OS image)
    "verify-runtime": ("devel", "torch", "os-runtime"),
    "ccache": ("devel",),  # the compiler cache carried across CI runs: both stand on devel
    "ccache-import": ("devel",),
}
_EVERY_STAGE = tuple(dict.fromkeys(s for stages in FETCHING_STAGES.values() for s in stages))

# url -> None when it answers, else why not (one line)
Probe = Callable[[str], "str | None"]
# image ref -> None when the engine has it or a registry serves it, else why not (base_route.Availability)
Availability = Callable[[str], "str | None"]


@dataclasses.dataclass(frozen=True)
class RemoteInput:
    what: str  # "Apex source (git)"
    where: str  # the URL or image the build fetches
    fix: str  # what to pass instead, in make's and build.py's words
    kind: str = "url"  # "url" (probed over the network) or "image" (asked of the engine)


def needed(
    cell: Cell,
    *,
    target: str = "runtime",
    apex_src: Path | None,
    wheelhouse: Path | None,
    apex_index: bool = False,
    facts: compat_mod.Compat | None = None,
) -> list[RemoteInput]:
    """The remote inputs a build of `cell` (as routed) for `target` fetches, given the offline inputs it was
    handed. A target this table does not know is taken as fetching everything. The table is the compile
    route (APEX_FROM=build); with `apex_index` the Apex the image ships is the index's wheel, fetched on the
    host before the build (toolchain/image/apex_index.py): the apex-src and apex-build stages never run."""
    facts = facts or compat_mod.load()
    stages = FETCHING_STAGES.get(target, _EVERY_STAGE)
    if apex_index:
        stages = tuple(s for s in stages if s not in ("apex-src", "apex-build"))
    inputs = []
    if "apex-src" in stages and apex_src is None:
        inputs.append(
            RemoteInput(
                "Apex source (git)",
                cell.apex_repo,
                "pass a local Apex checkout: make APEX_SRC=DIR (build.py --apex-src DIR)",
            )
        )
    if "torch" in stages and wheelhouse is None:
        inputs.append(
            RemoteInput(
                f"torch {cell.torch} index",
                cell.torch_index_url,
                "pass its wheels: make WHEELHOUSE=DIR (build.py --wheelhouse DIR), or a reachable mirror: "
                "--torch-index-url URL",
            )
        )
    # nvcc from NVIDIA's wheels: the local route on an OS that does not package the cell's CUDA
    cuda_wheels = "apex-build" in stages and cell.base_route == "local" and not cell.os_cuda_packages
    if ("torch" in stages and wheelhouse is None) or cuda_wheels:
        uses = "the build requirements" if "torch" in stages and wheelhouse is None else ""
        uses += (" and " if uses else "") + ("CUDA's nvcc wheels" if cuda_wheels else "")
        fix = (
            "reach PyPI (a TLS proxy: make EXTRA_CA=PEM), or build on NVIDIA's images: make BASE=nvidia"
            if cuda_wheels
            else "pass the build requirements as wheels: make WHEELHOUSE=DIR (build.py --wheelhouse DIR)"
        )
        inputs.append(RemoteInput(f"PyPI ({uses})", facts.pypi_index_url, fix))
    if cell.base_route in ("nvidia", "given"):  # the local route's bases are made here, not fetched
        inputs += _base_images(cell, stages)
    inputs = [i for i in inputs if i.kind == "image" or _is_remote(i.where)]
    return list({(i.what, i.where): i for i in inputs}.values())


def _base_images(cell: Cell, stages: tuple[str, ...]) -> list[RemoteInput]:
    refs = []
    if "devel" in stages:
        refs.append(cell.base_devel)
    if "os-runtime" in stages:
        refs.append(cell.base_runtime)
    if "os-slim" in stages:
        refs.append(targets_mod.slim_base(cell.base_devel, cell.base_runtime))
    fix = (
        "build on the local Debian base instead: make BASE=local (build.py --base local), or load "
        "the image (docker load)"
        if cell.base_route == "nvidia"
        else "name images the engine has or a registry serves: BASE_DEVEL_IMAGE=/BASE_RUNTIME_IMAGE="
    )
    return [RemoteInput("base image", ref, fix, kind="image") for ref in dict.fromkeys(refs)]


def _is_remote(url: str) -> bool:
    scheme = urllib.parse.urlsplit(url).scheme
    return scheme in ("http", "https", "ssh", "git") or (scheme == "" and "@" in url and ":" in url)


def probe_url(url: str, *, timeout: float = TIMEOUT_S, extra_ca: Path | None = None) -> str | None:
    """None when the URL's host answers (any HTTP status), else why not in a few words."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):  # ssh://, git://, git@host:path: can the port be reached?
        host = parts.hostname or url.split("@", 1)[-1].split(":", 1)[0]
        port = parts.port or {"git": 9418}.get(parts.scheme, 22)
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as err:
            return _why(err, timeout)
        return None
    context = ssl.create_default_context()
    if extra_ca is not None:
        context.load_verify_locations(cafile=str(extra_ca))
    request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "apex-toolchain-preflight"})
    try:
        input_files.open_url(request, timeout_s=timeout, context=context).close()  # nothing read: it answered
    except urllib.error.HTTPError:
        return None  # the host answered
    except urllib.error.URLError as err:
        return _why(err.reason, timeout)
    except OSError as err:
        return _why(err, timeout)
    return None


def _why(err: object, timeout: float) -> str:
    if isinstance(err, ssl.SSLCertVerificationError):
        return (
            f"TLS certificate not trusted ({err.verify_message}); behind a TLS proxy pass make EXTRA_CA=PEM"
        )
    if isinstance(err, (TimeoutError, socket.timeout)):
        return f"no answer within {timeout:g} s"
    if isinstance(err, socket.gaierror):
        return f"host name not resolved ({err.strerror})"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__


def check(
    inputs: list[RemoteInput],
    *,
    probe: Probe,
    available: Availability | None = None,
) -> None:
    """Probe every input at once; EnvironmentUnavailable (exit 3) with one line per unreachable one."""
    if not inputs:
        return

    def ask(item: RemoteInput) -> str | None:
        if item.kind == "image":
            return available(item.where) if available is not None else None
        return probe(item.where)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(inputs)) as pool:
        answers = list(pool.map(ask, inputs))
    missing = [(item, why) for item, why in zip(inputs, answers, strict=True) if why is not None]
    if not missing:
        return
    lines = [
        f"{item.what} {item.where} cannot be {'pulled' if item.kind == 'image' else 'reached'} ({why}); {item.fix}"
        for item, why in missing
    ]
    if len(lines) == 1:
        raise EnvironmentUnavailable(f"{lines[0]} (nothing was built; {SKIP_HINT})")
    raise EnvironmentUnavailable(
        f"{len(lines)} inputs of the build cannot be reached, nothing was built ({SKIP_HINT}):\n"
        + "\n".join(f"  - {line}" for line in lines)
    )
