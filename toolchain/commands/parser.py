"""build.py's command line: every command, its options and the function that runs it. The cell options
come from the table of cell fields (toolchain/spec/cell_fields.py); argparse's own errors become a
UsageError (one line, exit 2)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import NoReturn

from toolchain.commands import cells, ci, images, release, wheel_index
from toolchain.errors import UsageError
from toolchain.spec import cell_fields, ci_matrix
from verify.domain.paths import expanded_path_value as path_value  # the builder's check, ~ expanded
from verify.runtime.messages import bounded


class Parser(argparse.ArgumentParser):
    """argparse that raises a UsageError (one line, exit 2) instead of printing usage and exiting."""

    commands: dict[str, Parser] = {}

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {bounded(message)}; see `{self.prog} --help`")


def build_parser() -> Parser:
    parser = Parser(
        prog="build.py",
        description="Build NVIDIA Apex into training images, one per validated matrix cell, and verify them.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 ok, 1 a build or verification failed, 2 bad input (nothing built), "
        "3 environment unavailable (no Docker daemon, no GPU when required).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    shared = _SharedOptions(
        common=_common_options(),
        cell=_cell_options(),
        build=_build_options(),
        engine=_engine_option(),
        select=_select_options(),
        registry=_registry_option(),
    )
    for add_command in _COMMANDS:  # in the order `build.py --help` lists them
        add_command(sub, shared)
    parser.commands = sub.choices  # for "did you mean" on a mistyped command or option
    return parser


@dataclasses.dataclass(frozen=True)
class _SharedOptions:
    """The option groups several commands take (argparse parents)."""

    common: Parser  # --matrix, --out, --logs
    cell: Parser  # --cell and one option per cell field
    build: Parser  # what a build takes
    engine: Parser  # --engine, for verify and pull
    select: Parser  # --cell/--cuda/--torch filters
    registry: Parser  # --registry


VERIFY_MODES = ("none", "auto", "require")
PROGRESS_MODES = ("auto", "plain", "tty")  # BuildKit's --progress
CCACHE_MOUNTS = ("shared", "carried")


def _command(sub: argparse._SubParsersAction, name: str, run: object, about: str, *parents: Parser) -> Parser:
    """One command: its parser (with the shared option groups it takes) and the function that runs it."""
    p = sub.add_parser(name, parents=list(parents), help=about)
    p.set_defaults(func=run)
    return p


def _verify_mode(p: Parser, what: str) -> None:
    p.add_argument(
        "--verify",
        choices=VERIFY_MODES,
        default="auto",
        help=f"verify {what} (default auto: GPU if the daemon has one, else static); none: only the "
        "build's own gate, whose result the report still shows",
    )


def _common_options() -> Parser:
    common = Parser(add_help=False)
    common.add_argument(
        "--matrix", type=path_value, default=None, help="matrix file (default: ./matrix.toml)"
    )
    common.add_argument(
        "--out", type=path_value, default=Path("out"), help="reports directory (default: out)"
    )
    common.add_argument("--logs", type=path_value, default=Path("logs"), help="per-cell logs (default: logs)")
    return common


def _cell_options() -> Parser:
    cell = Parser(add_help=False)
    group = cell.add_argument_group("cell (layered over [defaults] and --cell)")
    group.add_argument("--cell", help="start from this [cells.NAME] of the matrix")
    for field in cell_fields.FIELDS:  # one option per matrix key (dest == key)
        group.add_argument(
            field.option, help=field.help, default=os.environ.get(field.env) if field.env else None
        )
    return cell


def _build_options() -> Parser:
    build = Parser(add_help=False)
    bgroup = build.add_argument_group("build")
    bgroup.add_argument(
        "--target",
        default="runtime",
        help="Dockerfile stage: runtime (default), runtime-devel (with nvcc), runtime-slim (no CUDA base: "
        "torch's CUDA wheels), verify-runtime",
    )
    bgroup.add_argument(
        "--apex-src", type=path_value, help="local Apex source instead of git (offline builds)"
    )
    bgroup.add_argument(
        "--wheelhouse", type=path_value, help="directory of wheels to install torch from (offline)"
    )
    bgroup.add_argument(
        "--extra-ca",
        type=path_value,
        default=_host_ca(),
        help="CA bundle for a TLS-intercepting proxy (BuildKit secret); default $APEX_EXTRA_CA, else the "
        "bundle this host's pip trusts ($PIP_CERT), so the build reaches the index the host reaches",
    )
    bgroup.add_argument(
        "--base",
        choices=("auto", "nvidia", "local"),
        default="auto",
        help="auto (default): NVIDIA's CUDA images when the engine has them or a registry serves them, "
        "else the local Debian base with CUDA from NVIDIA's wheels; nvidia or local: only that one",
    )
    bgroup.add_argument("--progress", default="auto", choices=PROGRESS_MODES, help="BuildKit progress")
    bgroup.add_argument(
        "--ccache-dir",
        type=path_value,
        help="carry the compiler cache: import DIR before the build, "
        "export it back after (for CI caches; created when missing)",
    )
    bgroup.add_argument(
        "--ccache-mount",
        choices=CCACHE_MOUNTS,
        help="the build's ccache mount: carried "
        "(default with --ccache-dir: exactly DIR's content) or shared (every build's)",
    )
    return build


def _engine_option() -> Parser:
    engine_opt = Parser(add_help=False)
    engine_opt.add_argument(
        "--engine",
        choices=("docker", "podman"),
        default=None,
        help="container engine (default: $APEX_CONTAINER_ENGINE, else docker)",
    )
    return engine_opt


def _select_options() -> Parser:
    select = Parser(add_help=False)
    sgroup = select.add_argument_group("select cells (default: all)")
    sgroup.add_argument("--cell", action="append", default=[], help="cell name or id; repeatable")
    sgroup.add_argument("--cuda", action="append", default=[], help="CUDA version; repeatable")
    sgroup.add_argument("--torch", action="append", default=[], help="torch version; repeatable")
    return select


def _registry_option() -> Parser:
    registry = Parser(add_help=False)
    registry.add_argument(
        "--registry",
        default=os.environ.get("APEX_IMAGE_REGISTRY"),
        help="image repository, e.g. ghcr.io/OWNER/apex (default: $APEX_IMAGE_REGISTRY)",
    )
    return registry


def _plan(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "resolved build args and command; nothing built"
    p = _command(sub, "plan", cells.cmd_plan, about, o.common, o.cell, o.build)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--markdown", action="store_true", help="the README's matrix table: one row per cell")


def _validate(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "check every cell against the compatibility facts"
    _command(sub, "validate", cells.cmd_validate, about, o.common, o.cell)


def _image(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    p = _command(sub, "image", cells.cmd_image, "build one image", o.common, o.cell, o.build)
    _verify_mode(p, "the built image, as matrix does")
    p.add_argument(
        "--network-check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="first probe the remote inputs the --target's stages fetch on the cell's route (Apex git host, "
        "package indexes, base images) and stop with exit 3 naming each one that does not answer (default); "
        "--no-network-check goes straight to the build",
    )
    p.add_argument(
        "--apex-index",
        metavar="URL",
        help="take the cell's verified wheel from this index (build.py index) instead of compiling Apex; "
        "the static gate still runs; exit 3 when the index has no wheel for the cell's stack and Python",
    )


def _matrix(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "build every selected cell"
    _verify_mode(
        _command(sub, "matrix", cells.cmd_matrix, about, o.common, o.select, o.build), "each built image"
    )


def _verify(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "run verify inside an image (any image)"
    p = _command(sub, "verify", images.cmd_verify, about, o.common, o.cell, o.engine)
    p.add_argument("image", nargs="?", help="image tag, id or REPO@sha256:DIGEST (default: the cell's tag)")
    p.add_argument(
        "--base",
        choices=("auto", "nvidia", "local"),
        default="auto",
        help="which route's tag a cell names, as `image --base` built it (default auto: NVIDIA's when the "
        "engine has it, else the local base's)",
    )
    p.add_argument("--gpu", choices=("auto", "require", "none"), default="auto")
    p.add_argument(
        "--verify-from",
        choices=("auto", "image", "zipapp"),
        default="auto",
        help="auto (default): the image's own verify if this toolchain built it, else the zipapp",
    )


def _inspect(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    p = _command(sub, "inspect", images.cmd_inspect, "labels and embedded reports of an image", o.common)
    p.add_argument("image", help="image tag or id")


def _report(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    _command(sub, "report", cells.cmd_report, "matrix results -> Markdown + HTML table", o.common)


def _gh_matrix(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "JSON for a GitHub Actions matrix (fromJson)"
    p = _command(sub, "gh-matrix", ci.cmd_gh_matrix, about, o.common, o.select, o.registry)
    p.add_argument("--pretty", action="store_true", help="indented JSON")
    p.add_argument(
        "--stacks",
        action="store_true",
        help="one entry per registry tag (its cells, one per platform) for the index job, not per cell",
    )
    p.add_argument(
        "--published",
        action="store_true",
        help="the publish workflow's wheel jobs: one entry per cell of matrix.toml's [published] (with the "
        "builder image pinned by digest, toolchain/data/publish.toml)",
    )


def _bake(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    p = _command(sub, "bake", ci.cmd_bake, "docker-bake.json of the matrix", o.common, o.select, o.registry)
    p.add_argument("--target", default="runtime", help="Dockerfile stage for every target")
    p.add_argument(
        "--cache",
        choices=ci_matrix.CACHE_KINDS,
        default="none",
        help="BuildKit cache per cell: gha (GitHub Actions), registry, none",
    )
    p.add_argument("--cache-ref", help="registry cache repository (default: <registry>-cache)")
    p.add_argument(
        "--push-by-digest",
        action="store_true",
        help="push each platform's image untagged (CI); build.py publish-index then tags the stack's index",
    )
    p.add_argument(
        "--output", "-o", type=path_value, help="write here instead of stdout (e.g. docker-bake.json)"
    )


def _pull(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "pull a cell's published image and verify it on this node's GPU"
    p = _command(sub, "pull", images.cmd_pull, about, o.common, o.cell, o.registry, o.engine)
    p.add_argument(
        "--gpu",
        choices=("require", "auto", "none"),
        default="require",
        help="require (default): no GPU runtime is exit 3; auto: static verify without one",
    )
    p.add_argument("--no-pull", action="store_true", help="verify the local image, do not pull")
    p.add_argument(
        "--digest", help="pull REGISTRY@DIGEST (default: the digest build.py publish recorded, if any)"
    )
    p.add_argument(
        "--by-digest", action="store_true", help="refuse to pull by tag: a digest must be recorded or given"
    )
    sig = p.add_argument_group("signature (checked before the pull; one policy is required)")
    sig.add_argument(
        "--signature-identity",
        default=os.environ.get("APEX_SIGNATURE_IDENTITY"),
        help="keyless: the signing certificate's identity, a regex (images.yml's workflow), checked by "
        "cosign (default: $APEX_SIGNATURE_IDENTITY)",
    )
    sig.add_argument(
        "--signature-issuer", default=None, help="keyless: the OIDC issuer (default: GitHub Actions')"
    )
    sig.add_argument(
        "--signature-key",
        type=path_value,
        default=os.environ.get("APEX_SIGNATURE_KEY"),
        help="a cosign public key (cosign.pub) the image was signed with (default: $APEX_SIGNATURE_KEY)",
    )
    sig.add_argument(
        "--no-signature-check",
        action="store_true",
        help="pull unsigned images (a private registry without signing); recorded as not checked",
    )


def _publish(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "push a built cell's image and record its digest (out/cells/<id>/published.json)"
    p = _command(sub, "publish", images.cmd_publish, about, o.common, o.cell, o.registry)
    p.add_argument("--image", help="local image to push (default: the cell's tag)")
    p.add_argument(
        "--bake-metadata",
        type=path_value,
        help="record what `buildx bake --push --metadata-file FILE` pushed instead of pushing here",
    )


def _publish_index(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "put each stack's platforms under its one tag: an OCI index of the published digests"
    p = _command(sub, "publish-index", images.cmd_publish_index, about, o.common, o.select, o.registry)
    p.add_argument(
        "--refs-out",
        type=path_value,
        help="write each index made as REPO@sha256:... (one a line), for signing",
    )


def _zipapp(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "write verify as a self-contained zipapp (python verify.pyz [flags])"
    _command(sub, "zipapp", images.cmd_zipapp, about).add_argument(
        "--out",
        type=path_value,
        default=Path("out") / "verify.pyz",
        help="file to write, or a directory to write verify.pyz into (default: out/verify.pyz)",
    )


def _clean(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "remove the project's images (by label), its local bases and the BuildKit cache its builds made"
    p = _command(sub, "clean", images.cmd_clean, about)
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")


def _verify_wheel(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "write verify as the pure-Python wheel apex-verify (console script apex-verify)"
    _command(sub, "verify-wheel", images.cmd_verify_wheel, about).add_argument(
        "--out",
        type=path_value,
        default=Path("dist"),
        help="folder to write apex_verify-VERSION-py3-none-any.whl into (default: dist/)",
    )


def _ccache(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "carry the Apex build's ccache between CI runs: import DIR into BuildKit, or export it"
    p = _command(sub, "ccache", images.cmd_ccache, about, o.common, o.cell)
    p.add_argument(
        "direction",
        choices=("import", "export"),
        help="import: DIR -> cache mount (before the build); export: cache mount -> DIR (after it)",
    )
    p.add_argument(
        "--dir", type=path_value, required=True, help="the directory the CI cache restores and saves"
    )
    p.add_argument(
        "--ccache-mount",
        choices=CCACHE_MOUNTS,
        default="shared",
        help="the mount bake's build compiles in: shared (default; what bake uses) or carried",
    )
    p.add_argument(
        "--extra-ca", type=path_value, help="CA bundle for a TLS-intercepting proxy (BuildKit secret)"
    )
    p.add_argument("--progress", default="auto", choices=PROGRESS_MODES, help="BuildKit progress")


def _wheel(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    sub.add_parser("wheel", help="build the Apex wheel on bare metal (see build.py wheel --help)")


def _release(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    p = sub.add_parser(
        "release",
        help="the publish workflow here: wheel, check, tag, index, a fresh venv, apex-verify install (PASS)",
        description="Build and gate the wheel with --python's torch, index it into --out, serve it on "
        "127.0.0.1, make a fresh venv with that torch and run `apex-verify install` from the served index.",
    )
    p.add_argument("--apex-src", type=path_value, help="an Apex checkout: build its wheel first")
    p.add_argument(
        "--wheels", type=path_value, help="or a folder of wheels build.py wheel built (its --out): no build"
    )
    p.add_argument("--out", type=path_value, default=Path("site"), help="the index folder (default: site)")
    p.add_argument("--python", help="the torch environment's Python (default: the one running build.py)")
    p.add_argument("--flags", help="build.py wheel's --flags (default: compat.toml's core flags)")
    p.add_argument("--archs", help="build.py wheel's --archs (needed for CUDA flags)")
    p.add_argument("--apex-commit", help="the commit of --apex-src when it has no .git (provenance)")
    p.add_argument(
        "--torch-index-url", help="where the fresh venv's pip finds torch (default: pip's settings)"
    )
    p.add_argument("--keep-work", action="store_true", help="keep the work folder (the wheel, the venv)")
    _dependency_options(p)
    p.set_defaults(func=release.cmd_release)


def _index(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    about = "checked wheels -> a PEP 503/691 index per stack (INDEX/torch2.11-cu130/simple)"
    p = _command(sub, "index", wheel_index.cmd_index, about)
    p.add_argument(
        "wheels",
        nargs="*",
        type=path_value,
        default=[],
        help="wheel files or folders holding them (build.py wheel's --out, a matrix run's out/)",
    )
    p.add_argument(
        "--image", action="append", default=[], help="also the wheel in this image's /opt/apex; repeatable"
    )
    p.add_argument(
        "--index", type=path_value, default=Path("out") / "index", help="index folder (default: out/index)"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--address", help="the URL the index is served at, for the pages' install lines")
    where.add_argument(
        "--repository",
        metavar="OWNER/REPO",
        help="the address is this GitHub repository's Pages site (toolchain/data/publish.toml)",
    )
    p.add_argument(
        "--gpu-report",
        type=path_value,
        action="append",
        default=[],
        help="verify's full report.json from a GPU, shown beside the wheel it verified; repeatable",
    )
    _dependency_options(p)


def _dependency_options(p: Parser) -> None:
    """Where `build.py index` takes what Apex requires besides torch (index and release forward them)."""
    p.add_argument(
        "--dependency-wheels",
        type=path_value,
        action="append",
        default=[],
        metavar="DIR",
        help="py3-none-any wheels of what the wheels require besides torch (packaging), served on each "
        "stack's page; what no DIR holds is fetched with pip download; repeatable",
    )
    p.add_argument(
        "--no-download",
        action="store_true",
        help="never run pip download: a requirement no --dependency-wheels DIR meets is exit 3",
    )


def _facts(sub: argparse._SubParsersAction, o: _SharedOptions) -> None:
    p = sub.add_parser("facts", help="the compatibility facts: `facts check` compares them with PyPI")
    facts_sub = p.add_subparsers(dest="facts_command", metavar="ACTION")
    check = facts_sub.add_parser(
        "check",
        help="exit 1 when PyPI (and the image registry, PyTorch's index, Apex upstream, where they "
        "answer) publish what the facts lack or contradict; 3 when PyPI cannot be read",
    )
    check.add_argument(
        "--index",
        default="https://pypi.org",
        help="PyPI, or a mirror of its JSON API and its wheels' METADATA (https://, http:// or "
        "file:// of a folder; default https://pypi.org)",
    )
    check.add_argument(
        "--facts", type=path_value, default=None, help="facts file (default: toolchain/data/compat.toml)"
    )
    # the sources beyond PyPI: each compared when it answers, else reported unreachable (not drift)
    check.add_argument(
        "--registry",
        default="https://hub.docker.com",
        help="NVIDIA's image tags: Docker Hub's API or a mirror of it (default https://hub.docker.com)",
    )
    check.add_argument(
        "--torch-index",
        default="https://download.pytorch.org",
        help="PyTorch's index, whose whl/cuXYZ/torch/ pages list each CUDA's builds "
        "(default https://download.pytorch.org)",
    )
    check.add_argument(
        "--apex-upstream",
        default="https://api.github.com",
        help="GitHub's API for Apex's HEAD, tags and setup.py (default https://api.github.com)",
    )
    check.set_defaults(func=ci.cmd_facts_check)
    p.set_defaults(func=_facts_without_action)


# one function per command, in the order `build.py --help` lists them
_COMMANDS = (
    _plan,
    _validate,
    _image,
    _matrix,
    _verify,
    _inspect,
    _report,
    _gh_matrix,
    _bake,
    _pull,
    _publish,
    _publish_index,
    _zipapp,
    _clean,
    _verify_wheel,
    _ccache,
    _wheel,
    _index,
    _release,
    _facts,
)


def _host_ca() -> Path | None:
    """--extra-ca's default: $APEX_EXTRA_CA, else $PIP_CERT when it names a file (what the host's pip trusts)."""
    for name in ("APEX_EXTRA_CA", "PIP_CERT"):
        value = os.environ.get(name)
        if value and (name == "APEX_EXTRA_CA" or Path(value).is_file()):
            return Path(value)
    return None


def _facts_without_action(args: argparse.Namespace, console: object) -> int:
    raise UsageError("facts: name an action: build.py facts check")
