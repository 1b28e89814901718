"""The labels an image built here carries: their names, their values, and which target carries which.

build.py applies them (`--label` on the build command, `labels` in each bake target), not the Dockerfile:
a LABEL belongs to its stage and the shipped targets stand on different bases (devel, CUDA runtime, plain
OS), so the Dockerfile would need one block per target. Here each is written once, rendered from the same
build args the build gets; `build.py inspect` and `build.py verify` read the names from this module.
"""

from __future__ import annotations

from verify.layers.manifest import DEFAULT_PATH as MANIFEST_PATH

NAMESPACE = "io.apex-toolchain."
OCI = "org.opencontainers.image."
CELL = NAMESPACE + "cell"  # every image built here: it ships verify in its venv

# Inputs only the labels read: the engine computes them on each build, and no Dockerfile ARG declares them
# (BASE_DEVEL_DIGEST, the other provenance arg, is also the builder's, so it stays a build arg).
LABEL_ONLY_ARGS = frozenset(
    {"BUILD_DATE", "SOURCE_REVISION", "BASE_RUNTIME_DIGEST", "IMAGE_SOURCE", "BASE_ROUTE"}
)

_APEX_DESCRIPTION = "NVIDIA Apex {APEX_REF} built for torch {TORCH_VERSION}, CUDA {CUDA_VERSION}, archs {TORCH_CUDA_ARCH_LIST}"


# target -> (title suffix, description, base image arg, base digest arg or None, carries the Apex labels)
# runtime-slim's base is a plain OS image named by tag (BASE_SLIM_IMAGE), whose digest build.py does not look up
_TARGETS: dict[str, tuple[str, str, str, str | None, bool]] = {
    "runtime": ("", _APEX_DESCRIPTION, "BASE_RUNTIME_IMAGE", "BASE_RUNTIME_DIGEST", True),
    "runtime-devel": (" (devel)", _APEX_DESCRIPTION + "; with nvcc", "BASE_DEVEL_IMAGE", "BASE_DEVEL_DIGEST", True),
    "runtime-slim": (" (slim)", _APEX_DESCRIPTION + "; CUDA libraries from torch's wheels", "BASE_SLIM_IMAGE",
                     None, True),
    "verify-runtime": (" (verify only, no Apex)", "torch {TORCH_VERSION} and the verify tool, without Apex",
                       "BASE_RUNTIME_IMAGE", "BASE_RUNTIME_DIGEST", False),
}  # fmt: skip


class _Args(dict):
    """A build arg the command leaves out reads as the Dockerfile's empty default would."""

    def __missing__(self, key: str) -> str:
        return ""


def for_image(target: str, build_args: dict[str, str]) -> dict[str, str]:
    """Every label of `target`, rendered from the build's args (the cell's, plus the provenance args);
    {} for a target that ships nothing (torch, devel, apex-src, apex-build)."""
    if target not in _TARGETS:
        return {}
    title, description, base, digest, apex = _TARGETS[target]
    args = _Args(build_args)
    found = {
        OCI + "title": f"apex-toolchain {args['CELL_ID']}{title}",
        OCI + "description": description.format_map(args),
        OCI + "version": args["CELL_ID"],
        OCI + "created": args["BUILD_DATE"],
        OCI + "revision": args["SOURCE_REVISION"],
        OCI + "source": args["IMAGE_SOURCE"],
        OCI + "base.name": args[base],
        **({OCI + "base.digest": args[digest]} if digest else {}),
        CELL: args["CELL_ID"],
        NAMESPACE + "target": target,
        NAMESPACE + "torch": args["TORCH_VERSION"],
        NAMESPACE + "cuda": args["CUDA_VERSION"],
        NAMESPACE + "python": args["PYTHON_VERSION"],
        # nvidia (nvidia/cuda bases) | local (a debootstrap base, CUDA from NVIDIA's wheels) | given (the user's)
        NAMESPACE + "base.route": args["BASE_ROUTE"],
    }
    if apex:
        found |= {
            NAMESPACE + "apex.repo": args["APEX_REPO"],
            NAMESPACE + "apex.ref": args["APEX_REF"],
            NAMESPACE + "apex.flags": args["APEX_FLAGS"],
            NAMESPACE + "archs": args["TORCH_CUDA_ARCH_LIST"],
            NAMESPACE + "manifest": str(MANIFEST_PATH),
        }
    return found


_STACK = ("cell", "target", "torch", "cuda", "python", "base.route")
_APEX = ("apex.repo", "apex.ref", "apex.flags", "archs", "manifest")
_OCI = ("title", "description", "version", "created", "revision", "source", "base.name", "base.digest")


def _names(own: tuple[str, ...], oci: tuple[str, ...]) -> frozenset[str]:
    return frozenset(NAMESPACE + n for n in own) | frozenset(OCI + n for n in oci)


# Which target carries which label, as a table a reader (and a unit test of for_image) can check at a glance.
BY_TARGET: dict[str, frozenset[str]] = {
    "runtime": _names(_STACK + _APEX, _OCI),
    "runtime-devel": _names(_STACK + _APEX, _OCI),
    "runtime-slim": _names(_STACK + _APEX, tuple(n for n in _OCI if n != "base.digest")),
    "verify-runtime": _names(_STACK, _OCI),
}
