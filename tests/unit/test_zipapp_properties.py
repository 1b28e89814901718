"""Property test for `build.py zipapp --out`, in-process, on test_cli_properties' contract: generated
--out values (odd characters, '', a folder, a symlink to a file, a dangling link, a FIFO-free tree) end in
exit 0 with a runnable zip at the path's final target, or exit 2 with one `error:` line; nothing is
written outside the example's temp dir and a symlink stays a symlink."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_cli_properties import (
    PROPERTY,
    _assert_contract,
    _call,
    _keeps_checkout,
    _sandbox,
    odd_text,
)
from toolchain import cli as toolchain_cli

pytestmark = pytest.mark.property
SEEN: set[int] = set()


def _stays_inside(value: str) -> bool:  # the run's folder is sandbox/work: ".." may climb one level, no more
    return not os.path.isabs(value) and not os.path.normpath(os.path.join("work", value)).startswith("..")


out_value = st.one_of(
    odd_text,
    st.sampled_from(
        [
            "",
            " ",
            ".",
            "..",
            "dir",
            "dir/",
            "link",
            "dangling",
            "a/b/c.pyz",
            "file.pyz",
            "dir/verify.pyz",
            "-x",
            "--help",
        ]
    ),
).filter(_stays_inside)


def test_every_zipapp_out_is_written_or_refused() -> None:
    _keeps_checkout(_examples)
    assert SEEN == {0, 2}


@settings(PROPERTY, max_examples=40)
@given(out_value)
def _examples(value: str) -> None:
    value = value.replace("\x00", "")
    with _sandbox() as root:
        tmp = root / "work"
        tmp.mkdir()
        os.chdir(tmp)
        (tmp / "dir").mkdir()
        (tmp / "target.pyz").write_text("old")
        (tmp / "link").symlink_to("target.pyz")
        (tmp / "dangling").symlink_to("gone/none.pyz")
        code, stderr = _call(toolchain_cli.main, ["zipapp", "--out", value])
        _assert_contract(code, stderr, usage_prefix="error: ")
        SEEN.add(code)
        assert (tmp / "link").is_symlink() and (tmp / "dangling").is_symlink()
        for path in root.rglob("*"):
            assert root in path.resolve().parents, path
        if code == 0:
            given = tmp / value
            written = given / "verify.pyz" if given.is_dir() else Path(os.path.realpath(given))
            assert zipfile.is_zipfile(written) and os.access(written, os.X_OK), written
