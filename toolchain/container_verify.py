"""Run `python -m verify` inside an image through the Docker SDK, with every GPU requested.

A daemon without the NVIDIA container runtime refuses a GPU request with `could not select device
driver "" with capabilities: [[gpu]]`: then this says so and runs `verify --static` instead (or exits
3 when a GPU is required). The report is written inside the container's /tmp and copied out with
`get_archive` once it stops, so the image's non-root user needs no writable host mount.
"""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

from toolchain import engine
from toolchain.errors import EnvironmentUnavailable, UsageError
from verify import exit_codes, input_files
from verify.atomic import write_json, write_text

REPORT_DIR = "/tmp/verify-report"  # inside the container: writable by any user
NO_GPU_RUNTIME = 'could not select device driver ""'
GPU_MODES = ("auto", "require", "none")


def _note(message: str) -> None:
    print(f"[verify-image] {message}", file=sys.stderr, flush=True)


def _command(static: bool, require_gpu: bool) -> list[str]:
    command = ["python", "-m", "verify", "--json", f"{REPORT_DIR}/report.json",
               "--markdown", f"{REPORT_DIR}/report.md"]
    if static:
        command.append("--static")
    if require_gpu:
        command.append("--require-gpu")
    return command


def _copy_out(container, out_dir: Path) -> list[str]:
    """Extract the report files from the stopped container into out_dir; returns their names."""
    from docker.errors import NotFound

    try:
        stream, _ = container.get_archive(REPORT_DIR)
    except NotFound:
        return []
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
        names = []
        for member in archive.getmembers():
            if member.isfile():
                data = archive.extractfile(member).read().decode("utf-8", errors="replace")
                write_text(out_dir / Path(member.name).name, data)
                names.append(Path(member.name).name)
    return names


def _run(client, tag: str, command: list[str], gpu: bool, timeout_s: float, out_dir: Path) -> tuple[int, list[str]]:
    """Create, start, wait, copy out, remove. Raises docker.errors.APIError from create/start."""
    from docker.types import DeviceRequest

    requests = [DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpu else None
    container = client.containers.create(tag, command=command, device_requests=requests, detach=True)
    try:
        container.start()
        try:
            status = container.wait(timeout=timeout_s)["StatusCode"]
        except Exception as error:  # requests' ReadTimeout: the run hung
            container.kill()
            write_text(out_dir / "verify.log", container.logs().decode("utf-8", errors="replace"))
            raise EnvironmentUnavailable(f"verify in {tag} did not finish within {timeout_s:.0f} s ({error})") from None
        write_text(out_dir / "verify.log", container.logs().decode("utf-8", errors="replace"))
        return status, _copy_out(container, out_dir)
    finally:
        container.remove(force=True)


def verify_image(tag: str, *, out_dir: Path | str, gpu: str = "auto", timeout_s: float = 3600) -> tuple[int, Path]:
    """Verify `tag` in a container. gpu: "auto" (GPUs if the daemon has the NVIDIA runtime, else
    --static), "require" (exit 3 without it), "none" (--static). Returns (exit code, report path)."""
    if gpu not in GPU_MODES:
        raise UsageError(f"--gpu {gpu!r}: use one of {', '.join(GPU_MODES)}")
    import docker
    from docker.errors import APIError

    engine.ping()
    client = docker.from_env(timeout=60)
    engine.local_image(client, tag)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = {"image": tag, "gpu_requested": gpu != "none", "gpu_runtime": None, "mode": "full", "note": None}
    try:
        if gpu == "none":
            run.update(mode="static", note="--gpu none: static checks only")
            status, files = _run(client, tag, _command(True, False), False, timeout_s, out_dir)
        else:
            try:
                status, files = _run(client, tag, _command(False, gpu == "require"), True, timeout_s, out_dir)
                run["gpu_runtime"] = True
            except APIError as error:
                if NO_GPU_RUNTIME not in str(error):
                    raise
                run["gpu_runtime"] = False
                message = ("the Docker daemon has no NVIDIA GPU runtime (could not select device driver for "
                           "capabilities [[gpu]]); install the NVIDIA Container Toolkit to run the GPU checks")
                if gpu == "require":
                    raise EnvironmentUnavailable(message) from None
                _note(message + "; running verify --static instead")
                run.update(mode="static", note=message + "; ran verify --static instead")
                status, files = _run(client, tag, _command(True, False), False, timeout_s, out_dir)
    except APIError as error:
        raise EnvironmentUnavailable(f"the Docker daemon refused to run {tag}: {error.explanation or error}") from None
    run["exit_code"] = status
    write_json(out_dir / "container-run.json", run)
    report = out_dir / "report.json"
    if "report.json" not in files:
        _note(f"verify wrote no report (exit {status}); its output is in {out_dir / 'verify.log'}")
        return (status if status in (exit_codes.FAILED, exit_codes.USAGE, exit_codes.ENVIRONMENT)
                else exit_codes.FAILED), out_dir / "verify.log"
    try:
        input_files.read_json(report, input_files.VERIFY_REPORT)
    except input_files.InputFileError as error:
        _note(f"verify's report {error}")
        return exit_codes.FAILED, report
    # the tool's own codes are 0-3; anything else (a crash, OOM kill: 137) is a failure, never passed through
    return (status if status in exit_codes.MEANINGS else exit_codes.FAILED), report
