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
A wheel with the same name (stack, commit, Python, platform) replaces the published one only when its
build is newer (the manifest's build.started_at); it has passed its own gate, or it would not get here.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from toolchain.index import pages
from toolchain.index.wheel_check import CheckedWheel
from verify.runtime import atomic

CHECK_FILE = "wheel-check.json"


@dataclasses.dataclass(frozen=True)
class Outcome:
    wheel: str
    stack: str
    action: str  # added | unchanged | replaced | kept (an older build than the published one)
    detail: str = ""


def _entry(stack: str, folder: Path) -> pages.Entry | None:
    """A published wheel read back from its folder (None for a folder that is not one: left alone)."""
    wheels = sorted(folder.glob("*.whl"))
    manifest_path = folder / "build-manifest.json"
    if len(wheels) != 1 or not manifest_path.is_file():
        return None
    wheel = wheels[0]
    try:
        manifest = json.loads(manifest_path.read_text())
        report = json.loads((folder / "verify-static.json").read_text())
        check = json.loads((folder / CHECK_FILE).read_text())
        metadata = (folder / f"{wheel.name}.metadata").read_bytes()
        check["sha256"], check["version"]  # noqa: B018 (both must be there)
    except (OSError, ValueError, KeyError, TypeError) as error:  # damaged by hand: not linked, said once
        print(
            f"build.py index: {folder} is not a whole published wheel ({error}); it is left out of the pages",
            file=sys.stderr,
        )
        return None
    claimed = (manifest.get("wheel_identity") or {}).get("stack")
    if claimed != stack:  # a wheel pinned to another torch or CUDA: pip on this stack could not use it
        print(
            f"build.py index: {folder} holds a wheel built for {claimed or 'no stack'}, filed under {stack}; "
            f"it is left out of the pages (publish it again with build.py index, or remove the folder)",
            file=sys.stderr,
        )
        return None
    apex = manifest.get("apex") or {}
    return pages.Entry(
        stack=stack,
        name=wheel.name,
        folder=folder.name,
        sha256=check["sha256"],
        size=wheel.stat().st_size,
        version=check["version"],
        metadata_sha256=hashlib.sha256(metadata).hexdigest(),
        requires_python=check.get("requires_python"),
        built_at=str((manifest.get("build") or {}).get("started_at") or ""),
        commit=apex.get("commit") or apex.get("ref"),
        archs=manifest.get("arch_list"),
        verdict=str(report.get("verdict")),
        glibc=check.get("glibc"),
    )


def published(index: Path) -> list[pages.Entry]:
    entries = []
    for files in sorted(index.glob("*/files")):
        for folder in sorted(p for p in files.iterdir() if p.is_dir() and not p.name.startswith(".")):
            entry = _entry(files.parent.name, folder)
            if entry:
                entries.append(entry)
    return entries


def _write_folder(index: Path, wheel: CheckedWheel) -> str:
    """The wheel's folder under files/, made whole under a temporary name, then renamed into place."""
    files = index / wheel.stack / "files"
    name = wheel.sha256[:16]
    if (files / name).is_dir():
        if _entry(wheel.stack, files / name) is not None:
            return name
        shutil.rmtree(files / name)  # a damaged copy of this very wheel: made whole again below
    files.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".adding-", dir=files))
    try:
        shutil.copyfile(wheel.path, work / wheel.name)
        (work / f"{wheel.name}.metadata").write_bytes(wheel.metadata)
        (work / "build-manifest.json").write_text(atomic.json_dumps(wheel.manifest) + "\n")
        (work / "verify-static.json").write_bytes(wheel.verify_json)
        if wheel.verify_md is not None:
            (work / "verify-static.md").write_bytes(wheel.verify_md)
        record = {**wheel.check_record(), "requires_python": wheel.requires_python}
        (work / CHECK_FILE).write_text(atomic.json_dumps(record) + "\n")
        for path in (*work.iterdir(), work):
            with open(path, "rb") if path.is_file() else _dir_fd(path) as handle:
                os.fsync(handle.fileno())
            path.chmod(0o644 if path.is_file() else 0o755)
        os.rename(work, files / name)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return name


class _dir_fd:
    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def fileno(self) -> int:
        return self.fd

    def __enter__(self) -> _dir_fd:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)


def _write_if_changed(path: Path, text: str) -> bool:
    data = text.encode("utf-8")
    if path.is_file() and path.read_bytes() == data:
        return False
    atomic.write_bytes(path, data)
    return True


def add(index: Path, wheels: list[CheckedWheel], tools: dict[str, Path] | None = None) -> list[Outcome]:
    """Publish the checked wheels into `index`; returns what happened to each. One writer at a time: a second
    `build.py index` on the same folder waits for the first (INDEX/.lock). `tools`: {"wheel": the apex-verify
    wheel, "zipapp": verify.pyz}, copied to INDEX/tools/ and linked from every stack's page and the top page."""
    index.mkdir(parents=True, exist_ok=True)
    with open(
        index / ".lock", "a"
    ) as lock:  # "a": never truncated, so a run that changes nothing changes nothing
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _add(index, wheels, _publish_tools(index, tools) if tools else None)


def _publish_tools(index: Path, tools: dict[str, Path]) -> pages.Tools:
    """Copy the tool files into INDEX/tools/ (unchanged bytes are not rewritten: both are reproducible)."""
    files = {}
    for kind, path in tools.items():
        data = path.read_bytes()
        target = index / pages.TOOLS_FOLDER / path.name
        if not (target.is_file() and target.read_bytes() == data):
            atomic.write_bytes(target, data)
        version = path.name.split("-")[1] if kind == "wheel" else "0"
        files[kind] = pages.ToolFile(path.name, hashlib.sha256(data).hexdigest(), len(data), version)
    return pages.Tools(wheel=files["wheel"], zipapp=files["zipapp"])


def _add(index: Path, wheels: list[CheckedWheel], tools: pages.Tools | None = None) -> list[Outcome]:
    current = {(e.stack, e.name): e for e in published(index)}
    outcomes, stale = [], []
    for wheel in wheels:
        old = current.get((wheel.stack, wheel.name))
        if old and old.sha256 == wheel.sha256:
            outcomes.append(Outcome(wheel.name, wheel.stack, "unchanged"))
            continue
        if old and old.built_at >= wheel.built_at:
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
    write_pages(index, list(current.values()), tools)
    for stale_folder in stale:  # no page links it any more
        shutil.rmtree(stale_folder, ignore_errors=True)
    return outcomes


def write_pages(index: Path, entries: list[pages.Entry], tools: pages.Tools | None = None) -> None:
    for stack in sorted({e.stack for e in entries}):
        mine = [e for e in entries if e.stack == stack]
        simple = index / stack / "simple"
        _write_if_changed(simple / pages.PROJECT / "index.html", pages.project_html(mine))
        _write_if_changed(simple / pages.PROJECT / "index.json", pages.project_json(mine))
        if tools:
            _write_if_changed(simple / pages.TOOL_PROJECT / "index.html", pages.tool_html(tools.wheel))
            _write_if_changed(simple / pages.TOOL_PROJECT / "index.json", pages.tool_json(tools.wheel))
        _write_if_changed(simple / "index.html", pages.root_html(tools))
        _write_if_changed(simple / "index.json", pages.root_json(tools))
    if entries:
        _write_if_changed(index / "stacks.json", pages.top_json(entries, tools))
        _write_if_changed(index / "index.html", pages.top_html(entries, tools))
