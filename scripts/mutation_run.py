"""Does the suite still catch broken rules? cosmic-ray over the modules that decide (`make mutation`).

tests/mutation/modules.toml names each module and the unit tests that guard it (the smallest selection that
covers it, so a mutant costs seconds). For each module, on a copy of the tree (tracked and untracked files git
does not ignore): the tests must pass unchanged; `cosmic-ray init` lists every mutant of the module (each
operator at each place: comparison, boolean, binary and unary operators, numbers, `break`/`continue`, loops
run zero times, exceptions, decorators); the mutants written down as equivalent in modules.toml (each with
the reason it cannot change a verdict) are marked skipped; `cosmic-ray exec` (under `nice -n 19`: the CI
machine has 2 cores) runs the tests once per remaining mutant. A mutant is killed when a test fails (or the
run times out), survives when every test passes.

Why cosmic-ray 8.7 rather than mutmut 3: cosmic-ray mutates one module in place and runs any test command,
so the tests stay where they are and each module gets its own session (sqlite) and its own small test
selection; mutmut 3 copies the project into `mutants/` and wants the code under `src/`-style paths it can
import from there, which the root-level `verify/`, `toolchain/` and `scripts/` do not match. cosmic-ray's
sessions also hold a result per mutant that a filter may set (here: the equivalents, with their reason).

    python3 scripts/mutation_run.py [--only MODULE[,MODULE]] [--out reports/mutation] [--keep] [--jobs N]
`--jobs N` (make mutation MUTATION_JOBS=N) splits each module's mutants over N copies of the tree, each with
its own copy of the session, run side by side (a machine with more cores than the CI's 2); the results are
merged back into the one session, so the row is the same as a run with one job.
The result, per module (mutants, killed, equivalent, survived, each survivor's place), is merged into
reports/mutation/cosmic-ray.json and rendered as reports/mutation/README.md: a run of some modules replaces
only their rows. Exit: 0 every module at or above its kill target; 1 a module below it or a baseline
that fails; 2 bad arguments or a bad modules file.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import dataclasses
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport (the dev extra's)
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scripts.mutation_check import MARKERS, copy_tree, pytest_argv  # noqa: E402  (one copy, one pytest)
from verify.runtime import atomic, input_files  # noqa: E402  (the project's one write and read paths)
from verify.runtime.messages import printable  # noqa: E402

MODULES = REPO / "tests" / "mutation" / "modules.toml"
TARGET = 0.90  # of the mutants that are not equivalent, per module
# Left out, every module alike: a binary operator turned into a bitwise, shift, power, modulo, floor-division
# or matrix one (on the floats, strings and lists these modules compute with it raises at once, or it is the
# same as the arithmetic swaps that are run), and `|` turned into anything (with `from __future__ import
# annotations` nearly every `|` is a type annotation, never evaluated). What is left: every comparison,
# boolean, `not`, number, unary, loop, exception and decorator mutant, and + - * / swapped among themselves.
EXCLUDED_OPERATORS = (
    r"core/ReplaceBinaryOperator_\w+_(BitAnd|BitOr|BitXor|LShift|RShift|Pow|MatMult|FloorDiv|Mod)$",
    r"core/ReplaceBinaryOperator_BitOr_\w+$",
)


@dataclasses.dataclass(frozen=True)
class Equivalent:
    """A mutant that cannot change what the module decides, named by its operator and the line it mutates."""

    operator: str  # cosmic-ray's name, e.g. core/NumberReplacer
    line: str  # the source line, stripped (stable while the code around it moves)
    why: str
    nth: int | None = None  # which of the operator's mutants on that line (0-based); None: all of them


@dataclasses.dataclass(frozen=True)
class Elsewhere:
    """A function the unit tier cannot reach (it needs an engine or a GPU): its mutants are not run here and are
    counted apart, with the tier whose tests hold it."""

    function: str  # its name, or Class.method
    why: str


@dataclasses.dataclass(frozen=True)
class Target:
    path: str
    tests: tuple[str, ...]  # pytest arguments: test files, node ids, `-k EXPR`
    timeout_s: float = 60.0
    markers: str = MARKERS
    equivalents: tuple[Equivalent, ...] = ()
    elsewhere: tuple[Elsewhere, ...] = ()


@dataclasses.dataclass(frozen=True)
class Mutant:
    job_id: str
    operator: str
    line_no: int
    line: str
    nth: int  # among the operator's mutants on this line
    outcome: str  # killed | survived | equivalent | elsewhere | incompetent
    why: str = ""

    def place(self) -> str:
        return f"{self.operator} line {self.line_no} #{self.nth}: `{self.line}`"


class BadModules(ValueError):
    """modules.toml cannot be used as it is; the message names the entry and the fix."""


def load(path: Path = MODULES) -> list[Target]:
    try:
        data = tomllib.loads(input_files.read_text(path, input_files.SOURCE_FILE))
    except (input_files.InputFileError, tomllib.TOMLDecodeError) as exc:
        raise BadModules(f"{path}: {exc}") from exc
    targets = []
    for entry in data.get("module", []):
        try:
            equivalents = tuple(Equivalent(**e) for e in entry.get("equivalent", []))
            elsewhere = tuple(Elsewhere(**e) for e in entry.get("elsewhere", []))
            target = Target(
                path=entry["path"],
                tests=tuple(entry["tests"]),
                timeout_s=float(entry.get("timeout_s", 60.0)),
                markers=str(entry.get("markers", MARKERS)),
                equivalents=equivalents,
                elsewhere=elsewhere,
            )
        except (KeyError, TypeError) as exc:
            raise BadModules(f"{path}: module {entry.get('path')!r}: {exc}; see the file's header") from exc
        if not (REPO / target.path).is_file():
            raise BadModules(f"{path}: {target.path}: no such module in this checkout")
        # an equivalent whose line left the source would match nothing, silently: its mutant is run again
        lines = {
            row.strip()
            for row in input_files.read_text(REPO / target.path, input_files.SOURCE_FILE).splitlines()
        }
        for eq in equivalents:
            if eq.line not in lines:
                raise BadModules(
                    f"{path}: {target.path}: no line {printable(eq.line)!r} (module.equivalent, {eq.operator}); "
                    "write the line as it now reads, or drop the entry"
                )
        targets.append(target)
    return targets


def _config(tree: Path, target: Target) -> Path:
    command = shlex.join(pytest_argv(target.markers, target.tests))
    text = (
        "[cosmic-ray]\n"
        f'module-path = "{target.path}"\n'
        f"timeout = {target.timeout_s}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(command)}\n\n"
        '[cosmic-ray.distributor]\nname = "local"\n\n'
        "[cosmic-ray.filters.operators-filter]\n"
        f"exclude-operators = {json.dumps(list(EXCLUDED_OPERATORS))}\n"
    )
    path = tree / ".cosmic-ray" / (target.path.replace("/", "__") + ".toml")
    path.parent.mkdir(exist_ok=True)
    atomic.write_text(path, text)
    return path


def _cosmic_ray(
    tree: Path, *args: str, timeout_s: float, tool: str = "cosmic-ray"
) -> subprocess.CompletedProcess:
    tool = str(Path(sys.executable).with_name(tool))
    return subprocess.run(
        ["nice", "-n", "19", str(tool), *args],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=_env(tree),
    )


def _env(tree: Path) -> dict[str, str]:
    """The tests' environment: the tree on the path, the checkout's Apex fixtures, and one built wheel kept for
    every mutant of a module whose tests build one (tests/unit/test_rules_index.py reads APEX_TEST_WHEEL_CACHE)."""
    return {
        **os.environ,
        # the tree first; what the caller's path adds (packages installed with --target) stays behind it
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH", "")])),
        "APEX_TEST_WHEEL_CACHE": str(tree / ".cosmic-ray" / "wheel"),
        # the Apex source archives: tests/support.py looks beside the checkout, which the copy is not
        "APEX_TEST_FIXTURES": os.environ.get("APEX_TEST_FIXTURES", str(REPO.parent / "shared" / "fixtures")),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # no xdist and the like: a third of each run's start-up
    }


def _jobs(db: Path) -> list[tuple[str, str, int, int, str | None, str | None]]:
    """(job id, operator, line, occurrence, test outcome, worker outcome) per mutant, from the session."""
    with sqlite3.connect(db) as con:
        return list(
            con.execute(
                "SELECT m.job_id, m.operator_name, m.start_pos_row, m.occurrence, r.test_outcome, "
                "r.worker_outcome FROM mutation_specs m LEFT JOIN work_results r ON r.job_id = m.job_id "
                "ORDER BY m.start_pos_row, m.operator_name, m.occurrence"
            )
        )


def _spans(source: str) -> dict[str, tuple[int, int]]:
    """Function name (and Class.method) -> its first and last line."""
    spans: dict[str, tuple[int, int]] = {}
    for node in ast.parse(source).body:
        inner = node.body if isinstance(node, ast.ClassDef) else [node]
        for item in inner:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{node.name}.{item.name}" if isinstance(node, ast.ClassDef) else item.name
                spans[name] = (item.lineno, item.end_lineno or item.lineno)
    return spans


def _mark_skipped(db: Path, source: list[str], target: Target) -> dict[str, tuple[str, str]]:
    """job id -> (equivalent | elsewhere, why) for the mutants modules.toml names; recorded as skipped."""
    found: dict[str, tuple[str, str]] = {}
    seen: dict[tuple[str, int], int] = {}
    spans = _spans("\n".join(source))
    for name in (e.function for e in target.elsewhere if e.function not in spans):
        raise BadModules(f"{MODULES}: {target.path}: no function {name} (module.elsewhere)")
    for job_id, operator, row, _occ, _t, worker in _jobs(db):
        nth = seen.get((operator, row), 0)
        seen[(operator, row)] = nth + 1
        if worker == "SKIPPED":  # an excluded operator: not a mutant of this run at all
            continue
        line = source[row - 1].strip()
        for eq in target.equivalents:
            if eq.operator == operator and eq.line == line and eq.nth in (None, nth):
                found[job_id] = ("equivalent", " ".join(eq.why.split()))
        for far in target.elsewhere:
            first, last = spans[far.function]
            if first <= row <= last:
                found[job_id] = ("elsewhere", f"{far.function}: {' '.join(far.why.split())}")
    with sqlite3.connect(db) as con:
        for job_id, (kind, why) in found.items():
            con.execute(
                "INSERT OR REPLACE INTO work_results (job_id, worker_outcome, output, test_outcome, diff) "
                "VALUES (?, 'SKIPPED', ?, NULL, NULL)",
                (job_id, f"{kind}: {why}"),
            )
    return found


def _mutants(db: Path, source: list[str], skipped: dict[str, tuple[str, str]]) -> list[Mutant]:
    mutants: list[Mutant] = []
    seen: dict[tuple[str, int], int] = {}
    for job_id, operator, row, _occ, test_outcome, worker in _jobs(db):
        nth = seen.get((operator, row), 0)
        seen[(operator, row)] = nth + 1
        if job_id in skipped:
            outcome, why = skipped[job_id]
        elif worker == "ABNORMAL" or test_outcome in ("KILLED", "INCOMPETENT"):
            outcome, why = ("killed" if test_outcome != "INCOMPETENT" else "incompetent"), ""
        elif test_outcome == "SURVIVED":
            outcome, why = "survived", ""
        elif worker == "SKIPPED":
            continue  # an excluded operator (EXCLUDED_OPERATORS): not a mutant of this run
        else:
            outcome, why = "not run", str(worker or "")
        mutants.append(Mutant(job_id, operator, row, source[row - 1].strip(), nth, outcome, why))
    return mutants


def _shard_jobs(db: Path, shards: int) -> list[list[str]]:
    """The mutants the session has no result for yet, dealt round-robin into `shards` lists."""
    pending = [job_id for job_id, _op, _row, _occ, _t, worker in _jobs(db) if worker is None]
    return [pending[k::shards] for k in range(shards)]


def _exec_shard(tree: Path, target: Target, db: Path, others: list[str], budget_s: float) -> str | None:
    """cosmic-ray exec in `tree` on a copy of the session in which `others` (another shard's mutants) are set
    aside; None when it ran (or ran out of time), else the error."""
    config = _config(tree, target)
    shard_db = config.with_suffix(".shard.sqlite")
    shutil.copyfile(db, shard_db)  # a session this run made, in its own temp tree
    with sqlite3.connect(shard_db) as con:
        con.executemany(
            "INSERT OR REPLACE INTO work_results (job_id, worker_outcome, output, test_outcome, diff) "
            "VALUES (?, 'SKIPPED', 'another shard', NULL, NULL)",
            [(job_id,) for job_id in others],
        )
    original = input_files.read_text(tree / target.path, input_files.SOURCE_FILE)
    try:
        done = _cosmic_ray(tree, "exec", str(config), str(shard_db), timeout_s=budget_s)
    except subprocess.TimeoutExpired:
        atomic.write_text(tree / target.path, original)  # cosmic-ray was stopped with a mutant in place
        return None
    return None if done.returncode == 0 else f"cosmic-ray exec: {done.stderr.strip()[-300:]}"


def _merge_shard(db: Path, shard_db: Path, mine: list[str]) -> None:
    """Copy the shard's results for its own mutants into the module's session."""
    with sqlite3.connect(shard_db) as con:
        marks = ",".join("?" * len(mine))
        rows = con.execute(
            "SELECT job_id, worker_outcome, output, test_outcome, diff FROM work_results "
            f"WHERE job_id IN ({marks})",
            mine,
        ).fetchall()
    with sqlite3.connect(db) as con:
        con.executemany(
            "INSERT OR REPLACE INTO work_results (job_id, worker_outcome, output, test_outcome, diff) "
            "VALUES (?, ?, ?, ?, ?)",
            rows,
        )


def run_module(trees: list[Path], target: Target, budget_s: float = 6 * 3600) -> dict[str, Any]:
    """One module's session, its mutants run in each of `trees` side by side; past `budget_s` the mutants not
    yet run are counted as such (a partial row)."""
    started = time.monotonic()
    tree = trees[0]
    base = subprocess.run(
        pytest_argv(target.markers, target.tests),
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=_env(tree),
    )
    if base.returncode != 0:
        tail = (base.stdout.strip().splitlines() or base.stderr.strip().splitlines() or ["no output"])[-1]
        return {"module": target.path, "error": f"baseline tests fail on the unchanged tree: {tail}"}
    # a test the baseline skips guards nothing under the mutants either: said in the result
    base_skips = re.search(r"(\d+) skipped", (base.stdout.strip().splitlines() or [""])[-1])
    config = _config(tree, target)
    db = config.with_suffix(".sqlite")
    db.unlink(missing_ok=True)
    done = _cosmic_ray(tree, "init", str(config), str(db), timeout_s=300)
    if done.returncode != 0:
        return {"module": target.path, "error": f"cosmic-ray init: {done.stderr.strip()[-300:]}"}
    done = _cosmic_ray(tree, str(db), str(config), timeout_s=300, tool="cr-filter-operators")
    if done.returncode != 0:
        return {"module": target.path, "error": f"cr-filter-operators: {done.stderr.strip()[-300:]}"}
    original = input_files.read_text(tree / target.path, input_files.SOURCE_FILE)
    source = original.splitlines()
    skipped = _mark_skipped(db, source, target)
    shards = _shard_jobs(db, len(trees))
    left_s = budget_s - (time.monotonic() - started)
    with concurrent.futures.ThreadPoolExecutor(len(trees)) as pool:
        futures = [
            pool.submit(
                _exec_shard, t, target, db, [j for k, s in enumerate(shards) if k != i for j in s], left_s
            )
            for i, t in enumerate(trees)
        ]
        errors = [e for e in (f.result() for f in futures) if e]
    for t, mine in zip(trees, shards, strict=True):
        if mine:
            _merge_shard(db, _config(t, target).with_suffix(".shard.sqlite"), mine)
    if errors:
        return {"module": target.path, "error": errors[0]}
    mutants = _mutants(db, source, skipped)
    count = {
        k: sum(m.outcome == k for m in mutants) for k in ("killed", "survived", "equivalent", "elsewhere")
    }
    judged = count["killed"] + count["survived"]
    return {
        "module": target.path,
        "tests": list(target.tests),
        "mutants": len(mutants),
        **count,
        "other": len(mutants) - sum(count.values()),
        "not_run": sum(m.outcome == "not run" for m in mutants),
        "killed_share": round(count["killed"] / judged, 3) if judged else 1.0,
        "seconds": round(time.monotonic() - started),
        "jobs": len(trees),
        "baseline_skipped": int(base_skips.group(1)) if base_skips else 0,
        "survivors": [m.place() for m in mutants if m.outcome == "survived"],
        "equivalents": [f"{m.place()}: {m.why}" for m in mutants if m.outcome == "equivalent"],
        "elsewhere_why": sorted({m.why for m in mutants if m.outcome == "elsewhere"}),
    }


def markdown(results: list[dict[str, Any]]) -> str:
    intro = (
        "cosmic-ray 8.7.0 (scripts/mutation_run.py), each module with its own unit tests "
        f"(tests/mutation/modules.toml); target: at least {TARGET:.0%} of the mutants that are neither "
        "equivalent nor elsewhere killed, per module. *Equivalent*: cannot change what the module decides "
        "(each with its reason below). *Elsewhere*: in a function the unit tier cannot reach (an engine, a "
        "GPU); the tier that holds it is named below. Left out for every module: the binary-operator "
        "mutants that scripts/mutation_run.py's EXCLUDED_OPERATORS names, with why. The hand-kept mutations "
        "of the modules not listed here: [last-run.md](last-run.md)."
    )
    lines = [
        "# Mutation run: cosmic-ray over the modules that decide (`make mutation`)",
        "",
        *textwrap.wrap(intro, 110),
        "",
        "| module | mutants | killed | equivalent | elsewhere | survived | killed share | s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| `{r['module']}` | {r['error']} | | | | | | |")
            continue
        lines.append(
            f"| `{r['module']}` | {r['mutants']} | {r['killed']} | {r['equivalent']} | "
            f"{r.get('elsewhere', 0)} | {r['survived']} | {r['killed_share']:.0%} | {r['seconds']}"
            + (f" (stopped: {r['not_run']} not run)" if r.get("not_run") else "")
            + " |"
        )
    for r in results:
        if r.get("survivors") or r.get("equivalents") or r.get("elsewhere") or r.get("baseline_skipped"):
            lines += ["", f"## `{r['module']}`", ""]
            if r.get("baseline_skipped"):
                lines.append(
                    f"- the baseline skipped {r['baseline_skipped']} of the selected tests: they guard nothing here"
                )
            lines += [f"- survived: {s}" for s in r.get("survivors", [])]
            lines += [f"- equivalent: {e}" for e in r.get("equivalents", [])]
            lines += [f"- elsewhere: {e}" for e in r.get("elsewhere_why", [])]
    return "\n".join(lines) + "\n"


def _record(out: Path, results: list[dict[str, Any]]) -> None:
    """Merge this run's rows into out/cosmic-ray.json (a run of some modules replaces only their rows) and
    render out/README.md from it."""
    record = out / "cosmic-ray.json"
    try:
        before = input_files.read_json(record, input_files.MATRIX_REPORT) if record.exists() else {}
    except input_files.InputFileError:
        before = {}
    rows = {r["module"]: r for r in (before.get("modules") or []) if isinstance(r, dict)}
    rows.update({r["module"]: r for r in results})
    order = [t.path for t in load()]
    merged = sorted(rows.values(), key=lambda r: order.index(r["module"]) if r["module"] in order else 99)
    # --out is the tool's folder: a link planted there is refused, never followed (atomic's owned-tree rule)
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_json_in_tree(
        out, record.name, {"tool": "cosmic-ray 8.7.0", "target": TARGET, "modules": merged}
    )
    atomic.write_text_in_tree(out, "README.md", markdown(merged))


def _jobs_arg(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 256:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number from 1 to 256; give the cores to use"
        )
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated module paths (as modules.toml names them)")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "mutation")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy of the tree")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=6 * 3600,
        help="per module: past it, the mutants not run are counted",
    )
    parser.add_argument(
        "--jobs",
        type=_jobs_arg,
        default=1,
        help="copies of the tree that run each module's mutants side by side",
    )
    args = parser.parse_args(argv)
    try:
        targets = load()
    except BadModules as exc:
        print(printable(f"mutation_run: {exc}"), file=sys.stderr)
        return 2
    if args.only:
        wanted = {p.strip() for p in args.only.split(",") if p.strip()}
        unknown = wanted - {t.path for t in targets}
        if unknown:
            print(
                printable(f"mutation_run: --only {','.join(sorted(unknown))}: not in {MODULES}"),
                file=sys.stderr,
            )
            return 2
        targets = [t for t in targets if t.path in wanted]
    trees = [Path(tempfile.mkdtemp(prefix="apex-cosmic-ray-")) for _ in range(args.jobs)]
    results = []
    try:
        for tree in trees:
            copy_tree(tree)
        for target in targets:
            result = run_module(trees, target, args.budget_s)
            results.append(result)
            print(
                printable(
                    f"{target.path}: "
                    + (
                        result["error"]
                        if "error" in result
                        else f"{result['mutants']} mutants, {result['killed']} killed, {result['equivalent']} "
                        f"equivalent, {result['survived']} survived ({result['seconds']} s)"
                    )
                ),
                flush=True,
            )
            _record(args.out, results)  # after each module: a run stopped midway keeps what it measured
    finally:
        for tree in trees:
            if args.keep:
                print(printable(f"tree kept at {tree}"))
            else:
                shutil.rmtree(tree, ignore_errors=True)
    low = [r["module"] for r in results if "error" in r or r["killed_share"] < TARGET]
    for module in low:
        print(
            printable(f"mutation_run: {module} is below {TARGET:.0%} killed (or did not run)"),
            file=sys.stderr,
        )
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
