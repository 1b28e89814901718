"""`build.py image --apex-index URL` (`make image ... APEX_INDEX=URL`): the cell's verified wheel from an
index `build.py index` wrote, instead of compiling Apex, so an image and a pip user run the identical binary.

The wheel is found here, on the host, before any stage runs: the index's stacks.json names the cell's stack
(`torch2.15-cu132`: its torch minor and CUDA), the stack's PEP 691 page names each wheel with its sha256,
and the one for the cell's Python and platform is fetched through the bounded URL reader, its hash checked,
and staged into the build context (docker/build-inputs/apex-wheel/). The Dockerfile's apex-index stage then
installs it beside torch and runs the same static gate as a compiled build. An index without the stack,
or without a wheel for the cell's Python, is refused in one line (exit 3) naming what it has.
"""

from __future__ import annotations

import dataclasses
import hashlib
import urllib.parse
from pathlib import Path

from toolchain.errors import EnvironmentUnavailable, UsageError
from toolchain.spec.cell import Cell
from verify.domain import stack_name
from verify.runtime import atomic, input_files

WHEEL_FOLDER = "apex-wheel"  # under the build context's docker/build-inputs/
TIMEOUT_S = 60.0  # a static file server; the wheel itself is tens of MB
ARCH_OF_PLATFORM = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}


@dataclasses.dataclass(frozen=True)
class IndexWheel:
    name: str
    url: str  # absolute
    sha256: str
    stack: str

    def build_args(self) -> dict[str, str]:
        """The Dockerfile's switch from compiling (APEX_FROM=build) to this wheel."""
        return {"APEX_FROM": "index", "APEX_WHEEL": self.name}


def _json(url: str, kind: input_files.InputKind, what: str) -> object:
    try:
        return input_files.decode_json(input_files.read_url(url, kind, timeout_s=TIMEOUT_S), url, kind)
    except input_files.InputFileError as exc:
        if exc.reason == "bad_url":
            raise UsageError(f"--apex-index: {exc}") from None
        raise EnvironmentUnavailable(f"--apex-index: {what}: {exc}") from None


def root(index: str) -> str:
    parts = urllib.parse.urlsplit(index)
    if parts.scheme not in input_files.URL_SCHEMES or (parts.scheme != "file" and not parts.hostname):
        raise UsageError(
            f"--apex-index {index!r}: not an http://, https:// or file:// URL; pass the index root (the "
            "folder holding stacks.json), e.g. https://OWNER.github.io/REPO/"
        )
    return index.rstrip("/") + "/"


def _stacks(base: str) -> dict[str, str]:
    """{stack name: its simple/ path} from stacks.json."""
    data = _json(base + "stacks.json", input_files.INDEX_STACKS, "the stack list")
    rows = data.get("stacks") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise EnvironmentUnavailable(
            f"--apex-index {base}stacks.json: not the stack list `build.py index` writes (no `stacks` list); "
            "pass the root of such an index"
        )
    found = {}
    for row in rows:
        if isinstance(row, dict) and isinstance(row.get("stack"), str) and isinstance(row.get("simple"), str):
            found[row["stack"]] = row["simple"]
    return found


def fits(name: str, cell: Cell) -> bool:
    """The wheel file name's tags fit the cell's Python (cpXY) and platform (manylinux/linux of its arch)."""
    parts = name[: -len(".whl")].split("-") if name.endswith(".whl") else []
    if len(parts) not in (5, 6):
        return False
    python = "cp" + cell.python.replace(".", "")
    arch = ARCH_OF_PLATFORM.get(cell.platform, "")
    platforms = parts[-1].split(".")
    return python in parts[-3].split(".") and any(p.endswith("_" + arch) for p in platforms)


def find(cell: Cell, index: str) -> IndexWheel:
    """The cell's wheel on the index, or EnvironmentUnavailable naming what the index has."""
    base = root(index)
    stack = stack_name.stack_name(cell.torch, cell.cuda)
    stacks = _stacks(base)
    if stack not in stacks:
        raise EnvironmentUnavailable(
            f"--apex-index {base} has no stack {stack} (cell {cell.name}: torch {cell.torch}, CUDA {cell.cuda}); "
            f"it has {', '.join(sorted(stacks)) or 'none'}: build without --apex-index (Apex compiled) or "
            "publish the stack's wheel there first (build.py index)"
        )
    page_url = urllib.parse.urljoin(base, stacks[stack].rstrip("/") + "/apex/")
    # the page's JSON by its file name: a static host (Pages, a bucket, file://) serves a folder as its HTML
    page = _json(page_url + "index.json", input_files.INDEX_ANSWER, f"the {stack} page")
    files = page.get("files") if isinstance(page, dict) else None
    rows = [f for f in files or [] if isinstance(f, dict) and isinstance(f.get("filename"), str)]
    for row in rows:
        sha = (row.get("hashes") or {}).get("sha256") if isinstance(row.get("hashes"), dict) else None
        if fits(row["filename"], cell) and isinstance(sha, str) and isinstance(row.get("url"), str):
            return IndexWheel(row["filename"], urllib.parse.urljoin(page_url, row["url"]), sha, stack)
    raise EnvironmentUnavailable(
        f"--apex-index {base}: stack {stack} has no wheel for Python {cell.python} on {cell.platform} (it has "
        f"{', '.join(r['filename'] for r in rows) or 'none'}); build without --apex-index, or publish one"
    )


def fetch(wheel: IndexWheel, folder: Path) -> Path:
    """The wheel's bytes into folder/NAME, its sha256 checked against the index's page."""
    try:
        data = input_files.read_url(wheel.url, input_files.APEX_WHEEL, timeout_s=TIMEOUT_S)
    except input_files.InputFileError as exc:
        raise EnvironmentUnavailable(f"--apex-index: the wheel {wheel.name}: {exc}") from None
    got = hashlib.sha256(data).hexdigest()
    if got != wheel.sha256:
        raise EnvironmentUnavailable(
            f"--apex-index: {wheel.url} has sha256 {got}, its index page says {wheel.sha256}; the index or a "
            "proxy changed the file: rebuild the index (build.py index) or build without --apex-index"
        )
    path = folder / wheel.name
    atomic.write_bytes(path, data)
    return path
