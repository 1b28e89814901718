"""Writing the per-stack index (`build.py index`), laid out the way PyTorch lays out its own per CUDA:

    INDEX/index.html, INDEX/stacks.json                  every stack: archs, Apex commit, verdict, date
    INDEX/torch2.11-cu130/simple/index.html|.json        PEP 503 / PEP 691 root (one project: apex)
    INDEX/torch2.11-cu130/simple/apex/index.html|.json   the links, each with #sha256= and its metadata hash
    INDEX/torch2.11-cu130/files/<sha256[:16]>/           the wheel, WHEEL.metadata (PEP 658),
                                                         build-manifest.json, verify-static.json|.md,
                                                         wheel-check.json (what the checks found)

The index folder is its own state: each run reads what is published (a folder whose wheel claims another
stack than the one it is filed under is left out and named), adds what passed the checks, and
rewrites a page only when its bytes change (the same wheels twice change nothing). Each wheel's folder is
written under a temporary name and renamed into place, pages go through verify.runtime.atomic after it, and a
replaced folder is removed only after no page links it: a reader never sees a link to a missing file.

The folder is a tree the tool owns: before anything is written, a symbolic link or a special file anywhere
in it (`stacks.json -> ../../x`, a `files/` link that a gh-pages checkout carries) is refused with one line
naming it (`atomic.LinkInOwnedTree`, exit 2), and every write goes through `atomic.write_in_tree`, which never
follows a link. What a published folder holds is read through the bounded reader and shape-checked; a
damaged folder is left out of the pages (said once), never half-read, so the HTML and JSON pages and
stacks.json always list the same wheels.
A wheel with the same name (stack, commit, Python, platform) replaces the published one only when its
build is newer (the manifest's build.started_at); it has passed its own gate, or it would not get here.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from toolchain.index import dependencies, gpu_reports, pages
from toolchain.index.gpu_reports import GpuReport
from toolchain.index.wheel_check import CheckedWheel
from verify.runtime import atomic, input_files
from verify.runtime import field_types as ft
from verify.runtime.messages import printable

CHECK_FILE = "wheel-check.json"


@dataclasses.dataclass(frozen=True)
class Outcome:
    wheel: str
    stack: str
    # added | unchanged | replaced | kept (an older build than the published one) | gpu | unmatched |
    # dependency (a wheel a published one requires, new to INDEX/dependencies/)
    action: str
    detail: str = ""


_TEXT = ft.Nullable(ft.Str(max_len=4096))
# What the pages take from a published folder's JSON, field by field (other keys are left alone)
_MANIFEST = ft.Record(
    {
        "apex": ft.Nullable(ft.Record({"commit": _TEXT, "ref": _TEXT})),
        "build": ft.Nullable(ft.Record({"started_at": _TEXT})),
        "arch_list": _TEXT,
        "versions": ft.Nullable(ft.Record({"torch": _TEXT, "torch_cuda": _TEXT})),
        "wheel_identity": ft.Nullable(ft.Record({"stack": _TEXT})),
    }
)
_REPORT = ft.Record({"verdict": _TEXT})
_CHECK = ft.Record(
    {
        "sha256": ft.Str(pattern="[0-9a-f]{64}", means="a sha256 in hex"),
        "version": ft.Str(max_len=256),
        "requires_python": _TEXT,
        "glibc": ft.Nullable(ft.Str(pattern="[0-9]+[.][0-9]+", means="a glibc version like 2.28")),
    },
    required=("sha256", "version"),
)


def _read_json(path: Path, shape: ft.Shape) -> dict:
    data = input_files.read_json(path, input_files.PUBLISHED)
    if not isinstance(data, dict):
        raise input_files.InputFileError(path, "bad_shape", f"is {ft.type_word(data)}, not an object", "")
    problems = ft.check(data, shape, path.name)
    if problems:
        raise input_files.InputFileError(path, "bad_shape", ft.summary(problems), "")
    return data


def _entry(stack: str, folder: Path) -> pages.Entry | None:
    """A published wheel read back from its folder (None for a folder that is not one: left alone)."""
    wheels = sorted(p for p in folder.glob("*.whl") if not p.is_symlink())
    manifest_path = folder / "build-manifest.json"
    if len(wheels) != 1 or not (manifest_path.is_file() or manifest_path.is_symlink()):
        return None
    wheel = wheels[0]
    try:  # the bounded reader: a FIFO, a device, a huge or damaged file is named, never waited on
        manifest = _read_json(manifest_path, _MANIFEST)
        report = _read_json(folder / "verify-static.json", _REPORT)
        check = _read_json(folder / CHECK_FILE, _CHECK)
        metadata = input_files.read_bytes(folder / f"{wheel.name}.metadata", input_files.WHEEL_METADATA)
    except input_files.InputFileError as error:  # damaged by hand: not linked, said once
        print(
            f"build.py index: {printable(folder)} is not a whole published wheel ({printable(error.path)}: "
            f"{printable(error.problem)}); it is left out of the pages",
            file=sys.stderr,
        )
        return None
    claimed = (manifest.get("wheel_identity") or {}).get("stack")
    # a wheel pinned to another torch or CUDA: pip on this stack could not use it (a manifest without the
    # identity is one `build.py index` wrote before wheels carried it: its folder name is all there is)
    if claimed is not None and claimed != stack:
        print(
            f"build.py index: {printable(folder)} holds a wheel built for {printable(claimed or 'no stack')}, "
            f"filed under {printable(stack)}; "
            f"it is left out of the pages (publish it again with build.py index, or remove the folder)",
            file=sys.stderr,
        )
        return None
    apex = manifest.get("apex") or {}
    versions = manifest.get("versions") or {}
    return pages.Entry(
        stack=stack,
        name=wheel.name,
        folder=folder.name,
        sha256=check["sha256"],
        size=wheel.stat().st_size,
        version=check["version"],
        metadata_sha256=hashlib.sha256(metadata).hexdigest(),
        requires_python=check.get("requires_python"),
        built_at=str((manifest.get("build") or {}).get("started_at") or ""),  # shape-checked above
        commit=apex.get("commit") or apex.get("ref"),
        archs=manifest.get("arch_list"),
        verdict=str(report.get("verdict")),
        glibc=check.get("glibc"),
        torch=versions.get("torch"),
        torch_cuda=versions.get("torch_cuda"),
        gpu_verdict=_gpu_verdict(folder),
        requires=dependencies.requires_dist(metadata),
    )


def _gpu_verdict(folder: Path) -> str | None:
    """The verdict of the GPU report attached beside the wheel (gpu_reports), None when there is none."""
    path = folder / gpu_reports.FILE
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        return str(_read_json(path, _REPORT)["verdict"])
    except input_files.InputFileError:
        return "unreadable"


def published(index: Path) -> list[pages.Entry]:
    entries = []
    for files in sorted(index.glob("*/files")):
        for folder in sorted(p for p in files.iterdir() if p.is_dir() and not p.name.startswith(".")):
            entry = _entry(files.parent.name, folder)
            if entry:
                entries.append(entry)
    return entries


def _write_folder(index: Path, wheel: CheckedWheel) -> str:
    """The wheel's folder under files/, made whole under a temporary name, then renamed into place; every
    write inside the index through atomic.write_in_tree (no link followed)."""
    files_rel = f"{wheel.stack}/files"
    files = index / files_rel
    name = wheel.sha256[:16]
    if (files / name).is_dir():
        if _entry(wheel.stack, files / name) is not None:
            return name
        shutil.rmtree(files / name)  # a damaged copy of this very wheel: made whole again below
    work = f".adding-{os.getpid()}-{name}"
    record = {**wheel.check_record(), "requires_python": wheel.requires_python}
    contents = {
        wheel.name: input_files.read_bytes(wheel.path, input_files.WHEEL),
        f"{wheel.name}.metadata": wheel.metadata,
        "build-manifest.json": (atomic.json_dumps(wheel.manifest) + "\n").encode("utf-8"),
        "verify-static.json": wheel.verify_json,
        **({"verify-static.md": wheel.verify_md} if wheel.verify_md is not None else {}),
        CHECK_FILE: (atomic.json_dumps(record) + "\n").encode("utf-8"),
    }
    files_fd = atomic.open_tree_dir(index, files_rel, create=True)
    try:
        shutil.rmtree(files / work, ignore_errors=True)  # a killed run's leftover of this very wheel
        for member, data in contents.items():
            atomic.write_in_tree(index, f"{files_rel}/{work}/{member}", data)
        folder_fd = atomic.open_tree_dir(index, f"{files_rel}/{work}")
        try:
            os.fchmod(folder_fd, 0o755)
            os.fsync(folder_fd)
        finally:
            os.close(folder_fd)
        os.rename(work, name, src_dir_fd=files_fd, dst_dir_fd=files_fd)
    except BaseException:
        shutil.rmtree(files / work, ignore_errors=True)
        raise
    finally:
        os.close(files_fd)
    return name


def _write_if_changed(pages_batch: atomic.TreeBatch, path: Path, text: str) -> bool:
    """A page inside the index, staged in the batch of every page (atomic.TreeBatch: all land together, or
    none does); unchanged bytes are not rewritten."""
    index = Path(pages_batch.root)
    return pages_batch.add(path.relative_to(index).as_posix(), text.encode("utf-8"))


@dataclasses.dataclass(frozen=True)
class Extras:
    """What `build.py index` adds beside the wheels. `tools`: {"wheel": the apex-verify wheel, "zipapp":
    verify.pyz}, copied to INDEX/tools/ and linked from every stack's page, the index's own simple/ and the
    top page; `address`: where the index is served (<INDEX> on the pages when None); `gpu`: GPU verify
    reports, each attached to the published wheel it verified; `dependencies`: where the wheels the published
    ones require (besides torch) come from when the index lacks them (toolchain/index/dependencies.py)."""

    tools: dict[str, Path] | None = None
    address: str | None = None
    gpu: tuple[GpuReport, ...] = ()
    dependencies: dependencies.Source = dependencies.Source()


def add(index: Path, wheels: list[CheckedWheel], extras: Extras = Extras()) -> list[Outcome]:
    """Publish the checked wheels into `index`; returns what happened to each. One writer at a time: a second
    `build.py index` on the same folder waits for the first (INDEX/.lock)."""
    index.mkdir(parents=True, exist_ok=True)
    lock = atomic.open_lock_in_tree(
        index, ".lock"
    )  # never truncated: a run that changes nothing changes nothing
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        atomic.refuse_links_in_tree(
            index
        )  # before anything is written: a refusal leaves every page as it was
        current = {(e.stack, e.name): e for e in published(index)}
        with tempfile.TemporaryDirectory(prefix="apex-index-dependencies-") as work:
            # before anything is written too: a requirement nothing supplies leaves the index as it was
            needs = _needs(current, wheels)
            resolution = dependencies.resolve(index, needs, extras.dependencies, Path(work))
            tools = _publish_tools(index, extras.tools) if extras.tools else None
            return _add(index, wheels, current, resolution, tools, extras)
    finally:
        os.close(lock)


def _publish_tools(index: Path, tools: dict[str, Path]) -> pages.Tools:
    """Copy the tool files into INDEX/tools/ (unchanged bytes are not rewritten: both are reproducible)."""
    files = {}
    for kind, path in tools.items():
        data = input_files.read_bytes(path, input_files.WHEEL)
        atomic.write_in_tree(index, f"{pages.TOOLS_FOLDER}/{path.name}", data)
        version = path.name.split("-")[1] if kind == "wheel" else "0"
        files[kind] = pages.ToolFile(path.name, hashlib.sha256(data).hexdigest(), len(data), version)
    return pages.Tools(wheel=files["wheel"], zipapp=files["zipapp"])


def _fate(old: pages.Entry | CheckedWheel | None, wheel: CheckedWheel) -> str:
    """unchanged (the same bytes are published), kept (the published build is not older) or write."""
    if old and old.sha256 == wheel.sha256:
        return "unchanged"
    if old and old.built_at >= wheel.built_at:
        return "kept"
    return "write"


def _needs(
    current: dict[tuple[str, str], pages.Entry], wheels: list[CheckedWheel]
) -> list[dependencies.Need]:
    """What the wheels the pages will list require: the published ones, as the new ones replace them."""
    listed: dict[tuple[str, str], pages.Entry | CheckedWheel] = dict(current)
    for wheel in wheels:
        if _fate(listed.get((wheel.stack, wheel.name)), wheel) == "write":
            listed[(wheel.stack, wheel.name)] = wheel
    return [
        need
        for (stack, name), listed_wheel in sorted(listed.items())
        for need in dependencies.needs_of(stack, name, listed_wheel.requires)
    ]


def _add(
    index: Path,
    wheels: list[CheckedWheel],
    current: dict[tuple[str, str], pages.Entry],
    resolution: dependencies.Resolution,
    tools: pages.Tools | None,
    extras: Extras,
) -> list[Outcome]:
    outcomes, stale = [], []
    for wheel in wheels:
        old = current.get((wheel.stack, wheel.name))
        fate = _fate(old, wheel)
        if fate == "unchanged":
            outcomes.append(Outcome(wheel.name, wheel.stack, "unchanged"))
            continue
        if fate == "kept" and old:
            outcomes.append(
                Outcome(
                    wheel.name,
                    wheel.stack,
                    "kept",
                    f"the published build ({old.built_at}) is not older than this one ({wheel.built_at})",
                )
            )
            continue
        folder = _write_folder(index, wheel)
        entry = _entry(wheel.stack, index / wheel.stack / "files" / folder)
        assert entry is not None
        current[(wheel.stack, wheel.name)] = entry
        if old:
            stale.append(index / wheel.stack / "files" / old.folder)
        outcomes.append(
            Outcome(
                wheel.name,
                wheel.stack,
                "replaced" if old else "added",
                f"over the build of {old.built_at}" if old else "",
            )
        )
    for report in extras.gpu:
        outcomes.append(_attach(index, current, report))
    write_pages(index, list(current.values()), tools, extras.address, resolution)
    for stale_folder in stale:  # no page links it any more
        shutil.rmtree(stale_folder, ignore_errors=True)
    for added in resolution.added:
        stacks = ", ".join(s for s, served in sorted(resolution.served.items()) if added in served)
        why = resolution.why.get(added.name, "")
        outcomes.append(Outcome(added.name, stacks, "dependency", f"{why}; from {added.origin}"))
    return outcomes


def _attach(index: Path, current: dict[tuple[str, str], pages.Entry], report: GpuReport) -> Outcome:
    """Put the report beside the published wheel it verified (see gpu_reports). A report that matches no
    published wheel is the outcome `unmatched`: the command names it and exits 1."""
    for key, entry in current.items():
        if entry.version == report.version and entry.built_at == report.built_at:
            atomic.write_in_tree(index, f"{entry.stack}/files/{entry.folder}/{gpu_reports.FILE}", report.data)
            current[key] = dataclasses.replace(entry, gpu_verdict=report.verdict)
            return Outcome(entry.name, entry.stack, "gpu", f"verify on a GPU: {report.verdict}")
    return Outcome(
        str(report.path), "-", "unmatched", f"apex {report.version} built {report.built_at} is not published"
    )


def write_pages(
    index: Path,
    entries: list[pages.Entry],
    tools: pages.Tools | None = None,
    address: str | None = None,
    resolution: dependencies.Resolution | None = None,
) -> None:
    """Every page of the index, staged and then renamed into place together (atomic.TreeBatch): a failure
    while they are written (a full disk) leaves every page as it was. The dependency wheels new to the index
    are staged first in the same batch, so they land before any page links them."""
    with atomic.TreeBatch(index) as batch:
        for wheel in resolution.added if resolution else ():
            batch.add(wheel.relpath, input_files.read_bytes(wheel.path, input_files.WHEEL))
            batch.add(f"{wheel.relpath}.metadata", wheel.metadata)
        _stage_pages(batch, index, entries, tools, address, resolution)


def _stage_pages(
    batch: atomic.TreeBatch,
    index: Path,
    entries: list[pages.Entry],
    tools: pages.Tools | None,
    address: str | None,
    resolution: dependencies.Resolution | None,
) -> None:
    served = resolution.served if resolution else {}
    for stack in sorted({e.stack for e in entries}):
        mine = [e for e in entries if e.stack == stack]
        simple = index / stack / "simple"
        _write_if_changed(batch, simple / pages.PROJECT / "index.html", pages.project_html(mine))
        _write_if_changed(batch, simple / pages.PROJECT / "index.json", pages.project_json(mine))
        if tools:
            _write_if_changed(batch, simple / pages.TOOL_PROJECT / "index.html", pages.tool_html(tools.wheel))
            _write_if_changed(batch, simple / pages.TOOL_PROJECT / "index.json", pages.tool_json(tools.wheel))
        needed = served.get(stack, ())
        projects = sorted({w.project for w in needed})
        for project in projects:
            files = [w for w in needed if w.project == project]
            _write_if_changed(batch, simple / project / "index.html", pages.project_html(files, project))
            _write_if_changed(batch, simple / project / "index.json", pages.project_json(files, project))
        _write_if_changed(batch, simple / "index.html", pages.root_html(tools, others=projects))
        _write_if_changed(batch, simple / "index.json", pages.root_json(tools, others=projects))
    if tools:  # the index's own simple/: apex-verify needs no stack (`pip install apex-verify --index-url INDEX/simple`)
        top = index / "simple"
        _write_if_changed(
            batch, top / pages.TOOL_PROJECT / "index.html", pages.tool_html(tools.wheel, top=True)
        )
        _write_if_changed(
            batch, top / pages.TOOL_PROJECT / "index.json", pages.tool_json(tools.wheel, top=True)
        )
        _write_if_changed(batch, top / "index.html", pages.root_html(tools, apex=False))
        _write_if_changed(batch, top / "index.json", pages.root_json(tools, apex=False))
    if entries:
        names = (
            {stack: tuple(w.name for w in wheels) for stack, wheels in served.items()} if resolution else None
        )
        _write_if_changed(batch, index / "stacks.json", pages.top_json(entries, tools, address, names))
        _write_if_changed(batch, index / "index.html", pages.top_html(entries, tools, address))
