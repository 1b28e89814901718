"""The compilers and packages a build needs, checked up front so the user reads one clear line instead
of setup.py's traceback: torch (a CUDA build), nvcc (torch's CUDA_HOME, else one assembled from the
package index), the archs nvcc can compile, setuptools/packaging/wheel, and pip/setuptools new enough
for setup.py argv switches. Standard library only: it runs inside the build image (Python 3.10).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from toolchain.builder import apex_setup, cuda_from_pypi
from toolchain.builder.build_env import EnvStep, path_first
from toolchain.builder.build_inputs import BuildInputs
from toolchain.builder.request import BuildRequest
from toolchain.errors import EnvironmentUnavailable, UsageError
from verify.domain.arch import Arch
from verify.runtime import atomic


@dataclasses.dataclass(frozen=True)
class BuildTools:
    """What the checks found: the versions the manifest records and the index CUDA, when one was assembled."""

    versions: dict  # torch, torch_cuda, nvcc, nvcc_path, gcc, python, cxx11_abi, nvcc_source[, cuda_wheels]
    cuda_from_pypi: dict | None = None
    env: EnvStep = EnvStep("cuda from the index")  # CUDA_HOME and its bin on PATH, when one was assembled

    @property
    def nvcc_path(self) -> str:
        return self.versions["nvcc_path"]


def check(
    request: BuildRequest, inputs: BuildInputs, env: Mapping[str, str], say: Callable[[str], None]
) -> BuildTools:
    """The toolchain for this request: an index CUDA where one is needed (the tools' env step then points
    CUDA_HOME at it), torch/nvcc/archs/packages checked, argv passing and setup.py's hard-coded archs checked."""
    pypi = pypi_cuda(request.cuda_from_pypi, request.cuda_prefix, say)
    step = EnvStep.of(
        "cuda from the index",
        {"CUDA_HOME": str(pypi.home), "PATH": path_first(env, str(pypi.home / "bin"))} if pypi else None,
    )
    versions = check_build_tools(step.applied(env), inputs.archs, str(pypi.home) if pypi else None)
    versions["nvcc_source"] = "pypi" if pypi else "system"
    if pypi:
        versions["cuda_wheels"] = {w.name: w.version for w in pypi.wheels}
    if inputs.setup.style == apex_setup.ARGV:
        check_argv_passing()
    if not request.ignore_hardcoded_archs:
        apex_setup.check_archs(
            inputs.setup,
            inputs.switches,
            nvcc_archs(Path(versions["nvcc_path"])),
            versions["nvcc"].rsplit(".", 1)[0],
            inputs.src,
        )
    return BuildTools(versions=versions, cuda_from_pypi=pypi.manifest() if pypi else None, env=step)


def _run(cmd: list[str], **kwargs) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs).stdout


def find_nvcc(env: dict[str, str]) -> tuple[Path | None, str]:
    """nvcc the way torch.utils.cpp_extension finds CUDA_HOME: $CUDA_HOME/$CUDA_PATH, then nvcc on
    PATH, then /usr/local/cuda. Returns (path or None, where it looked)."""
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if home:
        return (
            Path(home) / "bin" / "nvcc" if (Path(home) / "bin" / "nvcc").exists() else None
        ), f"CUDA_HOME={home}"
    on_path = shutil.which("nvcc", path=env.get("PATH"))
    if on_path:
        return Path(on_path), "PATH"
    default = Path("/usr/local/cuda/bin/nvcc")
    return (default if default.exists() else None), "PATH and /usr/local/cuda"


def nvcc_version(nvcc: Path) -> tuple[str, str]:
    """('13.0', '13.0.88') from `nvcc --version`."""
    try:
        out = _run([str(nvcc), "--version"])
    except (subprocess.CalledProcessError, OSError) as error:
        raise EnvironmentUnavailable(
            f"{nvcc} --version failed ({error}); check the CUDA toolkit install"
        ) from None
    release = re.search(r"release (\d+\.\d+)", out)
    full = re.search(r"V(\d+\.\d+\.\d+)", out)
    if not release:
        raise EnvironmentUnavailable(f"{nvcc} --version printed no 'release X.Y'; is it a real nvcc?")
    return release.group(1), full.group(1) if full else release.group(1)


NVCC_PROBE_TIMEOUT_S = 300  # a one-line kernel compiles in 1-3 s; a loaded build host is slower


def nvcc_compiles(nvcc: Path, env: dict[str, str]) -> None:
    """nvcc turns a one-line kernel into an object file, or EnvironmentUnavailable (exit 3) before the
    build: an nvcc that answers --version but cannot compile (a stub, a broken toolkit, a host compiler it
    rejects) used to pass the checks and fail the build as exit 1."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="apex-nvcc-probe.") as work:
        source, obj = Path(work) / "probe.cu", Path(work) / "probe.o"
        atomic.write_text(source, "__global__ void apex_toolchain_probe() {}\n")
        try:
            done = subprocess.run(
                [str(nvcc), "-c", str(source), "-o", str(obj)],
                capture_output=True,
                text=True,
                errors="replace",
                env=env,
                cwd=work,
                timeout=NVCC_PROBE_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise EnvironmentUnavailable(
                f"{nvcc} cannot compile a one-line kernel ({type(error).__name__}: {error}); "
                "check the CUDA toolkit install (CUDA_HOME) and its host compiler"
            ) from None
        if done.returncode != 0 or not obj.is_file() or obj.stat().st_size == 0:
            said = " | ".join(
                line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()
            )[-400:]
            what = f"exit {done.returncode}" if done.returncode else "exit 0 but no object file"
            raise EnvironmentUnavailable(
                f"{nvcc} cannot compile a one-line kernel ({what}{': ' + said if said else ''}); "
                "check the CUDA toolkit install (CUDA_HOME) and its host compiler"
            )


def nvcc_archs(nvcc: Path) -> set[str]:
    """Compute capabilities nvcc can compile, from `nvcc --list-gpu-arch` (compute_90 -> 9.0)."""
    try:
        out = _run([str(nvcc), "--list-gpu-arch"])
    except (subprocess.CalledProcessError, OSError):
        return set()  # nvcc older than 11.0 has no --list-gpu-arch: let nvcc itself judge
    return {
        arch.number for arch in filter(None, map(Arch.from_nvcc_name, re.findall(r"compute_[0-9]+", out)))
    }


def torch_info() -> dict:
    try:
        import torch  # the build compiles against the installed torch (--no-build-isolation)
    except ImportError as error:
        raise EnvironmentUnavailable(
            f"torch is not importable by {sys.executable} ({error}); install the torch the build targets first",
        ) from None
    import torch.utils.cpp_extension  # noqa: F401  (what setup.py imports; fails loudly if torch is broken)

    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cxx11_abi": getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None),
    }


def compiler_version(env: dict[str, str]) -> str | None:
    cxx = env.get("CXX", "c++")
    try:
        return _run([cxx, "-dumpfullversion", "-dumpversion"], env=env).strip()
    except (subprocess.CalledProcessError, OSError):
        return None


def check_build_tools(
    env: dict[str, str], archs: Sequence[Arch] | None, cuda_home: str | None = None
) -> dict:
    """Everything setup.py needs, checked up front so the user reads one clear line, not setup.py's
    traceback. Returns the versions for the manifest. `cuda_home`: one assembled from the index."""
    info = torch_info()
    nvcc, looked = find_nvcc(env)
    if info["torch_cuda"] is not None:
        import torch.utils.cpp_extension as cpp_extension  # setup.py compiles with exactly this CUDA_HOME

        home = cuda_home or cpp_extension.CUDA_HOME
        nvcc = Path(home) / "bin" / "nvcc" if home and (Path(home) / "bin" / "nvcc").exists() else None
        looked = f"torch's CUDA_HOME={home}"
    if nvcc is None:
        # Apex's setup.py runs `$CUDA_HOME/bin/nvcc -V` at import time, even for a Python-only build.
        raise EnvironmentUnavailable(
            f"nvcc not found (looked at {looked}); Apex's setup.py needs the CUDA toolkit even for a Python-only "
            f"build: install the CUDA {info['torch_cuda'] or ''} toolkit (cuda-nvcc) or set CUDA_HOME to it".replace(
                "  ", " "
            ),
        )
    release, full = nvcc_version(nvcc)
    if info["torch_cuda"] is None:
        raise EnvironmentUnavailable(
            f"torch {info['torch']} is a CPU-only build (torch.version.cuda is None), so torch.utils.cpp_extension has "
            f"no CUDA_HOME and Apex's setup.py cannot run; install a CUDA {release} build of torch (its index: "
            f"`python build.py plan --cuda {release}` prints TORCH_INDEX_URL)",
        )
    torch_cuda = ".".join(info["torch_cuda"].split(".")[:2])
    if torch_cuda != release:
        raise EnvironmentUnavailable(
            f"nvcc {release} ({nvcc}) does not match torch {info['torch']}'s CUDA {torch_cuda}; Apex's setup.py requires "
            f"the same major.minor: put the CUDA {torch_cuda} toolkit first (CUDA_HOME) or install torch built for CUDA {release}",
        )
    if archs:
        nvcc_compiles(nvcc, env)
        supported = nvcc_archs(nvcc)
        bad = [str(a) for a in archs if supported and a.number not in supported]
        if bad:
            ordered = sorted(supported, key=lambda a: Arch.parse(a).capability)
            raise UsageError(
                f"--archs: nvcc {release} cannot compile for {', '.join(bad)}; it supports {', '.join(ordered)}",
            )
    # --no-build-isolation fetches nothing: setup.py's imports and a bdist_wheel command must be here
    for module, package in (("setuptools", "setuptools"), ("packaging", "packaging"), ("wheel", "wheel")):
        if module == "wheel" and importlib.util.find_spec("setuptools.command.bdist_wheel"):
            continue  # setuptools >= 70.1 carries bdist_wheel itself
        if importlib.util.find_spec(module) is None:
            raise EnvironmentUnavailable(
                f"{module} is not installed in {sys.executable}; pip install {package}",
            )
    return {
        "torch": info["torch"],
        "torch_cuda": info["torch_cuda"],
        "nvcc": full,
        "nvcc_path": str(nvcc),
        "gcc": compiler_version(env),
        "python": platform.python_version(),
        "cxx11_abi": info["cxx11_abi"],
    }


def pypi_cuda(mode: str, prefix: Path | None, say: Callable[[str], None]) -> cuda_from_pypi.PypiCuda | None:
    """A CUDA_HOME from the package index when asked (--cuda-from-pypi) or when torch is a CUDA build and
    the system nvcc is missing or another CUDA (said on stdout); `check` makes it the build's CUDA_HOME."""
    if mode == "never":
        return None
    info = torch_info()
    if info["torch_cuda"] is None:
        return None  # a CPU torch: check_build_tools says what to install
    torch_cuda = ".".join(info["torch_cuda"].split(".")[:2])
    if mode == "always":
        reason = f"--cuda-from-pypi: using CUDA {torch_cuda} from the package index"
    else:
        import torch.utils.cpp_extension as cpp_extension

        home = cpp_extension.CUDA_HOME
        nvcc = Path(home) / "bin" / "nvcc" if home and (Path(home) / "bin" / "nvcc").exists() else None
        try:
            release = nvcc_version(nvcc)[0] if nvcc else None
        except EnvironmentUnavailable:
            release = None
        needed = cuda_from_pypi.reason_needed(release, str(nvcc) if nvcc else f"CUDA_HOME={home}", torch_cuda)
        if needed is None:
            return None
        reason = needed
    say(reason)
    return cuda_from_pypi.assemble(torch_cuda, prefix or cuda_from_pypi.default_prefix(), reason, say)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def check_argv_passing() -> None:
    """The argv style needs pip >= 23.1 (repeated --config-settings keys kept as a list; older pips keep the
    last) and setuptools >= 64 (forwards --build-option settings to setup.py bdist_wheel)."""
    import importlib.metadata

    for package, minimum, why in (
        ("pip", (23, 1), "keeps only the last of repeated --config-settings keys"),
        ("setuptools", (64, 0), "does not forward --config-settings --build-option to setup.py"),
    ):
        try:
            have = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue  # check_build_tools already required setuptools; pip runs as `python -m pip`
        if _version_tuple(have) < minimum:
            raise EnvironmentUnavailable(
                f"{package} {have} in {sys.executable} {why}, so an Apex tree that reads argv switches would build "
                f"without them; {sys.executable} -m pip install '{package}>={'.'.join(map(str, minimum))}'",
            )
