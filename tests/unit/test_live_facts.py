"""The one test of the live facts (toolchain/data/compat.toml): they load and validate, every row names its
source and evidence, and the repository's matrix.toml resolves against them. Every rule test reads the
frozen copy instead (tests/support.py: frozen_facts), so updating the facts changes only what this checks."""

from __future__ import annotations

from tests.support import REPO
from toolchain.spec import apex_refs, compat
from toolchain.spec.matrix import load_matrix
from toolchain.spec.toml_loader import load_toml


def test_the_live_facts_load_validate_and_carry_the_matrix() -> None:
    facts = compat.load()  # schema-checked (verify.runtime.input_files.FACTS): a bad edit is exit 2 here
    assert facts.source == compat.DATA
    raw = load_toml(compat.DATA)
    rows = [(f"torch {k}", v) for k, v in raw["torch"].items()] + [
        (f"cuda {k}", v) for k, v in raw["cuda"].items()
    ]
    rows += [(f"nvcc {r['nvcc']}", r) for r in raw["toolkit"]] + [
        (f"os {k}", v) for k, v in raw["os"].items()
    ]
    for where, row in rows:
        assert isinstance(row.get("source"), str) and len(row["source"]) > 10, f"{where}: no source"
        assert all(isinstance(text, str) and text for text in row.get("leads", [])), where
    for release in facts.torch.values():
        assert release.version in release.patches, release.minor
        assert release.pypi_cuda is None or release.pypi_cuda in release.cuda, release.minor
        assert set(release.aarch64_cuda) <= set(release.cuda), release.minor
        for cuda in release.cuda:
            assert facts.toolkit(cuda) is not None, (
                f"torch {release.minor}: CUDA {cuda} has no [[toolkit]] row"
            )
    assert facts.default_platform == "linux/amd64" and "linux/arm64" in facts.platforms
    # the Apex ref table: each row's evidence is in the repository, each failure names its cause and fix
    builds = apex_refs.rows(facts)
    assert {row.status for row in builds} == {"compiles", "fails"}
    for row in builds:
        assert row.refs and row.evidence
        cited = row.evidence.split(" ", 1)[0].rstrip(":;")
        if cited.startswith("reports/"):
            assert (REPO / cited).is_dir(), f"evidence {cited} is not in the repository"
        if row.status == "fails":
            assert row.error and row.cause and row.fix_ref
    # the matrix the repository ships resolves against them (what `build.py validate` checks in CI)
    cells = load_matrix(REPO / "matrix.toml", facts=facts).cells
    assert cells and len({c.id for c in cells}) == len(cells)
