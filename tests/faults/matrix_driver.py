"""`build.py matrix` for CPU cells, in a process of its own (for Ctrl-C and two runs at once).

matrix.toml only holds CUDA cells, which cannot be built on a CPU machine; this runs the same matrix
runner (toolchain.runs.run_loop.run_matrix: per-cell logs and results, the locked, atomic matrix report,
Ctrl-C handling) and the same error reporting as build.py, over the docker tier's CPU cells.

    python tests/faults/matrix_driver.py --out OUT --logs LOGS [--wheelhouse DIR] TAG[=TORCH] ...
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from toolchain.commands.parts import preflight  # noqa: E402
from toolchain.console import Console  # noqa: E402
from toolchain.errors import ToolchainError, report  # noqa: E402
from toolchain.runs import run_loop as matrix_run  # noqa: E402
from toolchain.runs.run_request import RunRequest  # noqa: E402


def _make_cell():
    spec = importlib.util.spec_from_file_location(
        "apex_docker_tier_cells", REPO / "tests" / "docker" / "conftest.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_cell


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("--wheelhouse", type=Path)
    parser.add_argument("--verify", default="none")
    parser.add_argument("--target", default="verify-runtime")
    parser.add_argument("cells", nargs="+", help="TAG or TAG=TORCH_VERSION")
    ns = parser.parse_args()
    make_cell = _make_cell()
    cells = [
        make_cell(tag, torch) if torch else make_cell(tag)
        for tag, _, torch in (spec.partition("=") for spec in ns.cells)
    ]
    request = RunRequest(
        out=ns.out,
        logs=ns.logs,
        target=ns.target,
        wheelhouse=ns.wheelhouse,
        progress="plain",
        verify=ns.verify,
    )
    try:
        matrix_run.check_inputs(request)
        preflight(ns.verify)  # the daemon check build.py makes before the first cell
        return matrix_run.run_matrix(cells, request, Console(), matrix_path=REPO / "matrix.toml")
    except ToolchainError as err:
        return report(err)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 1


if __name__ == "__main__":  # under the rules build.py runs under: a SIGTERM arrives as Interrupted
    from verify.runtime import entry_point

    sys.exit(entry_point.run("build.py", main))
