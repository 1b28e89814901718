"""Small real wheels for the index tests: an Apex-shaped tree (the package folders verify's identity check
reads, one CPU C extension `apex_C`, Apex's `packaging` requirement) built by the project's own builder
(`apex_builder.build_and_gate`: pip wheel, wheel identity, manifest, install, `verify --static` gate) in a
venv that sees this machine's torch, so nothing is installed into the test's own Python. Not Apex: it
shows the delivery path (identity, index, install), which needs no CUDA kernel."""

from __future__ import annotations

import contextlib
import hashlib
import html.parser
import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

from tests.support import REPO, run_build

SETUP = """
import os, sys
from setuptools import setup, Extension

ENV_TO_FLAG = {
    "APEX_CPP_EXT": "--cpp_ext",
}

def has_flag(flag, env_var):
    return flag in sys.argv or os.environ.get(env_var, "0") == "1"

ext = []
if has_flag("--cpp_ext", "APEX_CPP_EXT"):
    ext.append(Extension("apex_C", ["csrc/apex_c.c"], libraries=%r))
setup(name="apex", version="0.1", packages=["apex", "apex.optimizers", "apex.normalization"], ext_modules=ext,
      install_requires=["packaging>20.6"])
"""
MODULE = """#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "apex_C", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_apex_C(void) { return PyModule_Create(&m); }
"""
# a module whose import fails: the gate's verify --static FAILs extensions.apex_C
BROKEN_MODULE = """#include <Python.h>
PyMODINIT_FUNC PyInit_apex_C(void) { PyErr_SetString(PyExc_ImportError, "broken on purpose"); return NULL; }
"""
# a module that links zlib: a library neither glibc, the GCC runtime nor torch's wheels provide
ZLIB_MODULE = """#include <Python.h>
#include <zlib.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "apex_C", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_apex_C(void) { (void)zlibVersion(); return PyModule_Create(&m); }
"""
COMMIT = "6424da3b4faa6c8f062da4a48c424fff3f02d42d"

BUILD = """
import datetime as dt, json, os, sys
from pathlib import Path
from toolchain.builder import apex_builder, build_tools, request as build_request
from toolchain.builder.build_inputs import BuildInputs
src, out, versions = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
request = build_request.parse(["--apex-src", str(src), "--out", str(out), "--no-ccache", "--memory-gib", "2",
                               "--install", "--apex-commit", sys.argv[4]])
env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
started = dt.datetime.fromisoformat(sys.argv[5])
raise SystemExit(apex_builder.build_and_gate(request, BuildInputs.of(src, {"APEX_CPP_EXT": "1"}),
                                             build_tools.BuildTools(versions), env, started))
"""


def isolated_pip_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """No pip or uv configuration of this machine (its find-links, extra indexes): only what a test names."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(
        {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "UV_NO_CONFIG": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            **(extra or {}),
        }
    )
    return env


def uv_binary() -> str:
    """uv's own executable from the dev extra's `uv` package (not a PATH shim: the apex-image tier mounts it
    into a container)."""
    from uv import find_uv_bin

    return find_uv_bin()


def torch_venv(path: Path, hide: tuple[str, ...] = ()) -> Path:
    """A venv that sees the running Python's own site folders (torch, pip, setuptools, packaging), through a
    .pth, not --system-site-packages: the suite runs in a venv of its own, and --system-site-packages would
    show the base interpreter's folders instead (whatever was installed there by hand, or nothing: a fresh
    machine's ensurepip setuptools without bdist_wheel and no torch). `hide`: distributions it must not see
    (packaging: a user's venv that has torch and nothing Apex requires); each site folder is then seen through
    a folder of links to all its entries but theirs. Returns its python."""
    venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True).create(path)
    python = path / "bin" / "python"
    ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = Path(
        subprocess.run([str(python), "-c", ask], capture_output=True, text=True, check=True).stdout.strip()
    )
    seen = [_without(Path(d), hide, path / f"suite-site-{n}") for n, d in enumerate(suite_site_dirs())]
    (purelib / "suite-site.pth").write_text("".join(f"{p}\n" for p in seen))
    return python


def _without(site: Path, hide: tuple[str, ...], where: Path) -> Path:
    """`site` itself, or, when `hide` names distributions, a folder of links to every entry of it but theirs."""
    if not hide:
        return site
    import importlib.metadata

    hidden = set()
    for name in hide:
        files = importlib.metadata.distribution(name).files or []
        hidden |= {f.parts[0] for f in files if not str(f).startswith("..")}
    where.mkdir()
    for entry in site.iterdir():
        if entry.name not in hidden:
            (where / entry.name).symlink_to(entry)
    return where


def repacked_wheel(dist: str, out: Path, tag: str = "py3-none-any") -> Path:
    """The suite's own installed `dist` as a wheel again (its files, METADATA and a fresh RECORD), tagged `tag`:
    a real wheel of what Apex requires besides torch, for `build.py index --dependency-wheels`, with no
    network."""
    import base64
    import importlib.metadata
    import zipfile

    found = importlib.metadata.distribution(dist)
    name, version = found.metadata["Name"].replace("-", "_"), found.version
    info = f"{name}-{version}.dist-info"
    members: dict[str, bytes] = {}
    for file in found.files or []:
        top = file.parts[0]
        own = top.endswith(".dist-info")
        if "__pycache__" in file.parts or (
            own and file.name in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
        ):
            continue
        data = Path(str(found.locate_file(file))).read_bytes()
        members[str(file).replace(top, info, 1) if own else str(file)] = data
    members[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()
    )
    rows = [
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
        for n, d in members.items()
    ]
    members[f"{info}/RECORD"] = ("\n".join([*rows, f"{info}/RECORD,,"]) + "\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return wheel


def dependency_folder(work: Path) -> Path:
    """work/dependency-wheels/, holding packaging's wheel (Apex's one requirement besides torch)."""
    folder = work / "dependency-wheels"
    if not list(folder.glob("packaging-*.whl")):
        repacked_wheel("packaging", folder)
    return folder


def dependency_options(work: Path) -> list[str]:
    """`build.py index` options that serve packaging from a folder under `work` (dependency_folder), never
    from the network: --dependency-wheels DIR --no-download."""
    return ["--dependency-wheels", str(dependency_folder(work)), "--no-download"]


def run_index(*args: str | Path, work: Path) -> subprocess.CompletedProcess:
    """`build.py index ARGS` with packaging served from a folder under `work` (dependency_options)."""
    return run_build("index", *map(str, args), *dependency_options(work))


def suite_site_dirs() -> list[str]:
    """The site folders of the Python running the suite (its venv's, or the interpreter's own when none)."""
    import site

    dirs = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


def apex_shaped_tree(root: Path, module: str = MODULE, libraries: tuple[str, ...] = ()) -> Path:
    for package in ("apex", "apex/optimizers", "apex/normalization"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "csrc").mkdir()
    (root / "csrc" / "apex_c.c").write_text(module)
    (root / "setup.py").write_text(SETUP % (list(libraries),))
    return root


def build_stamped(
    work: Path,
    python: Path,
    started: str = "2026-12-01T20:00:00+00:00",
    module: str = MODULE,
    libraries: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    """The builder's whole path on the Apex-shaped tree, run by `python` (a torch venv) into work/out."""
    import torch

    src = apex_shaped_tree(work / "src", module, libraries)
    given = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": ".".join(map(str, sys.version_info[:3])),
        "cxx11_abi": True,
        "nvcc_path": "nvcc",
    }
    env = isolated_pip_env({"PYTHONPATH": str(REPO)})
    return subprocess.run(
        [
            str(python),
            "-c",
            BUILD,
            str(src),
            str(work / "out"),
            __import__("json").dumps(given),
            COMMIT,
            started,
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


class Served:
    """`python -m toolchain.index.serve INDEX --port 0` (or `command INDEX`) on 127.0.0.1; `url` ends in /."""

    def __init__(self, index: Path, *command: str) -> None:
        self.proc = subprocess.Popen(
            [*command, str(index)]
            if command
            else [sys.executable, "-m", "toolchain.index.serve", str(index), "--port", "0"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout
        line = self.proc.stdout.readline()
        self.url = line.rsplit(" ", 1)[-1].strip()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def the_wheel(out: Path) -> Path:
    """The one wheel a build left in its out/ folder."""
    (wheel,) = out.glob("*.whl")
    return wheel


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_tool(*argv: str | Path, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """pip, uv or a venv's Python with `env`: output captured as text, bounded at five minutes."""
    return subprocess.run(
        [str(word) for word in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def pip_install_apex(python: Path, url: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`python -m pip install apex --index-url URL`, as a user of the index types it."""
    return run_tool(python, "-m", "pip", "install", "apex", "--index-url", url, env=env)


def uv_pip_install(
    python: str | Path, url: str, env: dict[str, str], *options: str
) -> subprocess.CompletedProcess:
    """`uv pip install --python PYTHON [options] apex --index-url URL`."""
    return run_tool(
        uv_binary(), "pip", "install", "--python", python, *options, "apex", "--index-url", url, env=env
    )


@contextlib.contextmanager
def served_index(source: Path, index: Path) -> Iterator[Served]:
    """`build.py index SOURCE --index INDEX` (packaging from a folder beside INDEX), then INDEX served on
    127.0.0.1 for as long as the block runs."""
    done = run_index(source, "--index", index, work=index.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    server = Served(index)
    try:
        yield server
    finally:
        server.close()


class PageAnchors(html.parser.HTMLParser):
    """Every <a> of an index page: its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.anchors.append(dict(attrs))


def anchors(page: str) -> list[dict[str, str | None]]:
    """The attributes of every link of an index page, in order."""
    parser = PageAnchors()
    parser.feed(page)
    return parser.anchors
