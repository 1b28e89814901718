"""Does the suite still catch broken rules? A short, targeted mutation run (`make mutation`).

Each entry of tests/mutation/mutations.toml breaks one decision rule of verify or the builder (one exact text
replacement). The tree is copied once to a temporary folder (tracked and untracked files git does not
ignore); there each mutation is applied alone, its tests run with pytest, and the file is restored. Before
any mutation the same tests run on the unchanged copy and must pass. A mutation is `killed` when its tests
fail, `survived` when they pass; one marked `equivalent` (it cannot change a verdict, with the reason) is
expected to survive.

Beside cosmic-ray (scripts/mutation_run.py, the modules of tests/mutation/modules.toml, mutated whole): this
hand-kept list holds the decisions of the modules cosmic-ray is not run over (arch coverage, identity, the
parity cases and tolerances, the timing statistics, the builder's inputs, outputs and gate), one named rule
per entry; a module that moves to modules.toml loses its entries here.

    python3 scripts/mutation_check.py [--only ID[,ID]] [--out reports/mutation] [--keep]
Exit: 0 every mutation killed (and every equivalent one survived); 1 a mutation survived or a baseline test
failed; 2 a bad mutations file (a `find` that is not in its file exactly once) or bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport (the dev extra's)
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from verify.runtime import atomic, input_files  # noqa: E402  (the one write and read paths, from this checkout)
from verify.runtime.messages import printable  # noqa: E402

MUTATIONS = REPO / "tests" / "mutation" / "mutations.toml"
TEST_TIMEOUT_S = 900
MARKERS = "not gpu and not docker and not faults and not apex_image"  # the tiers no mutation run takes


@dataclasses.dataclass(frozen=True)
class Mutation:
    id: str
    rule: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    equivalent: str = ""


@dataclasses.dataclass(frozen=True)
class MutationOutcome:
    mutation: Mutation
    status: str  # killed | survived | error
    seconds: float
    failed_tests: tuple[str, ...]

    @property
    def as_expected(self) -> bool:
        return self.status == ("survived" if self.mutation.equivalent else "killed")


class BadMutations(ValueError):
    """The mutations file cannot be used as it is; the message names the entry and the fix."""


def load(path: Path, root: Path) -> list[Mutation]:
    try:
        data = tomllib.loads(input_files.read_shipped_text(path))
    except (input_files.InputFileError, tomllib.TOMLDecodeError) as exc:
        raise BadMutations(f"{path}: {exc}") from exc
    fields = {f.name for f in dataclasses.fields(Mutation)}
    mutations = []
    for i, entry in enumerate(data.get("mutation", [])):
        unknown = set(entry) - fields
        if unknown:
            raise BadMutations(
                f"{path}: mutation {i + 1} has unknown keys {sorted(unknown)}; known: {sorted(fields)}"
            )
        try:
            m = Mutation(**{**entry, "tests": tuple(entry.get("tests", ()))})
        except TypeError as exc:
            raise BadMutations(f"{path}: mutation {i + 1}: {exc}") from exc
        target = root / m.file
        count = input_files.read_shipped_text(target).count(m.find) if target.is_file() else -1
        if count != 1:
            where = "the file does not exist" if count < 0 else f"`find` occurs {count} times"
            raise BadMutations(f"{path}: {m.id}: {where} in {m.file}; make `find` match exactly one place")
        if not m.tests:
            raise BadMutations(f"{path}: {m.id}: no tests to run; name the test files that guard its rule")
        mutations.append(m)
    ids = [m.id for m in mutations]
    if len(set(ids)) != len(ids):
        raise BadMutations(f"{path}: duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}")
    return mutations


def copy_tree(dest: Path) -> None:
    files = (
        subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def pytest_argv(markers: str, tests: Sequence[str], *options: str) -> list[str]:
    """pytest on `tests` in the tiers `markers` selects, stopped at the first failure: what both mutation
    tools run (this one per mutation, scripts/mutation_run.py for the baseline and through cosmic-ray)."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "-m",
        markers,
        *options,
        *tests,
    ]


def run_tests(tree: Path, tests: tuple[str, ...]) -> tuple[bool, tuple[str, ...]]:
    """(passed, failed test ids) of pytest on `tests` inside `tree`."""
    done = subprocess.run(
        pytest_argv(MARKERS, tests, "-rf"),
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=TEST_TIMEOUT_S,
        check=False,
    )
    failed = tuple(line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAILED "))
    if done.returncode not in (0, 1):  # 2-5: collection error, usage, no tests: not a verdict on the mutation
        failed = failed or (f"pytest exit {done.returncode}: {done.stdout.strip().splitlines()[-1:]}",)
    return done.returncode == 0, failed


def mutate(tree: Path, m: Mutation) -> MutationOutcome:
    target = tree / m.file
    original = input_files.read_shipped_text(target)
    atomic.write_text(target, original.replace(m.find, m.replace, 1))
    started = time.monotonic()
    try:
        passed, failed = run_tests(tree, m.tests)
    finally:
        atomic.write_text(target, original)
    return MutationOutcome(
        m, "survived" if passed else "killed", round(time.monotonic() - started, 1), failed
    )


def markdown(outcomes: list[MutationOutcome], baseline_s: float, total_s: float) -> str:
    killed = sum(o.status == "killed" for o in outcomes)
    lines = [
        "# Mutation run (`make mutation`)",
        "",
        f"{len(outcomes)} targeted mutations of verify's and the builder's decision rules "
        f"(tests/mutation/mutations.toml, scripts/mutation_check.py): **{killed} killed**, "
        f"{sum(o.status == 'survived' for o in outcomes)} survived "
        f"({sum(bool(o.mutation.equivalent) for o in outcomes)} marked equivalent); "
        f"baseline {baseline_s:.0f} s, whole run {total_s:.0f} s.",
        "",
        "| mutation | rule it breaks | file | result | by | s |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        by = ", ".join(t.split("::")[-1] for t in o.failed_tests[:2]) or "-"
        result = o.status + ("" if o.as_expected else " (unexpected)")
        lines.append(
            f"| `{o.mutation.id}` | {o.mutation.rule} | `{o.mutation.file}` | {result} | {by} | {o.seconds:g} |"
        )
    equivalent = [o for o in outcomes if o.mutation.equivalent]
    if equivalent:
        lines += ["", "Equivalent (expected to survive):", ""]
        lines += [f"- `{o.mutation.id}`: {' '.join(o.mutation.equivalent.split())}" for o in equivalent]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated mutation ids")
    parser.add_argument(
        "--out", type=Path, default=REPO / "reports" / "mutation", help="where last-run.{md,json} go"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy of the tree")
    args = parser.parse_args(argv)
    try:
        mutations = load(MUTATIONS, REPO)
    except BadMutations as exc:
        print(printable(f"mutation_check: {exc}"), file=sys.stderr)
        return 2
    if args.only:
        wanted = {i.strip() for i in args.only.split(",") if i.strip()}
        unknown = wanted - {m.id for m in mutations}
        if unknown:
            print(
                printable(
                    f"mutation_check: --only {','.join(sorted(unknown))}: no such mutation id in {MUTATIONS}"
                ),
                file=sys.stderr,
            )
            return 2
        mutations = [m for m in mutations if m.id in wanted]
    started = time.monotonic()
    tree = Path(tempfile.mkdtemp(prefix="apex-mutation-"))
    try:
        copy_tree(tree)
        tests = tuple(dict.fromkeys(t for m in mutations for t in m.tests))
        passed, failed = run_tests(tree, tests)
        baseline_s = time.monotonic() - started
        if not passed:
            print(
                printable(
                    f"mutation_check: the unchanged tree fails its tests ({', '.join(failed)}): fix them first"
                ),
                file=sys.stderr,
            )
            return 1
        print(f"baseline: {len(tests)} test files pass on the unchanged tree ({baseline_s:.0f} s)")
        outcomes = []
        for m in mutations:
            outcome = mutate(tree, m)
            outcomes.append(outcome)
            mark = "ok " if outcome.as_expected else "!! "
            print(printable(f"{mark}{outcome.status:8} {m.id} ({outcome.seconds:g} s)"), flush=True)
    finally:
        if args.keep:
            print(printable(f"tree kept at {tree}"))
        else:
            shutil.rmtree(tree, ignore_errors=True)
    total_s = time.monotonic() - started
    if not args.only:  # a partial run does not replace the committed result
        # --out is the tool's folder: a link planted there is refused, never followed (atomic's owned-tree rule)
        args.out.mkdir(parents=True, exist_ok=True)
        md = markdown(outcomes, baseline_s, total_s)
        atomic.write_text_in_tree(args.out, "last-run.md", md)
        atomic.write_json_in_tree(
            args.out,
            "last-run.json",
            {
                "mutations": [
                    {
                        "id": o.mutation.id,
                        "file": o.mutation.file,
                        "rule": o.mutation.rule,
                        "status": o.status,
                        "expected": "survived" if o.mutation.equivalent else "killed",
                        "failed_tests": list(o.failed_tests),
                        "seconds": o.seconds,
                    }
                    for o in outcomes
                ],
                "baseline_s": round(baseline_s, 1),
                "total_s": round(total_s, 1),
            },
        )
    bad = [o for o in outcomes if not o.as_expected]
    print(printable(f"{len(outcomes) - len(bad)} of {len(outcomes)} as expected; {total_s:.0f} s"))
    for o in bad:
        print(
            printable(
                f"  {o.mutation.id}: {o.status} (expected {'survived' if o.mutation.equivalent else 'killed'}): "
                f"{o.mutation.rule}"
            ),
            file=sys.stderr,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
