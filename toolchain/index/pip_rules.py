"""What pip (and uv) require of a wheel before they find it on a page and install it, checked before the index
publishes one: a page lists only what a resolver would take from it.

- the distribution's name, from the file name and from METADATA's `Name:`, normalised per PEP 503
  (`re.sub(r"[-_.]+", "-", name).lower()`), is the page's project (`apex`): pip ignores a file of another
  project on a page, so it would be listed and never installed;
- the version (file name and METADATA) is a PEP 440 version, in ASCII (pip skips a file whose version it
  cannot parse);
- every member stays inside the wheel's root (no absolute name, no `..`, no backslash or NUL: pip refuses to
  install such a wheel, older installers wrote outside the environment), and every file member is listed in
  its RECORD with the hash and size it has, and every RECORD row names a member (pip checks RECORD on
  install; a member outside it is a file nothing uninstalls).

Each rule returns the problems it found, as the rest of wheel_check does, so a refusal names all of them.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re

from packaging.version import InvalidVersion, Version

from verify.runtime import input_files

_SEPARATORS = re.compile(r"[-_.]+")
# what the RECORD itself may lack a hash for (PEP 376/427): RECORD, and the signatures of RECORD
_UNHASHED = ("RECORD", "RECORD.jws", "RECORD.p7s")


def normalised(name: str) -> str:
    """PEP 503's rule: runs of -, _ and . become one -, lower case."""
    return _SEPARATORS.sub("-", name).lower()


def name_problems(project: str, file_name: str, metadata_name: str | None) -> list[str]:
    problems = []
    for where, name in (("file name", file_name), ("METADATA", metadata_name)):
        if name is None:
            problems.append(f"its METADATA has no Name: header; {_FIX}")
        elif normalised(name) != project:
            problems.append(
                f"its {where} names the distribution {name!r} ({normalised(name)!r} per PEP 503), not "
                f"{project!r}: pip would not take it from the {project} page"
            )
    return problems


def version_problems(file_version: str) -> list[str]:
    if not file_version.isascii():
        return [f"its version {file_version!r} has non-ASCII characters; a PEP 440 version is ASCII"]
    try:
        Version(file_version)
    except InvalidVersion:
        return [f"its version {file_version!r} is not a PEP 440 version: pip skips the file"]
    return []


def member_problems(archive: input_files.ZipInput, dist_info: str) -> list[str]:
    """Members outside the root, and disagreements between the members and RECORD (hashes included: each
    member is read through the bounded reader)."""
    names = [info.filename for info in archive.infos()]
    outside = [n for n in names if _outside(n)]
    if outside:
        shown = ", ".join(repr(n) for n in outside[:5])
        return [f"it has members outside the wheel's root ({shown}); pip refuses to install it; {_FIX}"]
    record_name = f"{dist_info}/RECORD"
    if record_name not in names:
        return [f"it has no {record_name}; {_FIX}"]
    rows = _record_rows(archive.read(record_name, input_files.WHEEL_METADATA))
    if rows is None:
        return [f"its {record_name} is not a CSV of path,hash,size rows; {_FIX}"]
    problems = _listing_problems(archive, rows) + _hash_problems(archive, rows, dist_info)
    return [f"{p}; {_FIX}" for p in problems]


def _listing_problems(archive: input_files.ZipInput, rows: dict[str, tuple[str, str]]) -> list[str]:
    files = {i.filename for i in archive.infos() if not i.is_dir()}
    problems = []
    unlisted = sorted(files - set(rows))
    if unlisted:
        problems.append(f"members not listed in its RECORD: {', '.join(map(repr, unlisted[:5]))}")
    missing = sorted(set(rows) - files)
    if missing:
        problems.append(f"its RECORD lists files it does not hold: {', '.join(map(repr, missing[:5]))}")
    return problems


def _hash_problems(
    archive: input_files.ZipInput, rows: dict[str, tuple[str, str]], dist_info: str
) -> list[str]:
    wrong = []
    for info in archive.infos():
        if info.is_dir() or info.filename not in rows:
            continue
        hash_value, size = rows[info.filename]
        if info.filename in {f"{dist_info}/{n}" for n in _UNHASHED}:
            continue
        if not hash_value:
            wrong.append(f"{info.filename!r} (no hash)")
            continue
        data = archive.read(info, input_files.WHEEL_MEMBER)
        if hash_value != _record_hash(hash_value.partition("=")[0], data) or (
            size and size != str(len(data))
        ):
            wrong.append(repr(info.filename))
    if wrong:
        return [f"members whose bytes are not what its RECORD says: {', '.join(wrong[:5])}"]
    return []


_FIX = "rebuild it with `build.py wheel`, which writes every member and its RECORD row"


def _outside(name: str) -> bool:
    parts = name.split("/")
    return name.startswith("/") or "\\" in name or "\0" in name or ".." in parts or ":" in parts[0]


def _record_rows(raw: bytes) -> dict[str, tuple[str, str]] | None:
    try:
        text = raw.decode("utf-8")
        rows = {}
        for row in csv.reader(io.StringIO(text)):
            if not row:
                continue
            if len(row) != 3:
                return None
            rows[row[0]] = (row[1], row[2])
        return rows
    except (UnicodeDecodeError, csv.Error):
        return None


def _record_hash(algorithm: str, data: bytes) -> str | None:
    """RECORD's `ALGO=urlsafe-b64-digest` of data; None for an algorithm pip does not know either."""
    if algorithm not in hashlib.algorithms_guaranteed or algorithm.startswith("shake"):
        return None
    digest = hashlib.new(algorithm, data).digest()
    return f"{algorithm}=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
