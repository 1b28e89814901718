"""Builds a cell's image through BuildKit via the docker CLI (the Docker SDK's build uses the legacy
builder: no cache or secret mounts), and answers whether a daemon is there at all.

Which client: `docker buildx build` when the buildx plugin works; else a client older than 23 with
`DOCKER_BUILDKIT=1 docker build`, which drives the daemon's built-in BuildKit without buildx (Debian's
docker.io 20.10 in /usr/bin). Docker 23+ clients refuse BuildKit without buildx, so each client on
PATH is probed; `DOCKER_CLI=/path/to/docker` skips the probe.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import functools
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.spec.compat import DEFAULT_PLATFORM
from verify import workflow_commands

if TYPE_CHECKING:
    from toolchain.spec.matrix import Cell

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = "docker/Dockerfile"
CONTEXT_PATHS = ("pyproject.toml", "verify", "toolchain", "docker")  # what the Dockerfile reads
INPUTS = "docker/build-inputs"
WHEELHOUSE_NAME, APEX_SRC_NAME = "wheelhouse", "apex-src"
TAIL_LINES = 30
TARGETS = ("runtime", "runtime-devel", "runtime-slim", "verify-runtime", "apex-build", "torch", "devel", "apex-src")

# What works with a package index and no image registry (README "No registry?").
NO_REGISTRY_COMMAND = ("bash scripts/ensure-docker.sh && python3 build.py image --cuda 13.0 --torch 2.11.0 --os debian12 "
                       "--python 3.11 --base-devel apex-toolchain/base:bookworm --base-runtime apex-toolchain/base:bookworm "
                       "--torch-index-url https://pypi.org/simple --archs 9.0 --target runtime-slim")

# Output that means "the environment is missing something", not "this cell is broken": exit 3.
# (pattern, message, retry?) - a registry hiccup is worth one more try; a full disk is not.
_ENVIRONMENT_FAULTS: tuple[tuple[str, str, bool], ...] = (
    (r"Cannot connect to the Docker daemon", "no Docker daemon answers; start it (`dockerd &` or "
     "`sudo systemctl start docker`) or set DOCKER_HOST", False),
    (r"permission denied while trying to connect to the Docker daemon socket", "the Docker socket is not "
     "permitted for this user; add the user to the docker group (or run with sudo)", False),
    (r"no space left on device", "the disk is full (no space left on device); free space "
     "(`docker builder prune`, `docker image prune`) and retry", False),
    (r"pull access denied|failed to resolve source metadata|failed to do request|"
     r"TLS handshake timeout|i/o timeout|manifest unknown|not found: manifest",
     "a base image could not be pulled (no registry reachable, or no such image); load it (docker load), or "
     "build with no registry from a local Debian base and CUDA from the package index: " + NO_REGISTRY_COMMAND, True),
    (r"CERTIFICATE_VERIFY_FAILED", "a TLS certificate did not verify inside the build (a TLS-intercepting proxy, "
     "or a host whose own CA bundle is needed for the package index); pass that CA bundle with --extra-ca PEM "
     "(e.g. the host's /etc/ssl/certs/ca-certificates.crt)", False),
    (r"apex-src stage: cannot reach ", "the Apex git host cannot be reached from the build (no network to it); "
     "pass a local Apex checkout with --apex-src DIR", False),
    (r"buildx component is missing or broken", "this docker client needs the buildx plugin for BuildKit; "
     "install docker-buildx, or point DOCKER_CLI at a client older than 23 (e.g. Debian's /usr/bin/docker)", False),
)
_STEP = re.compile(r"^#(\d+) \[([\w.-]+) (\d+)/(\d+)\] (.*)$")
_STEP_ERROR = re.compile(r"^#(\d+) ERROR:")
_FAILED_STEP = re.compile(r"^ > \[([\w.-]+) \d+/\d+\]")


@dataclasses.dataclass(frozen=True)
class BuildResult:
    ok: bool
    tag: str
    stage_failed: str | None  # the Dockerfile stage whose step failed, e.g. "apex-build"
    log_tail: list[str]  # the last lines of the build log
    duration_s: float
    log_path: str = ""
    step_failed: str | None = None  # "[apex-build 3/5] RUN ..."
    target: str = "runtime"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class DockerClient:
    path: str
    buildx: bool  # `docker buildx build`, else `DOCKER_BUILDKIT=1 docker build`
    version: str

    def build_prefix(self) -> list[str]:
        return [self.path, "buildx", "build", "--load"] if self.buildx else [self.path, "build"]


# ---------------------------------------------------------------- the client


def _client_version(path: str) -> str | None:
    try:
        out = subprocess.run([path, "version", "--format", "{{.Client.Version}}"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"\d+\.\d+[\w.+~-]*", out.stdout)  # the client line prints even without a daemon
    return match.group(0) if match else None


def _has_buildx(path: str) -> bool:
    try:
        return subprocess.run([path, "buildx", "version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.lru_cache(maxsize=1)
def docker_client() -> DockerClient:
    """The first docker client that can build with BuildKit (see the module docstring)."""
    forced = os.environ.get("DOCKER_CLI")
    candidates = [forced] if forced else [shutil.which("docker"), "/usr/bin/docker", "/usr/local/bin/docker"]
    tried = []
    for path in dict.fromkeys(c for c in candidates if c):
        version = _client_version(path)
        if version is None:
            tried.append(f"{path} (does not run)")
            continue
        if _has_buildx(path):
            return DockerClient(path, True, version)
        if int(version.split(".")[0]) < 23:
            return DockerClient(path, False, version)
        tried.append(f"{path} {version} (no buildx plugin)")
    where = ", ".join(tried) or "no docker client on PATH"
    raise EnvironmentUnavailable(
        f"no docker client can build with BuildKit ({where}); install the buildx plugin (docker-buildx) "
        "or Debian's docker.io (20.10), or set DOCKER_CLI to a client that can"
    )


def local_image(client, tag: str):
    """The image `tag` from the local store. Not there, or a tag Docker rejects: UsageError (exit 2);
    the daemon unreachable mid-call: EnvironmentUnavailable (exit 3)."""
    from docker.errors import APIError, DockerException, ImageNotFound

    try:
        return client.images.get(tag)
    except ImageNotFound:
        raise UsageError(f"image {tag!r} is not in the local Docker store; build it (build.py image) or docker pull it") from None
    except APIError as err:  # e.g. `invalid reference format`: the daemon names what is wrong with the tag
        raise UsageError(f"image {tag!r}: {err.explanation or err}; pass a valid image tag or id") from None
    except (DockerException, OSError) as err:  # requests' ConnectionError / timeouts are OSErrors
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise EnvironmentUnavailable(f"the Docker daemon did not answer while looking up image {tag!r} ({reason}); "
                                     "check that it is running (scripts/ensure-docker.sh) or DOCKER_HOST") from None


def ping(timeout: float = 10) -> None:
    """Raise EnvironmentUnavailable (exit 3) with the fix when no daemon answers, via the Docker SDK."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        raise EnvironmentUnavailable("the Docker SDK is not installed; pip install 'docker>=7'") from None
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        docker.from_env(timeout=timeout).ping()
    except (DockerException, OSError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        if "ermission denied" in reason:
            raise EnvironmentUnavailable(
                f"the Docker socket {where} is not permitted for this user ({reason}); add the user to the "
                "docker group (or run with sudo)"
            ) from None
        raise EnvironmentUnavailable(
            f"no Docker daemon answers at {where} ({reason}); start it (`sudo systemctl start docker`, "
            "`dockerd &`, or scripts/ensure-docker.sh) or set DOCKER_HOST"
        ) from None


# ---------------------------------------------------------------- the command


def _progress(progress: str) -> str:
    """What the terminal shows: 'plain' prints every line (CI, pipes); 'tty' only step headers.
    The docker command itself always gets --progress plain: the per-cell log needs the full text."""
    if progress in ("plain", "tty"):
        return progress
    if progress != "auto":
        raise UsageError(f"--progress {progress!r}: use auto, plain or tty")
    return "plain" if (os.environ.get("CI") or not sys.stdout.isatty()) else "tty"


def build_args_for(cell: Cell, *, apex_src: Path | None = None, wheelhouse: Path | None = None,
                   extra: dict[str, str] | None = None) -> dict[str, str]:
    args = dict(cell.build_args())
    args["BASE_SLIM_IMAGE"] = slim_base(args.get("BASE_DEVEL_IMAGE", ""), args.get("BASE_RUNTIME_IMAGE", ""))
    if wheelhouse is not None:
        args["TORCH_WHEELHOUSE"] = WHEELHOUSE_NAME
    if apex_src is not None:
        args["APEX_SRC_DIR"] = APEX_SRC_NAME
    args.update(extra or {})
    return args


def slim_base(devel: str, runtime: str) -> str:
    """runtime-slim's base: $BASE_SLIM_IMAGE; else the runtime base when it is no nvidia/cuda image (a local
    OS base: the slim image needs nothing more); else the OS an nvidia/cuda tag names (…-ubuntu24.04 ->
    ubuntu:24.04), so the venv finds the same Python at the same path."""
    if os.environ.get("BASE_SLIM_IMAGE"):
        return os.environ["BASE_SLIM_IMAGE"]
    for base in (runtime, devel):
        if base and not base.startswith(("nvidia/cuda", "nvcr.io/nvidia/cuda")):
            return base
    found = re.search(r"-(ubuntu|debian|rockylinux|ubi)(\d+(?:\.\d+)?)$", runtime or devel)
    return f"{found.group(1)}:{found.group(2)}" if found else "ubuntu:24.04"


def build_command(cell: Cell, *, target: str = "runtime", apex_src: Path | str | None = None,
                  wheelhouse: Path | str | None = None, extra_ca: Path | str | None = None,
                  progress: str = "auto", context: Path | str = ".",
                  extra_args: dict[str, str] | None = None, client: DockerClient | None = None) -> list[str]:
    """The exact build command for a cell (what `build.py plan` prints; `build_image` runs it)."""
    if target not in TARGETS:
        raise UsageError(f"--target {target!r}: no such Dockerfile stage to ship; use one of {', '.join(TARGETS)}")
    _progress(progress)  # validates the value
    prefix = (client or _client_or_default()).build_prefix()
    command = [*prefix, "--file", str(Path(context) / DOCKERFILE), "--target", target, "--progress", "plain",
               "--tag", cell.id]
    if cell.platform != DEFAULT_PLATFORM:  # e.g. linux/arm64: native on an arm64 builder, else QEMU
        command += ["--platform", cell.platform]
    args = build_args_for(cell, apex_src=Path(apex_src) if apex_src else None,
                          wheelhouse=Path(wheelhouse) if wheelhouse else None, extra=extra_args)
    for key, value in args.items():
        command += ["--build-arg", f"{key}={value}"]
    if extra_ca is not None:
        command += ["--secret", _csv_fields("id=extra_ca", f"src={Path(extra_ca).resolve()}")]
    return [*command, str(context)]


def _csv_fields(*fields: str) -> str:
    """`--secret` is a CSV line to docker: a path holding `,` or `"` is quoted, not split into new fields."""
    line = io.StringIO()
    csv.writer(line, lineterminator="").writerow(fields)
    return line.getvalue()


def _client_or_default() -> DockerClient:
    try:
        return docker_client()
    except EnvironmentUnavailable:  # `plan` shows the command even where no client can build
        return DockerClient("docker", False, "unknown")


# ---------------------------------------------------------------- the build context


def _copy_tree(src: Path, dest: Path, ignore: Iterable[str] = ()) -> None:
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", *ignore),
                    dirs_exist_ok=True)


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)  # wheels are large; a hard link costs nothing when on the same disk
    except OSError:
        shutil.copy2(src, dest)


def stage_context(dest: Path, *, apex_src: Path | None = None, wheelhouse: Path | None = None) -> Path:
    """A private build context: the files the Dockerfile reads, plus the offline inputs under
    docker/build-inputs/. Private so that two builds at once never see each other's inputs."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in CONTEXT_PATHS:
        src = REPO_ROOT / name
        if src.is_dir():
            _copy_tree(src, dest / name, ignore=("build-inputs",) if name == "docker" else ())
        else:
            shutil.copy2(src, dest / name)
    inputs = dest / INPUTS
    inputs.mkdir(parents=True, exist_ok=True)
    if wheelhouse is not None:
        wheels = sorted(Path(wheelhouse).glob("*.whl"))
        if not wheels:
            raise UsageError(f"--wheelhouse {wheelhouse}: no .whl files there; fill it with `pip download` "
                             "(torch, its dependencies, setuptools, packaging, ninja)")
        (inputs / WHEELHOUSE_NAME).mkdir()
        for wheel in wheels:
            _link_or_copy(wheel, inputs / WHEELHOUSE_NAME / wheel.name)
    if apex_src is not None:
        src = Path(apex_src)
        if not (src / "setup.py").is_file() or not (src / "apex").is_dir():
            raise UsageError(f"--apex-src {src}: not an Apex source tree (needs setup.py and apex/); "
                             "pass the root of an NVIDIA/apex checkout")
        _copy_tree(src, inputs / APEX_SRC_NAME, ignore=("build", "*.egg-info", "dist"))
    return dest


# ---------------------------------------------------------------- running it


def _image_digest(name: str) -> str:
    """The base image's repo digest (or local image id) for the provenance labels; '' if not local."""
    if "@sha256:" in name:  # pinned by digest: the pin is the provenance, local or not
        return name.rpartition("@")[2]
    try:
        import docker

        image = docker.from_env(timeout=10).images.get(name)
    except Exception:  # not local yet (BuildKit will pull it), or no SDK: provenance stays empty
        return ""
    digests = image.attrs.get("RepoDigests") or []
    return digests[0].rpartition("@")[2] if digests else image.id


def _source_revision() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except OSError:
        return ""


def failed_step(lines: list[str]) -> tuple[str | None, str | None]:
    """(stage, step) of the failing build step, from BuildKit's plain progress output."""
    headers: dict[str, tuple[str, str]] = {}
    for line in lines:
        match = _STEP.match(line)
        if match:
            headers[match.group(1)] = (match.group(2), f"[{match.group(2)} {match.group(3)}/{match.group(4)}] {match.group(5)}")
    for line in lines:
        match = _STEP_ERROR.match(line)
        if match and match.group(1) in headers:
            return headers[match.group(1)]
    for line in lines:  # the summary block BuildKit prints after "------"
        match = _FAILED_STEP.match(line)
        if match:
            return match.group(1), line.strip()[2:]
    return None, None


def environment_fault(text: str) -> tuple[str, bool] | None:
    for pattern, message, retry in _ENVIRONMENT_FAULTS:
        if re.search(pattern, text, re.IGNORECASE):
            return message, retry
    return None


def _run_build(command: list[str], env: dict[str, str], log_path: Path, show: str) -> int:
    # line-buffered: the log is what `tail -f` and a killed run leave behind, so each line lands at once
    with open(log_path, "a", encoding="utf-8", buffering=1) as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", bufsize=1)
        shown: set[str] = set()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                step = _STEP.match(line)
                if show == "plain" or "ERROR" in line or (step and step.group(1) not in shown):
                    sys.stdout.write(workflow_commands.inert(line))  # tty: each step's header once, and errors
                    if step:
                        shown.add(step.group(1))
            return proc.wait()
        except BaseException:
            proc.terminate()
            proc.wait()
            raise


def _daemon_still_there(cell: Cell, log_path: Path) -> None:
    """A daemon that dies mid-build leaves only a transport error ("EOF", "transport is closing") in the
    log, which would pass for a broken cell: ask the daemon, and make its absence exit 3."""
    try:
        ping(timeout=5)
    except EnvironmentUnavailable as error:
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"[engine] after the failed build: {error}\n")
        raise EnvironmentUnavailable(f"building {cell.id}: the Docker daemon stopped answering during the "
                                     f"build ({error}); see {log_path}") from None


def build_image(cell: Cell, *, target: str = "runtime", log_path: Path | str, apex_src: Path | str | None = None,
                wheelhouse: Path | str | None = None, extra_ca: Path | str | None = None, progress: str = "auto",
                extra_args: dict[str, str] | None = None, retries: int = 1) -> BuildResult:
    """Build one cell's image (tag == cell.id). A broken cell returns ok=False with the failing stage
    and the log's last lines; a missing environment (daemon, disk, registry) raises
    EnvironmentUnavailable, after `retries` more tries where a retry can help."""
    show = _progress(progress)
    if extra_ca is not None and not Path(extra_ca).is_file():
        raise UsageError(f"--extra-ca {extra_ca}: no such file; pass a PEM file with the proxy's CA certificate")
    client = docker_client()
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")
    args = cell.build_args()
    provenance = {
        "BUILD_DATE": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "SOURCE_REVISION": _source_revision(),
        "BASE_DEVEL_DIGEST": _image_digest(args.get("BASE_DEVEL_IMAGE", "")),
        "BASE_RUNTIME_DIGEST": _image_digest(args.get("BASE_RUNTIME_IMAGE", "")),
    }
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="apex-context-") as tmp:
        context = stage_context(Path(tmp), apex_src=Path(apex_src) if apex_src else None,
                                wheelhouse=Path(wheelhouse) if wheelhouse else None)
        command = build_command(cell, target=target, apex_src=apex_src, wheelhouse=wheelhouse, extra_ca=extra_ca,
                                context=context, extra_args={**provenance, **(extra_args or {})}, client=client)
        for attempt in range(retries + 1):
            code = _run_build(command, env, log_path, show)
            if code == 0:
                break
            lines = log_path.read_text(errors="replace").splitlines()
            fault = environment_fault("\n".join(lines[-200:]))
            if fault is None:
                _daemon_still_there(cell, log_path)
                break
            message, retry = fault
            if not retry or attempt == retries:
                raise EnvironmentUnavailable(f"building {cell.id}: {message}; see {log_path}")
            time.sleep(5)
    lines = log_path.read_text(errors="replace").splitlines()
    stage, step = (None, None) if code == 0 else failed_step(lines)
    return BuildResult(ok=code == 0, tag=cell.id, stage_failed=stage, log_tail=lines[-TAIL_LINES:],
                       duration_s=round(time.monotonic() - start, 1), log_path=str(log_path),
                       step_failed=step, target=target)
