"""CUDA from the package index: which wheels at which versions, and the CUDA_HOME of links.

The wheel choice runs on real site-packages folders made here (dist-info METADATA and RECORD files as
pip writes them); the CUDA_HOME is linked from real folders and checked by reading through the links.
Installing the real wheels needs the index: that is the evidence build (reports/h200-2026-12-01-pypi-cuda/).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support import REPO
from toolchain.builder import cuda_from_pypi, request
from toolchain.errors import EnvironmentUnavailable, UsageError
from verify.runtime import exit_codes


def _dist(
    site: Path, name: str, version: str, files: Sequence[str] = (), requires: Sequence[str] = ()
) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    for f in files:
        (site / f).parent.mkdir(parents=True, exist_ok=True)
        (site / f).write_text(f"{name}\n")


LIBS = {
    "nvidia-cublas": "13.1.0.3",
    "nvidia-cusparse": "12.6.3.3",
    "nvidia-cusolver": "12.0.4.66",
    "nvidia-curand": "10.4.0.35",
}


def _torch_site(tmp_path: Path, *, toolkit: bool = True, runtime: bool = True, libs=LIBS) -> Path:
    site = tmp_path / "site-packages"
    site.mkdir()
    for name, version in libs.items():
        short = name.split("-")[1]
        _dist(site, name, version, [f"nvidia/cu13/include/{short}.h", f"nvidia/cu13/lib/lib{short}.so.13"])
    if runtime:
        _dist(site, "nvidia-cuda-runtime", "13.0.96", ["nvidia/cu13/include/cuda_runtime.h"])
    if toolkit:
        _dist(
            site,
            "cuda-toolkit",
            "13.0.2",
            requires=[
                "nvidia-cuda-nvcc==13.0.88.*; (sys_platform == 'linux' or sys_platform == 'win32') and extra == 'nvcc'",
                "nvidia-cuda-crt==13.0.88.*; (sys_platform == 'linux') and extra == 'crt'",
            ],
        )
    return site


def test_compiler_wheels_follow_torch_and_its_toolkit_pins(tmp_path):
    rows = {name: (what, origin) for name, what, origin in cuda_from_pypi.plan("13.0", _torch_site(tmp_path))}
    # installed next to torch: that exact version; pinned by torch's cuda-toolkit: its pin; else the pin the
    # newest cuda-toolkit 13.0.x declares (recorded from PyPI's metadata in toolkit_pins)
    assert rows["nvidia-cuda-runtime"] == ("nvidia-cuda-runtime==13.0.96", "prefix")
    assert rows["nvidia-cuda-nvcc"] == ("nvidia-cuda-nvcc==13.0.88.*", "prefix")
    assert rows["nvidia-cuda-crt"] == ("nvidia-cuda-crt==13.0.88.*", "prefix")
    assert rows["nvidia-nvvm"] == ("nvidia-nvvm==13.0.88.*", "prefix")
    assert rows["nvidia-cuda-cccl"] == ("nvidia-cuda-cccl==13.0.85.*", "prefix")
    # cuda_profiler_api.h (Apex's megatron softmax includes it) is in no wheel torch brings
    assert rows["nvidia-cuda-profiler-api"] == ("nvidia-cuda-profiler-api==13.0.85.*", "prefix")
    # libraries: used where torch has them, never a second copy
    assert {n: rows[n] for n in LIBS} == {n: (v, "torch") for n, v in LIBS.items()}


def test_without_torchs_toolkit_the_compiler_wheels_take_the_recorded_toolkit_pins(tmp_path):
    rows = dict((n, w) for n, w, _ in cuda_from_pypi.plan("13.0.2", _torch_site(tmp_path, toolkit=False)))
    assert rows["nvidia-cuda-nvcc"] == "nvidia-cuda-nvcc==13.0.88.*"
    assert rows["nvidia-cuda-cccl"] == "nvidia-cuda-cccl==13.0.85.*"


def test_from_cuda_13_3_cccl_follows_the_toolkits_pin_not_its_number(tmp_path):
    """CCCL is versioned 13.3.x from CUDA 13.3 on (cuda-toolkit 13.5.0 pins nvidia-cuda-cccl 13.3.5.0.6):
    a version made from the toolkit's number (==13.5.*) names no release."""
    site = _torch_site(tmp_path, toolkit=False)
    for cuda in ("13.3", "13.4", "13.5"):
        rows = dict((n, w) for n, w, _ in cuda_from_pypi.plan(cuda, site))
        cccl = rows["nvidia-cuda-cccl"].removeprefix("nvidia-cuda-cccl==").removesuffix(".*")
        assert cccl.startswith("13.3."), (cuda, cccl)
        nvcc = rows["nvidia-cuda-nvcc"].removeprefix("nvidia-cuda-nvcc==").removesuffix(".*")
        assert nvcc.startswith(cuda + "."), (cuda, nvcc)
        assert all(not what.endswith(f"=={cuda}.*") for name, what in rows.items() if name != "nvidia-cublas")


def test_every_cuda_with_an_nvcc_wheel_has_recorded_toolkit_pins():
    """Each [[toolkit]] nvcc whose compiler is a wheel (13.x) and each 12.x a torch row builds: a recorded
    cuda-toolkit row with a pin for every compiler wheel of its series."""
    from toolchain.spec import compat

    facts = cuda_from_pypi.facts()
    table = compat.load()
    wanted = {v for row in table.toolkits for v in row.nvcc if row.nvcc_wheel}
    wanted |= {c for row in table.torch.values() for c in row.cuda if c.startswith("12.")}
    for cuda in sorted(wanted):
        series = facts["series"][cuda.split(".")[0]]
        pins = facts["toolkit_pins"][cuda]["compiler"]
        assert set(pins) == {w + series["suffix"] for w in series["compiler"]}, cuda
        assert facts["toolkit_pins"][cuda]["toolkit"].startswith(cuda + "."), cuda


def test_a_cuda_without_recorded_pins_is_a_usage_error_naming_the_fix(tmp_path):
    with pytest.raises(UsageError, match="records no cuda-toolkit pin of nvidia-cuda-nvcc for CUDA 13.9"):
        cuda_from_pypi.plan("13.9", _torch_site(tmp_path, toolkit=False))


def test_cuda12_names_carry_the_cu12_suffix(tmp_path):
    site = tmp_path / "sp"
    site.mkdir()
    for name in LIBS:
        _dist(site, name + "-cu12", "12.4.1", [f"nvidia/{name.split('-')[1]}/include/x.h"])
    names = [n for n, _, _ in cuda_from_pypi.plan("12.4", site)]
    assert "nvidia-cuda-nvcc-cu12" in names and "nvidia-cublas-cu12" in names
    assert "nvidia-cuda-crt-cu12" not in names  # 12.x nvcc wheels carry crt and nvvm themselves


def test_a_library_missing_next_to_torch_is_exit_3(tmp_path):
    site = _torch_site(tmp_path, libs={k: v for k, v in LIBS.items() if k != "nvidia-cublas"})
    with pytest.raises(EnvironmentUnavailable, match="no nvidia-cublas wheel") as err:
        cuda_from_pypi.plan("13.0", site)
    assert err.value.exit_code == exit_codes.ENVIRONMENT


def test_an_unknown_cuda_major_is_a_usage_error():
    with pytest.raises(UsageError, match="no CUDA wheel set for CUDA 11.8"):
        cuda_from_pypi.series("11.8")


def test_the_facts_name_every_wheel_once():
    facts = json.loads(cuda_from_pypi.FACTS_PATH.read_text())
    for major, wheels in facts["series"].items():
        names = wheels["compiler"] + wheels["libraries"]
        assert len(names) == len(set(names)), major
        assert "nvidia-cuda-nvcc" in wheels["compiler"]


def test_reasons():
    assert cuda_from_pypi.reason_needed("13.0", "/usr/local/cuda/bin/nvcc", "13.0") is None
    assert "no nvcc found" in cuda_from_pypi.reason_needed(None, "CUDA_HOME=None", "13.0")
    assert "nvcc 12.4 (/usr/bin/nvcc) does not match torch's CUDA 13.0" in cuda_from_pypi.reason_needed(
        "12.4", "/usr/bin/nvcc", "13.0"
    )


def test_cuda_home_merges_components_and_links_unversioned_libraries(tmp_path):
    prefix = tmp_path / "prefix" / "site"
    for f in ("nvidia/cu13/bin/nvcc", "nvidia/cu13/include/crt/host_config.h", "nvidia/cu13/nvvm/bin/cicc"):
        (prefix / f).parent.mkdir(parents=True, exist_ok=True)
        (prefix / f).write_text("prefix\n")
    site = _torch_site(tmp_path)
    (site / "nvidia/cu13/include/crt").mkdir()
    (site / "nvidia/cu13/include/crt/torch_only.h").write_text("torch\n")
    (site / "nvidia/cu13/include/cuda_runtime.h").write_text("torch copy\n")
    (prefix / "nvidia/cu13/include/cuda_runtime.h").write_text("prefix copy\n")
    home = tmp_path / "cuda"
    cuda_from_pypi._link_home(home, [prefix], site, list(LIBS), cuda_from_pypi.installed(site))
    assert (home / "bin/nvcc").read_text() == "prefix\n"
    assert (home / "nvvm/bin/cicc").exists()
    assert (home / "include/crt/host_config.h").exists() and (home / "include/crt/torch_only.h").exists()
    assert (home / "include/cuda_runtime.h").read_text() == "prefix copy\n"  # the prefix's wins
    assert (home / "include/cublas.h").exists()
    assert (home / "lib64/libcublas.so").resolve() == (site / "nvidia/cu13/lib/libcublas.so.13").resolve()
    assert (home / "lib").resolve() == (home / "lib64").resolve()
    # the torch folder was linked, never written into
    assert not (site / "nvidia/cu13/lib/libcublas.so").exists()


def test_builder_options():
    parse = request.build_parser().parse_args
    base = ["--apex-src", "s", "--out", "o"]
    assert parse(base).cuda_from_pypi == "auto"
    assert parse(base + ["--cuda-from-pypi"]).cuda_from_pypi == "always"
    assert parse(base + ["--no-cuda-from-pypi"]).cuda_from_pypi == "never"
    with pytest.raises(SystemExit):
        parse(base + ["--cuda-from-pypi", "--no-cuda-from-pypi"])


def test_the_facts_file_ships_with_the_package():
    """The torch stage pip-installs toolchain (not editable): its data must be package data."""
    import fnmatch

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # mypy checks as Python 3.10: the dev extra's backport
        import tomli as tomllib

    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "toolchain"
    ]
    assert any(fnmatch.fnmatch("data/" + cuda_from_pypi.FACTS_PATH.name, p) for p in patterns)


def test_a_cpu_torch_never_gets_an_index_cuda(tmp_path):
    """This machine's real CPU torch: nothing is installed, whatever the mode (the CPU-torch error follows)."""
    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip("needs a CPU build of torch")
    # in a fresh interpreter, as the builder runs it: pypi_cuda imports torch.utils.cpp_extension, hence
    # setuptools, whose distutils shim fails in a test worker where another test already loaded distutils
    ask = (
        "import sys; from pathlib import Path; from toolchain.builder import build_tools; "
        "print([build_tools.pypi_cuda(m, Path(sys.argv[1]), print) for m in ('auto', 'always')])"
    )
    done = subprocess.run(
        [sys.executable, "-c", ask, str(tmp_path / "prefix")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[None, None]"
    assert not (tmp_path / "prefix").exists()


def test_one_prefix_per_venv_whatever_its_wheel_set(tmp_path):
    """The prefix path (and so every -I in the compile commands ccache hashes) names the machine and torch's
    site only; a changed wheel set is found from the record and replaced in place."""
    site_a, site_b = tmp_path / "a" / "site-packages", tmp_path / "b" / "site-packages"
    root = cuda_from_pypi.prefix_root(tmp_path / "prefix", "13.0", site_a)
    assert root == cuda_from_pypi.prefix_root(tmp_path / "prefix", "13.0", site_a)
    assert root != cuda_from_pypi.prefix_root(tmp_path / "prefix", "13.0", site_b)
    assert root.name.startswith("13.0-") and root.parent == tmp_path / "prefix"
    assert cuda_from_pypi.installed_requirements(root) is None
    root.mkdir(parents=True)
    (root / cuda_from_pypi.RECORD_NAME).write_text(
        json.dumps({"requirements": ["nvidia-cuda-nvcc==13.0.88.*"]})
    )
    assert cuda_from_pypi.installed_requirements(root) == ["nvidia-cuda-nvcc==13.0.88.*"]
    (root / cuda_from_pypi.RECORD_NAME).write_text("{half")
    assert cuda_from_pypi.installed_requirements(root) is None
