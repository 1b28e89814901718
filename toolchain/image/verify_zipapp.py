"""`build.py zipapp`: verify as one self-contained file, `python verify.pyz [verify's flags]`.

verify needs only the standard library and torch, so a zipapp of the package runs in any image or on
any node that has a Python >= 3.10 with torch, without installing anything: that is how `build.py
verify IMAGE` audits images that do not contain verify (NGC PyTorch, a user's own image), and how a
Slurm prolog or a Kubernetes init container runs it. verify reads its data through
importlib.resources (verify/runtime/resources.py) and starts its GPU workers with the zip on PYTHONPATH, so
nothing in it needs a directory on disk.

The archive is reproducible: files in sorted order with one fixed timestamp, so the same checkout
gives the same bytes and the sha256 recorded with an audit names the exact verify that ran.
"""

from __future__ import annotations

import dataclasses
import tempfile
import zipapp
import zipfile
from pathlib import Path

from toolchain.builder.provenance import sha256_of
from verify.runtime import atomic, input_files

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "verify"
MAIN = "verify.cli:main"
INTERPRETER = "/usr/bin/env python3"
SUFFIXES = (".py", ".json")  # the code, the module map, the driver facts and the report schema
FIXED_DATE = (1980, 1, 2, 0, 0, 0)  # zip timestamps start in 1980; one value keeps the bytes stable
NAME = "verify.pyz"


@dataclasses.dataclass(frozen=True)
class Zipapp:
    path: Path
    sha256: str
    size_bytes: int
    files: tuple[str, ...]  # archive member names, without __main__.py

    def to_json(self) -> dict:
        return {
            "path": str(self.path),
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "files": len(self.files),
        }


def _sources(package_dir: Path) -> list[Path]:
    return sorted(
        p
        for p in package_dir.rglob("*")
        if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
    )


# zipapp's main= would write the last two lines; the version check gives an old image's Python one line
# and exit 3 (environment unavailable) instead of a SyntaxError traceback
MAIN_SOURCE = """import sys

if sys.version_info >= (3, 10):
    from verify.runtime import interrupts

    interrupts.early()  # a signal from here on is held until verify's handlers take it (exit 1, one line)
if sys.version_info < (3, 10):
    sys.stderr.write("verify: needs Python >= 3.10, this is %d.%d (%s); run the zipapp with a newer Python\\n"
                     % (sys.version_info[0], sys.version_info[1], sys.executable))
    sys.exit(3)
from verify.cli import main

sys.exit(main())
"""


def build(out: Path | str, *, source_root: Path = REPO_ROOT) -> Zipapp:
    """Write the zipapp to `out` (a directory `out` gets verify.pyz inside), mode 0755, through the one
    safe write path (verify.runtime.atomic): a symlink stays a link and its target gets the new verify (nodes
    that run the link's target run it), a FIFO or a device is handled, a directory refused."""
    out = Path(out)
    into_folder = out.is_dir()
    if into_folder:
        out = out / NAME
    files = _sources(source_root / PACKAGE)
    with tempfile.TemporaryDirectory(prefix="verify-zipapp.") as staging:
        # the zip itself by hand (sorted members, one timestamp, __main__.py included: zipapp's
        # own writer stamps __main__.py with the current time), then zipapp adds the interpreter line
        plain, final = Path(staging) / "verify.zip", Path(staging) / NAME
        with zipfile.ZipFile(plain, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(_member("__main__.py"), MAIN_SOURCE)
            for src in files:
                archive.writestr(
                    _member(src.relative_to(source_root).as_posix()),
                    input_files.read_bytes(src, input_files.SHIPPED),
                )
        zipapp.create_archive(plain, final, interpreter=INTERPRETER)
        data = input_files.read_bytes(final, input_files.WHEEL)
    if into_folder:  # a folder named: verify.pyz in it is the tool's, never written through a link
        atomic.write_in_tree(out.parent, NAME, data, mode=0o755)
    else:  # a file the user named: the safe writer's documented rules (a link is followed)
        atomic.write_bytes(out, data, mode=0o755)
    names = tuple(src.relative_to(source_root).as_posix() for src in files)
    return Zipapp(
        path=out, sha256=sha256_of(out) if out.is_file() else _sha256(data), size_bytes=len(data), files=names
    )


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _member(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=FIXED_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info
