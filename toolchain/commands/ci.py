"""The commands CI runs over the matrix and the facts: gh-matrix (a GitHub Actions matrix), bake (a
docker-bake.json), facts check (the compatibility facts against what PyPI publishes)."""

from __future__ import annotations

import argparse
import sys

from toolchain.commands.cells import default_matrix_path, selected
from toolchain.commands.parts import check_registry
from toolchain.console import Console
from toolchain.errors import UsageError
from toolchain.spec import ci_matrix, publishing
from toolchain.spec.cell import Cell
from toolchain.spec.matrix import load_matrix
from verify.runtime import atomic, exit_codes
from verify.runtime.messages import printable


def cmd_gh_matrix(args: argparse.Namespace, console: Console) -> int:
    check_registry(args)
    cells = selected(args)
    matrix: object
    if args.published:
        matrix = published_matrix(args, cells)
    elif args.stacks:
        matrix = ci_matrix.gh_stacks(cells)
    else:
        matrix = ci_matrix.gh_matrix(cells, args.registry)
    print(atomic.json_dumps(matrix, indent=2 if args.pretty else None))
    return exit_codes.OK


def published_matrix(args: argparse.Namespace, cells: list[Cell]) -> publishing.PublishedMatrix:
    """The [published] cells among those selected (--cell/--cuda/--torch narrow them further)."""
    if args.stacks:
        raise UsageError("gh-matrix: --published and --stacks are two matrices; pass one of them")
    names = load_matrix(args.matrix or default_matrix_path()).published
    if not names:
        raise UsageError(
            "gh-matrix --published: matrix.toml has no [published] cells; add [published] with "
            'cells = ["cu130", ...]'
        )
    return publishing.gh_published([c for c in cells if c.name in names], publishing.load())


def cmd_bake(args: argparse.Namespace, console: Console) -> int:
    check_registry(args)
    if args.push_by_digest and not args.registry:
        raise UsageError("--push-by-digest needs --registry (the repository the digests are pushed to)")
    if args.cache == "registry" and not (args.cache_ref or args.registry):
        raise UsageError("--cache registry needs --registry or --cache-ref (where the cache images go)")
    definition = ci_matrix.bake(
        selected(args),
        registry=args.registry,
        target=args.target,
        cache=args.cache,
        cache_ref=args.cache_ref,
        push_by_digest=args.push_by_digest,
    )
    if args.output:
        atomic.write_text(args.output, atomic.json_dumps(definition, indent=2) + "\n")
        console.line(printable(f"{len(definition['target'])} targets -> {args.output}"))
    else:
        sys.stdout.write(atomic.json_dumps(definition, indent=2) + "\n")  # JSON escapes control characters
    return exit_codes.OK


def cmd_facts_check(args: argparse.Namespace, console: Console) -> int:
    from toolchain.spec import facts_check, upstream_facts

    path, facts, index, others = _facts_inputs(args)  # exit 2 before anything is read
    console.line(printable(f"facts check: {path} against {index}"))
    fetcher = facts_check.urllib_fetcher()
    result = facts_check.run(facts, fetcher, index)
    sources = upstream_facts.check_all(
        facts, fetcher, others["--registry"], others["--torch-index"], others["--apex-upstream"]
    )
    findings = [*result.findings, *(f for source in sources for f in source.findings)]
    for finding in findings:
        console.status(
            "DRIFT", "fail", f"{finding.kind}: {finding.subject}: {finding.problem}; {finding.fix}"
        )
        if console.github:
            console.error(f"{finding.subject}: {finding.problem}; {finding.fix}", title="facts drift")
    if result.not_visible:
        console.status(
            "INFO",
            "info",
            f"the index serves no METADATA (neither PEP 658 .metadata nor range reads) "
            f"for torch {', '.join(result.not_visible)}: their CUDA not compared",
        )
    for source in sources:
        if source.unreachable:
            text = f"{source.name} ({source.url}): unreachable, not compared: {source.unreachable}"
            console.status("UNREACH", "warn", text)
        else:
            console.status("SEEN", "info", f"{source.name} ({source.url}): compared {source.compared}")
    for lead in facts.leads:
        console.status("LEAD", "warn", f"{lead.where}: {lead.text} (unconfirmed: not used as a fact)")
    compared = [*result.checked, *(s.compared for s in sources if not s.unreachable)]
    return _facts_verdict(console, findings, compared, [s.name for s in sources if s.unreachable], path)


def _facts_inputs(args: argparse.Namespace):  # noqa: ANN202 (path, Compat, index, {option: base})
    from toolchain.spec import compat, facts_check, upstream_facts

    path = args.facts or compat.DATA
    if not path.exists() and not path.is_symlink():
        raise UsageError(
            f"--facts {path}: no such file; pass a compat.toml (default toolchain/data/compat.toml)"
        )
    index = facts_check.index_base(args.index)
    others = {
        option: facts_check.index_base(value, option, f"pass the https:// URL of {what} (default {default})")
        for option, value, what, default in (
            ("--registry", args.registry, "Docker Hub's API or a mirror", upstream_facts.DEFAULT_REGISTRY),
            ("--torch-index", args.torch_index, "PyTorch's index", upstream_facts.DEFAULT_TORCH_INDEX),
            ("--apex-upstream", args.apex_upstream, "GitHub's API", upstream_facts.DEFAULT_APEX_UPSTREAM),
        )
    }
    try:
        facts = compat.load(path)  # the bounded reader, then compat_shape: every bad field at once, exit 2
    except UsageError as err:
        raise UsageError(f"--facts {err}") from None
    return path, facts, index, others


def _facts_verdict(
    console: Console, findings: list, compared: list[str], unreachable: list[str], path
) -> int:  # noqa: ANN001
    """The closing line: drift (exit 1), or no drift in what answered; "current" only when every source
    answered."""
    not_read = f"unreachable, not compared: {', '.join(unreachable)}" if unreachable else ""
    if findings:
        counts = ", ".join(
            f"{sum(f.kind == k for f in findings)} {k}"
            for k in ("missing", "wrong", "behind")
            if any(f.kind == k for f in findings)
        )
        console.line(
            printable(
                f"facts check: {len(findings)} problems ({counts}) - update {path} and the rows named"
                + (f"; {not_read}" if not_read else "")
                + " - exit 1"
            )
        )
        return exit_codes.FAILED
    if not_read:
        console.line(
            printable(f"facts check: no drift in what answered ({'; '.join(compared)}); {not_read} - exit 0")
        )
        return exit_codes.OK
    console.line(printable(f"facts check: current ({'; '.join(compared)}) - exit 0"))
    return exit_codes.OK
