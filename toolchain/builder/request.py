"""The build request: what `build.py wheel` (or `python -m toolchain.builder.apex_builder`, the
Dockerfile's apex-build stage) was asked to do, parsed once from its options into one frozen record
that every step reads. Standard library only: it runs inside the build image (Python 3.10).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from verify.domain.paths import path_value

DESCRIPTION = "The one code path that turns an Apex source tree into a wheel and a build manifest."


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Where the inputs came from, recorded in the manifest as given (nothing here changes the build)."""

    cell: str | None = None  # matrix cell id
    apex_ref: str | None = None  # the ref that was asked for
    apex_source: str | None = None  # e.g. git+https://github.com/NVIDIA/apex@SHA
    apex_commit: str | None = None  # when SRC has no .git
    base_image: str | None = None
    base_image_digest: str | None = None
    wheel_hashes: tuple[str, ...] = ()  # files of `sha256sum` output, read when the manifest is written


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    """The builder's options as typed values; paths as the user wrote them (messages quote them so)."""

    apex_src: Path
    out: Path
    archs: str | None = None  # the --archs text; build_inputs falls back to $TORCH_CUDA_ARCH_LIST
    flags: str | None = None  # the --flags text (build.py wheel's default: compat.toml's core flags)
    extras: str | None = None
    jobs: int | None = None
    nvcc_threads: int | None = None
    memory_gib: float | None = None
    ccache: str = "auto"  # auto | on | off
    cuda_from_pypi: str = "auto"  # auto | always | never
    cuda_prefix: Path | None = None
    no_gate: bool = False
    ignore_hardcoded_archs: bool = False
    install: bool = False
    naive: bool = False
    keep_build_dir: bool = False
    wheel_compression: str = "deflated"  # deflated | stored (seconds faster, a few times bigger)
    provenance: Provenance = Provenance()

    @property
    def src_dir(self) -> Path:
        # absolute: these paths reach pip's and verify's command lines, where one that starts with "-" is an option
        return self.apex_src.expanduser().absolute()

    @property
    def out_dir(self) -> Path:
        return self.out.expanduser().absolute()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BuildRequest:
        given = vars(args)
        provenance = {f.name: given[f.name] for f in dataclasses.fields(Provenance)}
        provenance["wheel_hashes"] = tuple(provenance["wheel_hashes"])
        fields = {f.name: given[f.name] for f in dataclasses.fields(cls) if f.name != "provenance"}
        return cls(**fields, provenance=Provenance(**provenance))

    def to_json(self) -> dict[str, object]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "provenance"}
        data = {k: str(v) if isinstance(v, Path) else v for k, v in data.items()}
        provenance = dataclasses.asdict(self.provenance)
        return {**data, "provenance": dict(provenance, wheel_hashes=list(self.provenance.wheel_hashes))}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildRequest:
        given = dict(data)
        provenance = dict(given.pop("provenance", {}))
        provenance["wheel_hashes"] = tuple(provenance.get("wheel_hashes", ()))
        for name in ("apex_src", "out", "cuda_prefix"):
            if given.get(name) is not None:
                given[name] = Path(given[name])
        return cls(**given, provenance=Provenance(**provenance))


def parse(argv: list[str] | None = None, default_flags: str | None = None) -> BuildRequest:
    """The request from the command line (argparse's own usage errors exit 2). `default_flags`: the --flags
    text when none is given, handed in by the caller (build.py wheel: compat.toml's core flags); the
    builder holds no copy of that fact, since it cannot read compat.toml in the image (no tomllib)."""
    return BuildRequest.from_args(build_parser(default_flags).parse_args(argv))


def build_parser(default_flags: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="build.py wheel", description=DESCRIPTION)
    p.add_argument("--apex-src", required=True, type=path_value, help="root of an NVIDIA/apex checkout")
    p.add_argument(
        "--out",
        required=True,
        type=path_value,
        help="directory for the wheel, build-manifest.json and the log",
    )
    p.add_argument(
        "--archs", help="TORCH_CUDA_ARCH_LIST, e.g. 9.0 or '8.0;9.0+PTX' (required for CUDA flags)"
    )
    default = (
        f"default: {default_flags}, the core flags of toolchain/data/compat.toml"
        if default_flags
        else "required when run directly; build.py wheel fills in the core flags of toolchain/data/compat.toml"
    )
    p.add_argument(
        "--flags",
        default=default_flags,
        help=f"APEX_* flags, comma or space separated ({default}); 'none' = "
        "Python-only; passed as setup.py's argv switches (--cpp_ext ...) to Apex trees before tag 25.09",
    )
    p.add_argument("--extras", help="contrib extensions to add, e.g. xentropy,fast_layer_norm")
    p.add_argument("--jobs", type=int, help="concurrent compiles in total (default: from cores and memory)")
    p.add_argument(
        "--nvcc-threads", type=int, help="nvcc --threads per file (default: one per arch, at most 4)"
    )
    p.add_argument(
        "--memory-gib",
        type=float,
        help="size for at most this much memory (emulates a smaller host; with taskset -c 0-3 for 4 cores)",
    )
    cc = p.add_mutually_exclusive_group()
    cc.add_argument("--ccache", dest="ccache", action="store_const", const="on", help="require ccache")
    cc.add_argument("--no-ccache", dest="ccache", action="store_const", const="off", help="never use ccache")
    p.set_defaults(ccache="auto")
    pypi = p.add_mutually_exclusive_group()
    pypi.add_argument(
        "--cuda-from-pypi",
        dest="cuda_from_pypi",
        action="store_const",
        const="always",
        help="assemble CUDA_HOME from NVIDIA's wheels for torch's CUDA (default: only when nvcc is missing or "
        "not torch's CUDA)",
    )
    pypi.add_argument(
        "--no-cuda-from-pypi",
        dest="cuda_from_pypi",
        action="store_const",
        const="never",
        help="never: a missing or mismatched nvcc stops the build (exit 3)",
    )
    p.set_defaults(cuda_from_pypi="auto")
    p.add_argument(
        "--cuda-prefix",
        type=path_value,
        help="where the index CUDA goes (default: $XDG_CACHE_HOME/apex-toolchain/cuda-from-pypi)",
    )
    p.add_argument("--no-gate", action="store_true", help="report missing modules but exit 0")
    p.add_argument(
        "--ignore-hardcoded-archs",
        action="store_true",
        help="build even when setup.py hard-codes a GPU arch this nvcc dropped (to see the compiler's own error)",
    )
    p.add_argument(
        "--install", action="store_true", help="pip install the wheel and gate with verify --static"
    )
    p.add_argument(
        "--naive",
        action="store_true",
        help="the guides' recipe for comparison: MAX_JOBS=4, one extension at a time "
        "(no APEX_PARALLEL_BUILD, no nvcc --threads); --archs as given",
    )
    p.add_argument(
        "--wheel-compression",
        choices=("deflated", "stored"),
        default="deflated",
        help="stored: pack the wheel without compressing it (seconds faster, a few times bigger)",
    )
    p.add_argument(
        "--keep-build-dir", action="store_true", help="keep SRC/build (default: removed for a clean build)"
    )
    p.add_argument("--cell", help="matrix cell id, recorded in the manifest")
    p.add_argument("--apex-ref", help="the ref that was asked for (provenance)")
    p.add_argument(
        "--apex-source", help="where the source came from, e.g. git+https://github.com/NVIDIA/apex@SHA"
    )
    p.add_argument("--apex-commit", help="the commit, when SRC has no .git")
    p.add_argument("--base-image", help="base image reference (provenance)")
    p.add_argument("--base-image-digest", help="base image digest (provenance)")
    p.add_argument(
        "--wheel-hashes",
        action="append",
        default=[],
        help="`sha256sum` output of the installed wheels (provenance)",
    )
    return p
