"""`build.py verify-wheel`: verify as its own pure-Python wheel, `apex-verify`, installable anywhere torch
is (`pip install apex_verify-0.1.0-py3-none-any.whl`), with the console script `apex-verify`.

Written with zipfile, not a build backend: the wheel holds the top-level `verify/` package as it is in the
checkout plus one module, so a second pyproject.toml (which cannot reach a package above its own folder)
would only add a copy step. A wheel is a zip with a `.dist-info` of four files (PEP 427 / the binary
distribution format): METADATA, WHEEL, entry_points.txt and RECORD (every file's sha256 and size, which
pip checks on install). No dependencies: torch is the environment's own, never pulled in by verify.

The console script enters through `apex_verify_entry` (a unique top-level name), which refuses to run a
`verify` package that is not ours: PyPI's unrelated `verify` installs the same import name.
Reproducible as the zipapp is: sorted members, one fixed timestamp.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import re
import zipfile
from pathlib import Path

from toolchain.image.verify_zipapp import FIXED_DATE, PACKAGE, REPO_ROOT, SUFFIXES
from verify.runtime import atomic, input_files

DISTRIBUTION = "apex-verify"
ENTRY_MODULE = "apex_verify_entry"  # apex_verify_entry.py at the checkout's root
SCRIPT = "apex-verify"
TAG = "py3-none-any"
SUMMARY = (
    "Does this NVIDIA Apex install really work on this GPU, and if not, why not (standard library + torch)"
)
_VERSION = re.compile(r'^__version__ = "(?P<version>[^"]+)"$', re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class VerifyWheel:
    path: Path
    sha256: str
    size_bytes: int
    files: int  # archive members, the .dist-info included


def version(source_root: Path = REPO_ROOT) -> str:
    """verify/__init__.py's __version__, read as text: the wheel is built from source_root, not from the
    verify this process imported."""
    found = _VERSION.search(input_files.read_shipped_text(source_root / PACKAGE / "__init__.py"))
    if not found:
        raise ValueError(f'{source_root / PACKAGE / "__init__.py"} has no __version__ = "..." line')
    return found["version"]


def file_name(wheel_version: str) -> str:
    return f"{DISTRIBUTION.replace('-', '_')}-{wheel_version}-{TAG}.whl"


def _dist_info(wheel_version: str) -> dict[str, str]:
    return {
        "METADATA": (
            f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {wheel_version}\nSummary: {SUMMARY}\n"
            "Requires-Python: >=3.10\nLicense: BSD-3-Clause\n"
        ),
        "WHEEL": f"Wheel-Version: 1.0\nGenerator: apex-toolchain build.py verify-wheel\nRoot-Is-Purelib: true\n"
        f"Tag: {TAG}\n",
        "entry_points.txt": f"[console_scripts]\n{SCRIPT} = {ENTRY_MODULE}:main\n",
        "top_level.txt": f"{ENTRY_MODULE}\n{PACKAGE}\n",
    }


def _members(source_root: Path) -> dict[str, bytes]:
    package = source_root / PACKAGE
    files = sorted(
        p for p in package.rglob("*") if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
    )
    members = {
        p.relative_to(source_root).as_posix(): input_files.read_bytes(p, input_files.SHIPPED) for p in files
    }
    members[f"{ENTRY_MODULE}.py"] = input_files.read_bytes(
        source_root / f"{ENTRY_MODULE}.py", input_files.SHIPPED
    )
    return members


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(out_dir: Path | str, *, source_root: Path = REPO_ROOT) -> VerifyWheel:
    """Write the wheel into the folder `out_dir` (made if missing) through the one safe write path."""
    wheel_version = version(source_root)
    info = f"{DISTRIBUTION.replace('-', '_')}-{wheel_version}.dist-info"
    members = _members(source_root)
    members.update({f"{info}/{name}": text.encode() for name, text in _dist_info(wheel_version).items()})
    record = [_record_line(name, data) for name, data in sorted(members.items())]
    members[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    path = Path(out_dir) / file_name(wheel_version)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        # the .dist-info last, RECORD at the very end: the order the wheel spec recommends
        for name in sorted(members, key=lambda n: (n.startswith(info), n.endswith("/RECORD"), n)):
            member = zipfile.ZipInfo(name, date_time=FIXED_DATE)
            member.compress_type = zipfile.ZIP_DEFLATED
            member.external_attr = 0o644 << 16
            archive.writestr(member, members[name])
    data = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_in_tree(path.parent, path.name, data)  # --out is a folder: a link in it is refused
    return VerifyWheel(path, hashlib.sha256(data).hexdigest(), len(data), len(members))
