"""Zip members through the bounded reader (verify.runtime.input_files.open_zip) and pip's rules for the index
(toolchain/index/pip_rules.py), on real zip files: a member's inflated size is refused from the central
directory before it is inflated, a directory that lies about it cannot make it larger, a FIFO or a link to
/dev/zero as the wheel is refused before a byte is read, and a wheel pip would not install or find is named."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import resource
import struct
import time
import zipfile
from pathlib import Path

import pytest

from toolchain.index import pip_rules
from verify.runtime import input_files

SMALL_MEMBER = dataclasses.replace(input_files.WHEEL_METADATA, max_bytes=1 << 20)


def _bomb(path: Path, inflated: int) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("apex-0.1.dist-info/METADATA", b"\0" * inflated)
    return path


def test_a_member_that_inflates_past_its_limit_is_refused_before_inflating(tmp_path: Path) -> None:
    wheel = _bomb(tmp_path / "bomb.whl", 64 << 20)  # 64 MiB of zeros: about 64 KB on disk
    assert wheel.stat().st_size < 1 << 20
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with input_files.open_zip(wheel) as archive, pytest.raises(input_files.InputFileError) as caught:
        archive.read("apex-0.1.dist-info/METADATA", SMALL_MEMBER)
    assert caught.value.reason == "too_large" and "inflates to 67108864 bytes" in caught.value.problem
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grew_kib < 32 << 10, f"the refusal inflated the member ({grew_kib} KiB more at peak)"


def _lie_about_size(path: Path, member: str, size: int) -> None:
    """Rewrite the central directory's and the local header's uncompressed size of `member`."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    struct.pack_into("<I", data, info.header_offset + 22, size)  # local file header: uncompressed size
    central = data.rfind(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, size)  # central directory entry: uncompressed size
    path.write_bytes(bytes(data))


def test_a_directory_that_understates_a_member_cannot_make_it_larger(tmp_path: Path) -> None:
    wheel = _bomb(tmp_path / "liar.whl", 8 << 20)
    _lie_about_size(wheel, "apex-0.1.dist-info/METADATA", 100)
    with input_files.open_zip(wheel) as archive, pytest.raises(input_files.InputFileError) as caught:
        archive.read("apex-0.1.dist-info/METADATA", SMALL_MEMBER)
    assert caught.value.reason == "bad_zip"  # 100 bytes read, then the CRC does not match: never 8 MiB


@pytest.mark.parametrize("kind", ["fifo", "zero", "folder", "text", "cut"])
def test_what_is_not_a_zip_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    wheel = tmp_path / "apex-0.1-py3-none-any.whl"
    if kind == "fifo":
        os.mkfifo(wheel)  # no writer: opening it to read would wait forever
    elif kind == "zero":
        wheel.symlink_to("/dev/zero")
    elif kind == "folder":
        wheel.mkdir()
    elif kind == "text":
        wheel.write_text("not a zip")
    else:
        _bomb(wheel, 1000)
        wheel.write_bytes(wheel.read_bytes()[:-30])
    start = time.monotonic()
    with pytest.raises(input_files.InputFileError) as caught:
        input_files.open_zip(wheel)
    assert time.monotonic() - start < 5
    assert caught.value.reason in ("not_regular", "bad_zip") and "\n" not in str(caught.value)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(path: Path, members: dict[str, bytes], record: dict[str, bytes] | None = None) -> Path:
    """A wheel whose RECORD lists `record` (default: every member, with its true hash)."""
    listed = members if record is None else record
    rows = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in listed.items())
    rows += "apex-0.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        archive.writestr("apex-0.1.dist-info/RECORD", rows)
    return path


GOOD = {"apex/__init__.py": b"", "apex-0.1.dist-info/METADATA": b"Name: apex\nVersion: 0.1\n"}


def _members(path: Path) -> list[str]:
    with input_files.open_zip(path) as archive:
        return pip_rules.member_problems(archive, "apex-0.1.dist-info")


def test_a_whole_wheel_has_no_member_problems(tmp_path: Path) -> None:
    assert _members(_wheel(tmp_path / "w.whl", GOOD)) == []


@pytest.mark.parametrize(
    ("extra", "record", "said"),
    [
        ({"../evil.py": b"x"}, None, "outside the wheel's root"),
        ({"/etc/evil": b"x"}, None, "outside the wheel's root"),
        ({"apex/../../evil.py": b"x"}, None, "outside the wheel's root"),
        ({"apex\\evil.py": b"x"}, None, "outside the wheel's root"),
        ({"apex/hidden.py": b"x"}, GOOD, "not listed in its RECORD"),
        ({}, {**GOOD, "apex/gone.py": b"x"}, "lists files it does not hold"),
        ({}, {**GOOD, "apex/__init__.py": b"other bytes"}, "not what its RECORD says"),
    ],
)
def test_members_pip_would_refuse_or_never_uninstall_are_named(
    tmp_path: Path, extra: dict[str, bytes], record: dict[str, bytes] | None, said: str
) -> None:
    problems = _members(_wheel(tmp_path / "w.whl", {**GOOD, **extra}, record))
    assert len(problems) == 1 and said in problems[0] and "build.py wheel" in problems[0]


@pytest.mark.parametrize(
    ("file_name", "metadata_name", "ok"),
    [
        ("apex", "apex", True),
        ("Apex", "APEX", True),  # PEP 503 normalises case and separators
        ("apex", "apex_toolkit", False),  # another distribution: pip never takes it from apex's page
        ("apex_x", "apex", False),
        ("apex", None, False),
    ],
)
def test_the_distribution_name_must_normalise_to_the_page(
    file_name: str, metadata_name: str | None, ok: bool
) -> None:
    assert (pip_rules.name_problems("apex", file_name, metadata_name) == []) is ok


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("0.1+g6424da3.cu130.torch2.11", True),
        ("0.1", True),
        ("0.1+g6424da3.cu١٣٠", False),  # non-ASCII digits
        ("0.1.x-y", False),
        ("latest", False),
    ],
)
def test_versions_are_pep_440_in_ascii(version: str, ok: bool) -> None:
    assert (pip_rules.version_problems(version) == []) is ok
