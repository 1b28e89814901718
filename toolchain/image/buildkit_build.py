"""Builds a cell's image through BuildKit via the docker CLI (the Docker SDK's build uses the legacy
builder: no cache or secret mounts): the build command, a private build context, the provenance
build args, retries where the environment can recover. Which client builds: docker_host.py; what
the log says went wrong: build_log.py.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from toolchain.builder.build_inputs import check_apex_source
from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.image import ccache_carry
from toolchain.image.build_log import STEP, environment_fault, failed_step
from toolchain.image.docker_host import DockerClient, client_or_default, docker_client, ping
from toolchain.spec import image_labels, targets
from toolchain.spec.compat import DEFAULT_PLATFORM
from toolchain.timestamps import now
from verify.runtime import atomic, input_files, workflow_commands

if TYPE_CHECKING:
    from toolchain.spec.cell import Cell

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = "docker/Dockerfile"
# what the Dockerfile reads (apex_verify_entry.py: pyproject.toml names it, the apex-verify script enters there)
CONTEXT_PATHS = ("pyproject.toml", "apex_verify_entry.py", "verify", "toolchain", "docker")
INPUTS = "docker/build-inputs"
WHEELHOUSE_NAME, APEX_SRC_NAME = "wheelhouse", "apex-src"
TAIL_LINES = 30
PROGRESS = "[apex-builder] progress: "  # toolchain/builder/build_progress.py, every 30 s of a compile
TARGETS = (
    "runtime",
    "runtime-devel",
    "runtime-slim",
    "verify-runtime",
    "apex-build",
    "torch",
    "devel",
    "apex-src",
)
CARRY_TARGETS = (ccache_carry.IMPORT_TARGET, ccache_carry.EXPORT_TARGET)  # no image: files to --output


@dataclasses.dataclass(frozen=True)
class OwnedLog:
    """A build log in the --logs folder, which the tool owns: no link below `root` is followed (a cell's
    folder or its log planted as a link is refused, naming it, exit 2); `root` is the user's to name."""

    root: Path
    relpath: str  # "<cell id>/build.log"

    @classmethod
    def at(cls, path: Path | str, root: Path | str | None = None) -> OwnedLog:
        """The log at `path`, owned below `root` (default: the log's own folder)."""
        path = Path(path)
        base = Path(root) if root is not None else path.parent
        return cls(base, path.relative_to(base).as_posix())

    @property
    def path(self) -> Path:
        return self.root / self.relpath

    def start(self) -> None:
        """An empty log: the run's lines only, never the last run's."""
        self.root.mkdir(parents=True, exist_ok=True)
        atomic.write_in_tree(self.root, self.relpath, b"")

    def append(self) -> TextIO:
        """The log opened for appending, line-buffered (what `tail -f` and a killed run leave behind)."""
        fd = atomic.open_append_in_tree(self.root, self.relpath)
        return os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace", buffering=1)


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
    ccache_carried: dict | None = None  # --ccache-dir: the directory before the import and after the export

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------- the command


def _progress(progress: str) -> str:
    """What the terminal shows: 'plain' prints every line (CI, pipes); 'tty' only step headers.
    The docker command itself always gets --progress plain: the per-cell log needs the full text."""
    if progress in ("plain", "tty"):
        return progress
    if progress != "auto":
        raise UsageError(f"--progress {progress!r}: use auto, plain or tty")
    return "plain" if (os.environ.get("CI") or not sys.stdout.isatty()) else "tty"


def build_args_for(
    cell: Cell,
    *,
    target: str = "runtime",
    apex_src: Path | None = None,
    wheelhouse: Path | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    args = targets.build_args(cell.build_args(), target, cell.base_route)
    if wheelhouse is not None:
        args["TORCH_WHEELHOUSE"] = WHEELHOUSE_NAME
    if apex_src is not None:
        args["APEX_SRC_DIR"] = APEX_SRC_NAME
    args.update(extra or {})
    return args


def build_command(
    cell: Cell,
    *,
    target: str = "runtime",
    apex_src: Path | str | None = None,
    wheelhouse: Path | str | None = None,
    extra_ca: Path | str | None = None,
    progress: str = "auto",
    context: Path | str = ".",
    extra_args: dict[str, str] | None = None,
    client: DockerClient | None = None,
) -> list[str]:
    """The exact build command for a cell (what `build.py plan` prints; `build_image` runs it): the build
    args, and the target's labels (toolchain/spec/image_labels.py) rendered from the same args."""
    if target not in TARGETS + CARRY_TARGETS:
        raise UsageError(
            f"--target {target!r}: no such Dockerfile stage to ship; use one of {', '.join(TARGETS)}"
        )
    _progress(progress)  # validates the value
    prefix = (client or client_or_default()).build_prefix()
    command = [
        *prefix,
        "--file",
        str(Path(context) / DOCKERFILE),
        "--target",
        target,
        "--progress",
        "plain",
        "--tag",
        cell.id,
    ]
    if cell.platform != DEFAULT_PLATFORM:  # e.g. linux/arm64: native on an arm64 builder, else QEMU
        command += ["--platform", cell.platform]
    args = build_args_for(
        cell,
        target=target,
        apex_src=Path(apex_src) if apex_src else None,
        wheelhouse=Path(wheelhouse) if wheelhouse else None,
        extra=extra_args,
    )
    for key, value in args.items():
        if key not in image_labels.LABEL_ONLY_ARGS:
            command += ["--build-arg", f"{key}={value}"]
    for key, value in image_labels.for_image(
        target, args
    ).items():  # labels are build.py's, not the Dockerfile's
        command += ["--label", f"{key}={value}"]
    if extra_ca is not None:
        command += ["--secret", _csv_fields("id=extra_ca", f"src={Path(extra_ca).resolve()}")]
    return [*command, str(context)]


def _csv_fields(*fields: str) -> str:
    """`--secret` is a CSV line to docker: a path holding `,` or `"` is quoted, not split into new fields."""
    line = io.StringIO()
    csv.writer(line, lineterminator="").writerow(fields)
    return line.getvalue()


# ---------------------------------------------------------------- the build context


def _copy_tree(src: Path, dest: Path, ignore: Iterable[str] = ()) -> None:
    shutil.copytree(
        src,
        dest,
        symlinks=True,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", *ignore),
        dirs_exist_ok=True,
    )


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)  # wheels are large; a hard link costs nothing when on the same disk
    except OSError:
        shutil.copy2(src, dest)


def stage_context(
    dest: Path,
    *,
    apex_src: Path | None = None,
    wheelhouse: Path | None = None,
    apex_wheel: Any = None,
) -> Path:
    """A private build context: the files the Dockerfile reads, plus the offline inputs under
    docker/build-inputs/. Private so that two builds at once never see each other's inputs.
    `apex_wheel`: an apex_index.IndexWheel, fetched (hash checked) into build-inputs/apex-wheel/."""
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
            raise UsageError(
                f"--wheelhouse {wheelhouse}: no .whl files there; fill it with `pip download` "
                "(torch, its dependencies, setuptools, packaging, ninja)"
            )
        (inputs / WHEELHOUSE_NAME).mkdir()
        for wheel in wheels:
            _link_or_copy(wheel, inputs / WHEELHOUSE_NAME / wheel.name)
    if apex_src is not None:
        src = Path(apex_src)
        check_apex_source(src)
        _copy_tree(src, inputs / APEX_SRC_NAME, ignore=("build", "*.egg-info", "dist"))
    if apex_wheel is not None:
        from toolchain.image import apex_index

        (inputs / apex_index.WHEEL_FOLDER).mkdir()
        apex_index.fetch(apex_wheel, inputs / apex_index.WHEEL_FOLDER)
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
    return digests[0].rpartition("@")[2] if digests else image.id or ""


def _source_revision() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except OSError:
        return ""


def _run_build(command: list[str], env: dict[str, str], owned: OwnedLog, show: str) -> int:
    # line-buffered: the log is what `tail -f` and a killed run leave behind, so each line lands at once
    with owned.append() as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        proc = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
        )
        shown: set[str] = set()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                step = STEP.match(line)
                # tty: each step's header once, errors, and the builder's progress lines (a compile is long)
                if (
                    show == "plain"
                    or "ERROR" in line
                    or PROGRESS in line
                    or (step and step.group(1) not in shown)
                ):
                    sys.stdout.write(workflow_commands.inert(line))
                    if step:
                        shown.add(step.group(1))
            return proc.wait()
        except BaseException:
            proc.terminate()
            proc.wait()
            raise


def _daemon_still_there(cell: Cell, owned: OwnedLog) -> None:
    """A daemon that dies mid-build leaves only a transport error ("EOF", "transport is closing") in the
    log, which would pass for a broken cell: ask the daemon, and make its absence exit 3."""
    try:
        ping(timeout=5)
    except EnvironmentUnavailable as error:
        with owned.append() as log:
            log.write(f"[engine] after the failed build: {error}\n")
        raise EnvironmentUnavailable(
            f"building {cell.id}: the Docker daemon stopped answering during the "
            f"build ({error}); see {owned.path}"
        ) from None


def build_image(
    cell: Cell,
    *,
    target: str = "runtime",
    log_path: Path | str,
    apex_src: Path | str | None = None,
    wheelhouse: Path | str | None = None,
    extra_ca: Path | str | None = None,
    progress: str = "auto",
    extra_args: dict[str, str] | None = None,
    retries: int = 1,
    ccache_dir: Path | None = None,
    ccache_mount: str | None = None,
    apex_index: str | None = None,
    log_root: Path | str | None = None,
) -> BuildResult:
    """Build one cell's image (tag == cell.id). A broken cell returns ok=False with the failing stage
    and the log's last lines; a missing environment (daemon, disk, registry) raises
    EnvironmentUnavailable, after `retries` more tries where a retry can help. With `ccache_dir` the
    compiler cache is imported from it before and exported to it after a successful build (ccache_carry.py).
    With `apex_index` the cell's verified wheel comes from that index instead of a compile (apex_index.py).
    `log_root`: the --logs folder the log lies in (no link below it followed); default the log's folder."""
    show = _progress(progress)
    if extra_ca is not None and not Path(extra_ca).is_file():
        raise UsageError(
            f"--extra-ca {extra_ca}: no such file; pass a PEM file with the proxy's CA certificate"
        )
    owned = OwnedLog.at(log_path, log_root)
    owned.start()  # a link where the log goes is refused before the engine is asked anything
    log_path = owned.path
    client = docker_client()
    args = cell.build_args()
    provenance = {
        "BUILD_DATE": now(),
        "SOURCE_REVISION": _source_revision(),
        "BASE_DEVEL_DIGEST": _image_digest(args.get("BASE_DEVEL_IMAGE", "")),
        "BASE_RUNTIME_DIGEST": _image_digest(args.get("BASE_RUNTIME_IMAGE", "")),
    }
    ccache_dir = ccache_carry.check_dir(ccache_dir)
    # with a carried directory the build's own mount (carried) by default; --ccache-mount alone picks the mount
    mount = ccache_mount or ("carried" if ccache_dir is not None else None)
    carry = ccache_carry.carry_args(mount) if mount else {}
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    start = time.monotonic()
    carried: dict[str, Any] = {}  # with --ccache-dir: its counts before and after, and the mount
    wheel = None
    if apex_index:
        from toolchain.image import apex_index as index_mod

        wheel = index_mod.find(cell, apex_index)  # exit 3 before any stage when the index lacks the stack
    with tempfile.TemporaryDirectory(prefix="apex-context-") as tmp:
        context = stage_context(
            Path(tmp),
            apex_src=Path(apex_src) if apex_src else None,
            wheelhouse=Path(wheelhouse) if wheelhouse else None,
            apex_wheel=wheel,
        )
        all_args = {**provenance, **carry, **(wheel.build_args() if wheel else {}), **(extra_args or {})}
        command = build_command(
            cell,
            target=target,
            apex_src=apex_src,
            wheelhouse=wheelhouse,
            extra_ca=extra_ca,
            context=context,
            extra_args=all_args,
            client=client,
        )
        code = 0
        if ccache_dir is not None:
            carried = {"before": ccache_carry.count(ccache_dir).to_json(), "mount": carry["CCACHE_MOUNT"]}
            code = _carry(
                ccache_carry.IMPORT_TARGET,
                cell,
                context,
                ccache_dir,
                all_args,
                client,
                env,
                owned,
                show,
                extra_ca,
            )
        for attempt in range(retries + 1 if code == 0 else 0):
            code = _run_build(command, env, owned, show)
            if code == 0:
                break
            lines = input_files.read_log_tail(log_path)  # the classifier reads the tail only
            fault = environment_fault("\n".join(lines[-200:]))
            if fault is None:
                _daemon_still_there(cell, owned)
                break
            message, retry = fault
            if not retry or attempt == retries:
                raise EnvironmentUnavailable(f"building {cell.id}: {message}; see {log_path}")
            time.sleep(5)
        if code == 0 and ccache_dir is not None:
            # the image is built either way: a failed export leaves DIR as it was and is reported, not fatal
            exported = _carry(
                ccache_carry.EXPORT_TARGET,
                cell,
                context,
                ccache_dir,
                all_args,
                client,
                env,
                owned,
                show,
                extra_ca,
            )
            carried["after"] = ccache_carry.count(ccache_dir).to_json()
            if exported != 0:
                carried["export_failed"] = f"the ccache export build exited {exported}; see {log_path}"
    lines = input_files.read_text_lenient(log_path, input_files.LOG).splitlines()
    stage, step = (None, None) if code == 0 else failed_step(lines)
    return BuildResult(
        ok=code == 0,
        tag=cell.id,
        stage_failed=stage,
        log_tail=lines[-TAIL_LINES:],
        duration_s=round(time.monotonic() - start, 1),
        log_path=str(log_path),
        step_failed=step,
        target=target,
        ccache_carried=carried or None,
    )


def _carry(
    target: str,
    cell: Cell,
    context: Path,
    ccache_dir: Path,
    args: dict[str, str],
    client: DockerClient,
    env: dict[str, str],
    owned: OwnedLog,
    show: str,
    extra_ca: Path | str | None,
) -> int:
    """One carry build in the image build's builder: import (DIR staged into the context -> cache mount) or
    export (cache mount -> a sibling of DIR, swapped in when complete). The build's exit code."""
    if target == ccache_carry.IMPORT_TARGET:
        ccache_carry.stage_seed(context, ccache_dir)
    dest = (
        ccache_carry.export_dest(ccache_dir)
        if target == ccache_carry.EXPORT_TARGET
        else context / ".imported"
    )
    command = ccache_carry.local_output(
        build_command(
            cell, target=target, extra_ca=extra_ca, context=context, extra_args=args, client=client
        ),
        dest,
    )
    try:
        code = _run_build(command, env, owned, show)
        if code == 0 and target == ccache_carry.EXPORT_TARGET:
            ccache_dir.parent.mkdir(parents=True, exist_ok=True)
            ccache_carry.swap_in(dest, ccache_dir)
        return code
    finally:
        if target == ccache_carry.EXPORT_TARGET and dest.exists():
            shutil.rmtree(dest, ignore_errors=True)


def carry_ccache(
    cell: Cell,
    direction: str,
    *,
    ccache_dir: Path,
    mount: str,
    log_path: Path | str,
    extra_ca: Path | str | None = None,
    progress: str = "auto",
    log_root: Path | str | None = None,
) -> BuildResult:
    """`build.py ccache import|export` for CI, where bake builds the image between the two: the same carry
    builds build_image runs around its own build, in the default builder (bake's, under setup-buildx).
    `log_root`: as build_image's."""
    show = _progress(progress)
    target = {"import": ccache_carry.IMPORT_TARGET, "export": ccache_carry.EXPORT_TARGET}[direction]
    ccache_dir = ccache_carry.check_dir(ccache_dir)
    owned = OwnedLog.at(log_path, log_root)
    owned.start()
    log_path = owned.path
    client = docker_client()
    args = ccache_carry.carry_args(mount)
    start = time.monotonic()
    before = ccache_carry.count(ccache_dir).to_json()
    with tempfile.TemporaryDirectory(prefix="apex-context-") as tmp:
        context = stage_context(Path(tmp))
        code = _carry(
            target,
            cell,
            context,
            ccache_dir,
            args,
            client,
            dict(os.environ, DOCKER_BUILDKIT="1"),
            owned,
            show,
            extra_ca,
        )
    lines = input_files.read_text_lenient(log_path, input_files.LOG).splitlines()
    carried = {"before": before, "mount": mount, "after": ccache_carry.count(ccache_dir).to_json()}
    return BuildResult(
        ok=code == 0,
        tag=cell.id,
        stage_failed=None if code == 0 else failed_step(lines)[0],
        log_tail=lines[-TAIL_LINES:],
        duration_s=round(time.monotonic() - start, 1),
        log_path=str(log_path),
        target=target,
        ccache_carried=carried,
    )
