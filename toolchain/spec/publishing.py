"""What publishing the wheel index needs beyond the cells: the address users are given (`<INDEX>`) and the
old-glibc image every published wheel is built in, read from toolchain/data/publish.toml; and the GitHub
Actions matrix of matrix.toml's [published] cells (`build.py gh-matrix --published`), one entry per wheel
the publish workflow builds there."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TypedDict

from toolchain.errors import UsageError
from toolchain.spec.cell import Cell
from toolchain.spec.toml_loader import load_toml
from verify.domain import stack_name
from verify.runtime import input_files

DATA = Path(__file__).resolve().parent.parent / "data" / "publish.toml"
# GITHUB_REPOSITORY: OWNER/REPO (GitHub's own characters for both)
_REPOSITORY = re.compile(r"^(?P<owner>[A-Za-z0-9][A-Za-z0-9-]{0,38})/(?P<repo>[A-Za-z0-9._-]{1,100})$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclasses.dataclass(frozen=True)
class Builder:
    """The image the published wheels are built in (PyTorch's manylinux_2_28 CUDA builder)."""

    image: str  # pytorch/manylinux2_28-builder:cuda13.0
    digest: str  # sha256:...
    glibc: str  # 2.28: the oldest glibc its wheels need
    platform: str

    @property
    def pinned(self) -> str:
        """REPO:TAG@sha256:...: the digest decides which image; the tag only tells a reader which it is."""
        return f"{self.image}@{self.digest}"

    def python(self, version: str) -> str:
        """The builder's CPython of `version` (3.12 -> /opt/python/cp312-cp312/bin/python)."""
        tag = "cp" + version.replace(".", "")
        return f"/opt/python/{tag}-{tag}/bin/python"


@dataclasses.dataclass(frozen=True)
class PublishFacts:
    address_pattern: str  # https://{owner}.github.io/{repo}/
    builder: Builder

    def address(self, repository: str) -> str:
        """<INDEX> for the GitHub repository OWNER/REPO: its Pages address (a repository named
        OWNER.github.io is served at the host's root)."""
        found = _REPOSITORY.match(repository)
        if not found:
            raise UsageError(
                f"--repository {repository!r}: not OWNER/REPO; pass GitHub's name of the repository, as "
                "$GITHUB_REPOSITORY holds it (e.g. acme/apex-toolchain)"
            )
        owner, repo = found["owner"].lower(), found["repo"]
        if repo.lower() == f"{owner}.github.io":
            return f"https://{owner}.github.io/"
        return self.address_pattern.format(owner=owner, repo=repo)


def load(path: Path = DATA) -> PublishFacts:
    raw = load_toml(path, input_files.FACTS)
    try:
        site, builder = raw["site"], raw["builder"]
        facts = PublishFacts(
            address_pattern=str(site["address"]),
            builder=Builder(
                image=str(builder["image"]),
                digest=str(builder["digest"]),
                glibc=str(builder["glibc"]),
                platform=str(builder["platform"]),
            ),
        )
    except (KeyError, TypeError) as exc:
        raise UsageError(
            f"{path}: missing {exc}; it needs [site] address and [builder] image, digest, glibc, platform"
        ) from None
    if not _DIGEST.match(facts.builder.digest):
        raise UsageError(
            f"{path}: [builder] digest {facts.builder.digest!r} is not sha256:<64 hex>; pin the image by digest"
        )
    if "{owner}" not in facts.address_pattern or "{repo}" not in facts.address_pattern:
        raise UsageError(f"{path}: [site] address must hold {{owner}} and {{repo}}")
    return facts


class PublishedEntry(TypedDict):
    cell: str
    stack: str  # torch2.15-cu132: the index folder the wheel lands in
    torch: str  # the exact torch the wheel is built against
    torch_index_url: str
    python: str
    builder_python: str
    archs: str
    apex_repo: str
    apex_ref: str
    flags: str
    extras: str
    builder: str  # REPO@sha256:...
    artifact: str  # the wheel job's upload name


class PublishedMatrix(TypedDict):
    include: list[PublishedEntry]


def gh_published(cells: list[Cell], facts: PublishFacts) -> PublishedMatrix:
    """`strategy.matrix` for the publish workflow's wheel job: one entry per published cell."""
    refused = [c.name for c in cells if c.platform != facts.builder.platform]
    if refused:
        raise UsageError(
            f"[published] {', '.join(refused)}: not {facts.builder.platform}, the builder image's platform; "
            "take the cell out of [published] in matrix.toml"
        )
    return {
        "include": [
            {
                "cell": cell.name,
                "stack": stack_name.stack_name(cell.torch, cell.cuda),
                "torch": cell.torch,
                "torch_index_url": cell.torch_index_url,
                "python": cell.python,
                "builder_python": facts.builder.python(cell.python),
                "archs": cell.arch_list,
                "apex_repo": cell.apex_repo,
                "apex_ref": cell.apex_ref,
                "flags": ",".join(sorted(cell.apex_flags)),
                "extras": ",".join(cell.extras),
                "builder": facts.builder.pinned,
                "artifact": f"wheel-{cell.name}",
            }
            for cell in cells
        ]
    }
