"""Which bases a cell's image stands on: NVIDIA's CUDA images, or a local debootstrap base (compat.toml
[local_base]) with CUDA from NVIDIA's wheels and torch from PyPI.

`--base auto` (the default of `build.py image` and `matrix`) keeps a cell on NVIDIA's images when the
engine has them or a registry serves them; otherwise it says so in one line and builds the same cell
(its CUDA, torch, Python, archs and Apex ref) on the local base of an OS that packages its Python.
`--base nvidia` never falls back (the build's pull then fails with exit 3); `--base local` always uses
the local base. Where PyPI does not carry the cell's torch build (PyPI holds one CUDA per torch release),
the fallback stops with exit 3 naming the index that does and the flag that reaches it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from toolchain.errors import EnvironmentUnavailable, MatrixError, UsageError
from toolchain.spec import compat as compat_mod
from toolchain.spec.cell import Cell

ROUTES = ("auto", "nvidia", "local")
REPO_ROOT = Path(__file__).resolve().parents[2]
ENSURE_BASE = REPO_ROOT / "scripts" / "ensure-docker.sh"

# (image) -> None when the engine has it or a registry serves it, else why not (one line)
Availability = Callable[[str], "str | None"]
Reresolve = Callable[[Cell, Mapping[str, str]], Cell]


def engine_availability() -> Availability:
    """Asks the daemon: the local store first, then the registry's manifest (no layers are pulled)."""
    import docker
    from docker.errors import APIError, ImageNotFound

    client = docker.from_env(timeout=30)
    seen: dict[str, str | None] = {}

    def why_not(ref: str) -> str | None:
        if ref not in seen:
            try:
                client.images.get(ref)
                seen[ref] = None
            except ImageNotFound:
                try:
                    client.images.get_registry_data(ref)
                    seen[ref] = None
                except APIError as err:
                    text = str(err.explanation or err)
                    found = re.search(r'": (.+?)"?\)?$', text)  # Go's `Get "URL": dial tcp: ...`: the why
                    seen[ref] = (found.group(1) if found else text)[:160]
        return seen[ref]

    return why_not


def choose(
    cell: Cell,
    requested: str,
    reresolve: Reresolve,
    available: Availability,
    facts: compat_mod.Compat | None = None,
) -> tuple[Cell, str | None]:
    """(the cell as it will be built, the one line that says it moved to the local base, or None)."""
    facts = facts or compat_mod.load()
    if requested not in ROUTES:
        raise UsageError(f"--base {requested!r}: use one of {', '.join(ROUTES)}")
    if requested == "nvidia":
        if cell.base_route == "local":
            published = facts.cuda[cell.cuda].os if cell.cuda in facts.cuda else ()
            fix = f"use --os {published[0]} (a Python it packages)" if published else "use another CUDA"
            raise UsageError(
                f"--base nvidia: NVIDIA publishes no CUDA {cell.cuda} image for {cell.os}; {fix}, "
                "or --base auto"
            )
        return cell, None
    if cell.base_route != "nvidia":  # a local base already, or base images the user named
        return cell, None
    if requested == "auto":
        missing = [
            (ref, why)
            for ref in dict.fromkeys((cell.base_devel, cell.base_runtime))
            if (why := available(ref)) is not None
        ]
        if not missing:
            return cell, None
        reason = f"{missing[0][0]} cannot be pulled ({missing[0][1]})"
    else:
        reason = "--base local"
    default_index = cell.torch_index_url == facts.index_url(cell.cuda)
    if requested == "auto" and default_index and not facts.pypi_carries(cell.torch, cell.cuda):
        release = facts.torch_release(cell.torch)
        pypi = f"CUDA {release.pypi_cuda}" if release and release.pypi_cuda else "no CUDA build"
        raise EnvironmentUnavailable(
            f"cell {cell.name}: {reason}; the local base needs torch {cell.torch} built for CUDA {cell.cuda}, which "
            f"PyPI does not carry (PyPI's torch {compat_mod.minor_of(cell.torch)} is {pypi}): it is on "
            f"{cell.torch_index_url}; pass --base local --torch-index-url {cell.torch_index_url} (or a mirror of it; "
            "make: BASE=local), or make the NVIDIA image available"
        )
    moved, local, refused = _on_a_local_base(cell, reresolve, facts)
    if moved is None or local is None:
        offered = ", ".join(
            f"{b.os} (Python {'/'.join(facts.os[b.os].python)})" for b in facts.local_bases.values()
        )
        raise EnvironmentUnavailable(
            f"cell {cell.name}: {reason}, and no local base fits it ({offered}; {' / '.join(refused)}); make the "
            "NVIDIA image available (docker load, or --base-devel/--base-runtime with your mirror; make: BASE_DEVEL_IMAGE=), "
            "or change what the refusals name"
        )
    python = (
        f" with Python {moved.python}, as none packages the cell's {cell.python}"
        if moved.python != cell.python
        else ""
    )
    cuda_from = (
        f"{local.os}'s {' '.join(moved.os_cuda_packages)}" if moved.os_cuda_packages else "NVIDIA's wheels"
    )
    note = (
        f"cell {cell.name}: {reason}: building it on the local base {local.image} ({local.os}{python}, CUDA "
        f"{moved.cuda} from {cuda_from}, torch {moved.torch} from {moved.torch_index_url}) as {moved.id}"
        + ("; --base nvidia to insist" if requested == "auto" else "")
    )
    return moved, note


def built_cell(
    cell: Cell,
    requested: str,
    reresolve: Reresolve,
    has_image: Callable[[Cell], bool],
    facts: compat_mod.Compat | None = None,
) -> tuple[Cell, str | None]:
    """The cell whose image `build.py image` with the same options made, so that `verify` and `plan` name
    its tag (one rule for both): --base nvidia or local, that route's cell; auto, NVIDIA's cell when the
    engine has its image, else the local route's when the engine has that one (auto moved the build there
    when NVIDIA's base could not be pulled), else NVIDIA's (nothing built yet). `has_image(cell)` asks the
    engine's store for the cell's tag. Returns the cell and, when it moved, the one line that says so."""
    if requested != "auto" or cell.base_route != "nvidia":
        return choose(cell, requested, reresolve, lambda ref: None, facts)[0], None
    if has_image(cell):
        return cell, None
    try:
        local = choose(cell, "local", reresolve, lambda ref: None, facts)[0]
    except (EnvironmentUnavailable, UsageError):  # no local route for this cell: NVIDIA's tag it is
        return cell, None
    if local.id == cell.id or not has_image(local):
        return cell, None
    return local, (
        f"cell {cell.name}: {local.id}, the image `build.py image` made on the local base (no {cell.id} "
        "here); --base nvidia names NVIDIA's"
    )


def engine_has_image() -> Callable[[str], bool]:
    """tag -> whether the engine's store holds it; always False when no daemon answers (plan needs none)."""
    try:
        import docker
        from docker.errors import DockerException, ImageNotFound

        client = docker.from_env(timeout=5)
        client.ping()
    except (ImportError, DockerException, OSError):
        return lambda ref: False

    def has(ref: str) -> bool:
        try:
            client.images.get(ref)
            return True
        except (ImageNotFound, DockerException, OSError):
            return False

    return has


def _on_a_local_base(
    cell: Cell, reresolve: Reresolve, facts: compat_mod.Compat
) -> tuple[Cell | None, compat_mod.LocalBase | None, list[str]]:
    """The cell resolved again on the first local base that takes it: the one packaging its Python first,
    then the newest; a Python the cell did not write is the OS's (validation says when one does not fit)."""
    order = sorted(
        facts.local_bases.values(),
        key=lambda b: (cell.python not in facts.os[b.os].python, -list(facts.local_bases).index(b.os)),
    )
    refused: list[str] = []
    for local in order:
        try:
            return reresolve(cell, {"os": local.os}), local, refused
        except MatrixError as error:
            refused.append(f"{local.os}: {'; '.join(p.problem for p in error.problems)}")
    return None, None, refused


def ensure_local_base(
    cell: Cell,
    facts: compat_mod.Compat | None = None,
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
) -> str | None:
    """Make the cell's local base when the engine lacks it (debootstrap + docker import, about a minute);
    returns what was done, or None when nothing was needed. Failing is exit 3 naming the script."""
    facts = facts or compat_mod.load()
    base = facts.local_bases.get(cell.os)
    if cell.base_route != "local" or base is None:
        return None
    import docker
    from docker.errors import ImageNotFound

    try:
        docker.from_env(timeout=30).images.get(base.image)
        return None
    except ImageNotFound:
        pass
    env = dict(os.environ, BASE_IMAGE=base.image, BASE_SUITE=base.suite, ENSURE_BASE_ONLY="1")
    done = run(["bash", str(ENSURE_BASE)], env=env, check=False)
    if done.returncode != 0:
        raise EnvironmentUnavailable(
            f"the local base {base.image} ({base.suite}) could not be made (scripts/ensure-docker.sh exit "
            f"{done.returncode}, output above); run `BASE_IMAGE={base.image} BASE_SUITE={base.suite} bash "
            "scripts/ensure-docker.sh` as root, or load the image (docker load)"
        )
    return f"made the local base {base.image} with debootstrap {base.suite}"
