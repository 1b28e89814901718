"""Run verify inside an image, with every GPU requested, through Docker or podman (container_engine).

Which verify runs: an image this toolchain built carries verify (label `io.apex-toolchain.cell`) and
runs its own `python -m verify`; any other image (NGC PyTorch, a user's own) gets the zipapp of this
checkout (`build.py zipapp`) copied in before the container starts and runs it with the image's own
Python and torch (`--verify-from zipapp|image` overrides). An engine without a GPU runtime: say so and
run `verify --static` instead (or exit 3 when a GPU is required). The report is written inside the
container's /tmp and copied out once it stops, so the image's non-root user needs no host mount. The
report gets an `audit` block naming the image (ref, image id, repo digest), the engine and which verify ran.
Its files land in a folder below --out, which the tool owns: no link below --out is followed (atomic's
owned-tree rule), checked before the container starts and again at each write.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.image import container_engine, verify_zipapp
from toolchain.image.container_engine import DockerEngine, NoGpuRuntime, PodmanEngine
from toolchain.spec.image_labels import CELL as OWN_IMAGE_LABEL  # images built here ship verify in their venv
from toolchain.timestamps import now
from verify.report import reader as verify_report
from verify.runtime import atomic, exit_codes, input_files
from verify.runtime.messages import printable

REPORT_DIR = "/tmp/verify-report"  # inside the container: writable by any user
ZIPAPP_PATH = "/tmp/apex-verify/verify.pyz"
GPU_MODES = ("auto", "require", "none")
VERIFY_FROM = ("auto", "image", "zipapp")
OUT_FILES = ("verify.log", "container-run.json", "report.json", "report.md")  # what lands in out_dir
# The image's own interpreter: python3 first (Debian-style images have only that), then python.
_RUN_ZIPAPP = (
    'for py in python3 python; do if command -v "$py" >/dev/null 2>&1; then exec "$py" '
    + ZIPAPP_PATH
    + ' "$@"; fi; done; '
    'echo "verify: this image has no python3 or python on PATH; verify needs the image\'s Python and torch" >&2; '
    "exit 3"
)


@dataclasses.dataclass(frozen=True)
class OwnedOut:
    """The folder verify's files land in (out_dir), below the --out folder the tool owns (root)."""

    root: Path
    out_dir: Path

    @classmethod
    def of(cls, out_dir: Path | str, root: Path | str | None) -> OwnedOut:
        base = Path(root) if root is not None else Path(out_dir)
        Path(out_dir).relative_to(base)  # ValueError for an out_dir outside it: a caller's bug
        return cls(base, Path(out_dir))

    def check(self) -> None:
        """LinkInOwnedTree for a link or special file on the way down to out_dir or at a name written there;
        nothing is made (a run refused later leaves no folder)."""
        where = self.root
        for part in self.out_dir.relative_to(self.root).parts:
            atomic.refuse_links_in_tree(where, only=(part,))
            where = where / part
        atomic.refuse_links_in_tree(where, only=OUT_FILES)

    def write(self, name: str, data: bytes | str | dict) -> None:
        """bytes as they are, a text as write_text, a dict as write_json would write them."""
        self.root.mkdir(parents=True, exist_ok=True)
        relpath = (self.out_dir / name).relative_to(self.root).as_posix()
        if isinstance(data, dict):
            atomic.write_json_in_tree(self.root, relpath, data)
        elif isinstance(data, str):
            atomic.write_text_in_tree(self.root, relpath, data)
        else:
            atomic.write_in_tree(self.root, relpath, data)


def _note(message: str) -> None:
    print(printable(f"[verify-image] {message}"), file=sys.stderr, flush=True)


def _verify_args(static: bool, require_gpu: bool) -> list[str]:
    args = ["--json", f"{REPORT_DIR}/report.json", "--markdown", f"{REPORT_DIR}/report.md"]
    if static:
        args.append("--static")
    if require_gpu:
        args.append("--require-gpu")
    return args


def command(verify_from: str, static: bool, require_gpu: bool) -> list[str]:
    if verify_from == "zipapp":
        return ["sh", "-c", _RUN_ZIPAPP, "verify", *_verify_args(static, require_gpu)]
    return ["python", "-m", "verify", *_verify_args(static, require_gpu)]


def _resolve_verify_from(asked: str, labels: dict[str, str]) -> str:
    if asked not in VERIFY_FROM:
        raise UsageError(f"--verify-from {asked!r}: use one of {', '.join(VERIFY_FROM)}")
    if asked != "auto":
        return asked
    return "image" if OWN_IMAGE_LABEL in labels else "zipapp"


def repository_of(ref: str) -> str:
    """'reg:5000/org/apex:tag' or 'reg:5000/org/apex@sha256:..' -> 'reg:5000/org/apex'."""
    if "@" in ref:
        return ref.partition("@")[0]
    name, sep, tag = ref.rpartition(":")
    return name if sep and "/" not in tag else ref


def _audit_block(info: container_engine.ImageInfo, runtime, verify_from: str, app) -> dict:
    return {
        "image": info.ref,
        "image_id": info.id,
        # the manifest digest in the repository the image was named by: null for an image never pushed or pulled
        "digest": info.digest_for(repository_of(info.ref)),
        "repo_digests": list(info.repo_digests),
        "engine": runtime.name,
        "verify_from": verify_from,
        "zipapp_sha256": app.sha256 if app else None,
        "audited_at": now(),
    }


def _audit_markdown(audit: dict) -> str:
    digest = audit["digest"] or "none (a local image, never pushed or pulled)"
    source = (
        f"the zipapp of this checkout (sha256 `{audit['zipapp_sha256']}`)"
        if audit["verify_from"] == "zipapp"
        else "the image's own verify"
    )
    return (
        f"> Audited image `{audit['image']}`: image id `{audit['image_id']}`, repo digest `{digest}`; "
        f"engine {audit['engine']}; verify from {source}.\n\n"
    )


def verify_image(
    tag: str,
    *,
    out_dir: Path | str,
    gpu: str = "auto",
    timeout_s: float = 3600,
    verify_from: str = "auto",
    engine: str | DockerEngine | PodmanEngine | None = None,
    out_root: Path | str | None = None,
) -> tuple[int, Path]:
    """Verify `tag` in a container. gpu: "auto" (GPUs if the engine has a GPU runtime, else --static),
    "require" (exit 3 without it), "none" (--static). `out_root`: the folder the tool owns that out_dir lies
    in (--out; default out_dir itself), below which no link is followed. Returns (exit code, report path)."""
    if gpu not in GPU_MODES:
        raise UsageError(f"--gpu {gpu!r}: use one of {', '.join(GPU_MODES)}")
    owned = OwnedOut.of(out_dir, out_root)
    owned.check()  # a link planted there costs no container run
    runtime = engine if isinstance(engine, (DockerEngine, PodmanEngine)) else container_engine.get(engine)
    info = runtime.image(tag)
    source = _resolve_verify_from(verify_from, info.labels)
    out_dir = Path(out_dir)  # made by the first file written into it: a run refused here leaves no folder
    files_in, app = _zipapp_files(source)
    run = {
        "image": tag,
        "engine": runtime.name,
        "verify_from": source,
        "gpu_requested": gpu != "none",
        "gpu_runtime": None,
        "mode": "full",
        "note": None,
    }

    def go(static: bool, with_gpu: bool, require: bool) -> container_engine.RunResult:
        return runtime.run(
            tag,
            command(source, static, require),
            gpu=with_gpu,
            files_in=files_in,
            collect=REPORT_DIR,
            timeout_s=timeout_s,
        )

    result = _run_with_gpu_or_static(go, gpu, runtime.name, run)
    owned.write("verify.log", result.log)
    if result.timed_out:
        raise EnvironmentUnavailable(
            f"verify in {tag} did not finish within {timeout_s:.0f} s; its output is in "
            f"{out_dir / 'verify.log'}"
        )
    status = result.status
    run["exit_code"] = status
    audit = _audit_block(info, runtime, source, app)
    run["audit"] = audit
    owned.write("container-run.json", run)
    if "report.json" not in result.files:
        _note(f"verify wrote no report (exit {status}); its output is in {out_dir / 'verify.log'}")
        return (
            status
            if status in (exit_codes.FAILED, exit_codes.USAGE, exit_codes.ENVIRONMENT)
            else exit_codes.FAILED
        ), out_dir / "verify.log"
    return _keep_report(result, owned, audit)


def _zipapp_files(source: str) -> tuple[dict[str, bytes], verify_zipapp.Zipapp | None]:
    """The files copied into the container before it starts: this checkout's zipapp when it runs that."""
    if source != "zipapp":
        return {}, None
    with tempfile.TemporaryDirectory(prefix="apex-verify-zipapp.") as where:
        app = verify_zipapp.build(Path(where) / verify_zipapp.NAME)
        return {ZIPAPP_PATH: input_files.read_bytes(app.path, input_files.WHEEL)}, app


def _run_with_gpu_or_static(
    go: Callable[[bool, bool, bool], container_engine.RunResult], gpu: str, engine_name: str, run: dict
) -> container_engine.RunResult:
    """Run verify with the GPUs, or --static where the engine has no GPU runtime (gpu "auto") or none is
    asked for; `run` (container-run.json) records which it was and why."""
    if gpu == "none":
        run.update(mode="static", note="--gpu none: static checks only")
        return go(True, False, False)
    try:
        result = go(False, True, gpu == "require")
        run["gpu_runtime"] = True
        return result
    except NoGpuRuntime as error:
        run["gpu_runtime"] = False
        what = "the Docker daemon has" if engine_name == "docker" else "podman has"
        fix = (
            "install the NVIDIA Container Toolkit"
            if engine_name == "docker"
            else "install the NVIDIA Container Toolkit and generate its CDI spec (nvidia-ctk cdi generate)"
        )
        message = (
            f"{what} no NVIDIA GPU runtime ({str(error).splitlines()[0][:200]}); {fix} to run the GPU checks"
        )
        if gpu == "require":
            raise EnvironmentUnavailable(message) from None
        _note(message + "; running verify --static instead")
        run.update(mode="static", note=message + "; ran verify --static instead")
        return go(True, False, False)


def _keep_report(result: container_engine.RunResult, owned: OwnedOut, audit: dict) -> tuple[int, Path]:
    """Write verify's report (and its Markdown) with the audit block; the exit code the host reports."""
    status = result.status
    report_path = owned.out_dir / "report.json"
    raw = result.files["report.json"]
    try:
        report = verify_report.read_bytes(raw, report_path)
    except input_files.InputFileError as error:
        owned.write("report.json", raw)  # kept as verify wrote it, for whoever reads it next
        _note(f"verify's report {error}")
        return exit_codes.FAILED, report_path
    # which image this report is about: only the host knows its digest; written once, with it
    owned.write("report.json", report.with_block("audit", audit).to_json())
    if "report.md" in result.files:
        markdown = _audit_markdown(audit) + result.files["report.md"].decode("utf-8", "replace")
        owned.write("report.md", markdown)
    # the tool's own codes are 0-3; anything else (a crash, OOM kill: 137) is a failure, never passed through
    return (status if status in exit_codes.MEANINGS else exit_codes.FAILED), report_path
