"""The evidence scripts under reports/: each is a plain record that imports nothing from the project, or a
test here runs it on the data stored beside it and checks that it still gives what the report says, so a
change to the code it imports cannot leave it quietly broken. A script the unit tier cannot run (it needs
the H200, an Apex compile or the machine it measured) and that must import the project's code is in
EXCEPTIONS with the reason; the rule test fails on a script in neither list and on a stale entry."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.import_scan import tree_imports
from tests.support import REPO, clean_env, unpack_apex

REPORTS = REPO / "reports"
PROJECT = frozenset({"toolchain", "verify", "tests"})
_SHELL_IMPORT = re.compile(
    r"(?m)(?:^|[\s;'\"(])(?:from\s+(?:toolchain|verify)(?:\.\w+)*\s+import\b|import\s+(?:toolchain|verify)\b)"
)

# script -> the test below that runs it on its stored data
RUN_HERE = {
    "reports/h200-2026-12-01-timing/redecide.py": "test_redecide_gives_its_stored_verdicts",
    "reports/apex-tags-2026-12-01/survey.py": "test_survey_reads_two_tags_as_its_stored_table",
    "reports/h200-2026-12-01-buildspeed/unit_costs_from_logs.py": "test_unit_costs_from_logs_rebuilds_the_units",
    "reports/h200-2026-12-01-buildspeed-i16/naive_estimate.py": "test_naive_estimate_gives_its_stored_estimate",
    "reports/h200-2026-12-01-buildspeed-i16/simulate_schedule.py": "test_simulate_schedule_gives_the_reports_figures",
}
_DEVICE = "runs only on the H200 host (CUDA and an installed Apex)"
_COMPILE = "runs an Apex compile on the H200 host (nvcc, 16 cores) for minutes"
EXCEPTIONS = {
    "reports/h200-2026-12-02-idle-context/device_run.sh": "needs the H200; runs verify's own device watch (DeviceWatch, _judge_load) around a stand-in worker",
    "reports/h200-2026-12-01-timing/independent_check.py": f"{_DEVICE}; its comparison B is verify's own timer on the same callables, so it imports it",
    "reports/h200-2026-12-01-timing2/independent_check.py": f"{_DEVICE}; its comparisons B and C are verify's own timer and host conditions, so it imports them",
    "reports/h200-2026-12-01-timing2/host_drift_probe.py": f"{_DEVICE}; it measures what verify's timing_host changes, so it imports it",
    "reports/h200-2026-12-01-buildspeed/naive_bounded.py": f"{_COMPILE}; its estimate is the builder's own ninja-log reader, so it imports it",
    "reports/h200-2026-12-01-buildspeed-i16/bounded_build.py": f"{_COMPILE}; it applies and times the builder's own unit schedule, so it imports it",
    "reports/h200-2026-12-01-buildspeed-i16/run.sh": f"{_COMPILE}; it prints the builder's parallelism plan for the host it runs on",
    # the lead's evidence build runs from this folder; its script is handled with that build
}


def imports_project(path: Path) -> bool:
    """A Python script that imports toolchain/verify/tests or puts a folder on sys.path to do so; a shell
    script with inline Python (python -c, a heredoc) that imports toolchain or verify."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".sh":
        return bool(_SHELL_IMPORT.search(text))
    tree = ast.parse(text)
    if any(ref.top in PROJECT for ref in tree_imports(tree) if not ref.level):
        return True
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("insert", "append", "extend")
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "path"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "sys"
        ):
            return True
    return False


def scripts() -> list[str]:
    found = [*REPORTS.rglob("*.py"), *REPORTS.rglob("*.sh")]
    return sorted(p.relative_to(REPO).as_posix() for p in found if "__pycache__" not in p.parts)


def test_every_report_script_is_a_record_or_run_by_a_test() -> None:
    assert len(scripts()) > 20
    unlisted = [
        s for s in scripts() if imports_project(REPO / s) and s not in RUN_HERE and s not in EXCEPTIONS
    ]
    assert unlisted == [], (
        f"{unlisted} import the project's code: make each a plain record (inline what it needs, or run "
        "`python build.py ...` / `python -m verify ...` as a subprocess), or run it on its stored data in a test "
        "here (RUN_HERE)"
    )
    stale = [s for s in [*RUN_HERE, *EXCEPTIONS] if not (REPO / s).is_file() or not imports_project(REPO / s)]
    assert stale == [], f"{stale}: listed here but missing, or importing nothing from the project any more"
    assert set(RUN_HERE).isdisjoint(EXCEPTIONS)
    missing = [name for name in RUN_HERE.values() if name not in globals()]
    assert missing == []


def test_the_rule_sees_each_way_of_importing_the_project(tmp_path: Path) -> None:
    cases = {
        "a.py": ("from verify import timing_rules\n", True),
        "b.py": ("import toolchain.builder.ninja_log as n\n", True),
        "c.py": ("import sys\nsys.path.insert(0, '.')\nimport ninja_log\n", True),
        "d.py": ("import json, torch\nfrom pathlib import Path\nprint(sys.path)\n", False),
        "e.sh": ("python3 -c 'from toolchain.builder import parallelism'\n", True),
        "f.sh": ("python3 - <<'EOF'\nimport verify\nEOF\n", True),
        "g.sh": ("python3 -m verify --json x.json\npython3 build.py plan\n# the verify report\n", False),
    }
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        assert imports_project(tmp_path / name) is expected, name


def run_script(script: str, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, str(REPO / script), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=clean_env({"PYTHONPATH": str(REPO), **(env or {})}),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{script} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_redecide_gives_its_stored_verdicts() -> None:
    here = "reports/h200-2026-12-01-timing"
    reports = [f"{here}/call1/verify-{n}.json" for n in range(1, 6)]
    out = run_script(f"{here}/redecide.py", *reports)
    assert out == (REPO / here / "call1" / "redecided-with-final-bands.txt").read_text()


def _git(repo: Path, *args: str) -> None:
    env = clean_env(
        {
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_NOSYSTEM": "1",
        }
    )
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env, timeout=60)


def test_survey_reads_two_tags_as_its_stored_table(tmp_path: Path) -> None:
    """A mirror of two refs, tag 25.04 and HEAD 6424da3b, from the fixture archives: the survey's columns
    after the commit and date (flag style, parallelism, rejected archs, module map) are the stored rows."""
    if shutil.which("git") is None:
        pytest.skip("no git on this host")
    old, new = unpack_apex("25.04", tmp_path / "old"), unpack_apex("6424da3b", tmp_path / "new")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    _git(mirror, "init", "-q")
    for source, tag in ((old, "25.04"), (new, None)):
        shutil.copy(source / "setup.py", mirror / "setup.py")
        _git(mirror, "add", "setup.py")
        _git(mirror, "commit", "-q", "-m", tag or "head")
        if tag:
            _git(mirror, "tag", tag)
    out = run_script("reports/apex-tags-2026-12-01/survey.py", str(mirror))
    stored = (REPORTS / "apex-tags-2026-12-01" / "survey.txt").read_text().splitlines()

    def rows(lines: list[str]) -> dict[str, str]:  # ref -> the columns after the commit and the date
        return {
            parts[0]: parts[3]
            for line in lines
            if len(parts := line.split(None, 3)) == 4 and re.fullmatch(r"\d{4}-\d\d-\d\d", parts[2])
        }

    got = rows(out.splitlines())
    assert sorted(got) == ["25.04", "HEAD"]
    assert got == {ref: rows(stored)[ref] for ref in got}


def test_unit_costs_from_logs_rebuilds_the_units(tmp_path: Path) -> None:
    """From the stored ninja logs of both calls: the 37 units of the costs file (since refitted from the
    runner's own CPU seconds), nvcc or not as there, and the one-arch total its docstring cites."""
    src = unpack_apex("6424da3b", tmp_path / "src")
    out = run_script(
        "reports/h200-2026-12-01-buildspeed/unit_costs_from_logs.py", str(src), str(tmp_path / "c.json")
    )
    rebuilt = json.loads((tmp_path / "c.json").read_text())["units"]
    data = json.loads((REPO / "toolchain" / "data" / "apex_unit_costs.json").read_text())["units"]
    assert sorted(rebuilt) == sorted(data) and len(rebuilt) == 37
    assert {k: u["nvcc"] for k, u in rebuilt.items()} == {k: u["nvcc"] for k, u in data.items()}
    assert out.startswith("37 units; one arch 1618 CPU s"), out


def test_naive_estimate_gives_its_stored_estimate(tmp_path: Path) -> None:
    here = "reports/h200-2026-12-01-buildspeed-i16"
    src = unpack_apex("6424da3b", tmp_path / "src")
    run_script(
        f"{here}/naive_estimate.py",
        f"{here}/call2/naive.json",
        f"{here}/call1/one-cold/build-manifest.json",
        f"{here}/call2/five-cold/build-manifest.json",
        str(tmp_path / "n.json"),
        env={"APEX_SRC": str(src)},
    )
    stored = json.loads((REPO / here / "call2" / "naive-estimate.json").read_text())
    assert json.loads((tmp_path / "n.json").read_text()) == stored


def test_simulate_schedule_gives_the_reports_figures() -> None:
    """README: the model within 2.3% and 4.5% of call 1's two unit phases; the chosen rule (exponent 2,
    margin 0.5) modelled at 1.03x (one arch) and 1.05x (five archs) of work / cores."""
    here = "reports/h200-2026-12-01-buildspeed-i16"
    out = run_script(f"{here}/simulate_schedule.py", f"{here}/call1")
    phases = re.findall(r"measured unit phase ([\d.]+) s, model ([\d.]+) s", out)
    assert [round(1 - float(model) / float(measured), 3) for measured, model in phases] == [0.023, 0.045], out
    chosen = re.search(r"^\s+2\s+0\.5 \|\s+[\d.]+ s ([\d.]+) \|\s+[\d.]+ s ([\d.]+)$", out, re.M)
    assert chosen and (round(float(chosen[1]), 2), round(float(chosen[2]), 2)) == (1.03, 1.05), out
