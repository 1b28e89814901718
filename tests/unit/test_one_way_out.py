"""One way out: every byte build.py, verify and the scripts write to a file goes through
verify/runtime/atomic.py (the safe writer: a report path the user names by its table; a tree the tool owns,
--out, --logs, the index, by write_in_tree, move_in_tree and open_append_in_tree, which never follow a link
there). This reads the source of build.py, toolchain/, verify/, scripts/ and cluster/ and fails on a direct
write outside it. test_one_way_in.py is the rule for reads; a write mode is not its matter, which is how an
`open(LOG, "a")` in the run loop went unflagged.

What counts as a direct write (tests below show each is caught):
- `open(...)`, `io.open(...)`, `Path.open(...)` in a mode with `w`, `a`, `x` or `+`;
- `os.open(...)` with `O_WRONLY`, `O_RDWR`, `O_CREAT`, `O_APPEND` or `O_TRUNC`;
- `.write_text()` / `.write_bytes()` on anything but the `atomic` module.
`os.fdopen(fd, "a")` is not one: it opens no path, only wraps a descriptor (one the safe writer opened).
"""

from __future__ import annotations

import ast

import pytest

from tests.support import REPO
from tests.unit.test_one_way_in import _dotted, _mode, findings

# The writer itself, and the one place that cannot import it, with why
ALLOWED = {
    "verify/runtime/atomic.py": "the safe writer itself",
    "toolchain/builder/unit_runner.py": "ninja runs it by path in the build's Python, where the project is not "
    "installed (a bare-metal build), so it cannot import the writer; it appends to the times file that "
    "atomic.write_in_tree made empty in --out, opened with O_NOFOLLOW",
    "verify/runtime/console_streams.py": "/dev/null opened read-write onto a standard descriptor found closed at "
    "startup (0, 1 or 2), so a child's output has somewhere to go; no file is written",
}
_OPENERS_OF_THEIR_OWN = {"os", "tarfile", "zipfile", "io", "webbrowser", "gzip", "bz2", "lzma"}
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC")


def _writes(mode: object) -> bool:
    return isinstance(mode, str) and any(c in mode for c in "wax+")


def _what(call: ast.Call, names: dict[str, str]) -> str | None:
    """`names`: the module's `NAME = ...` assignments, unparsed (flags built before `os.open(p, flags)`)."""
    func, name = call.func, _dotted(call.func)
    receiver = _dotted(func.value).split(".")[0] if isinstance(func, ast.Attribute) else ""
    if name in ("open", "io.open") and _writes(_mode(call, 1)):
        return f"{name}() for writing"
    if name == "os.open" and len(call.args) > 1:
        flags = call.args[1]
        text = names.get(flags.id, "") if isinstance(flags, ast.Name) else ast.unparse(flags)
        if any(flag in text for flag in _WRITE_FLAGS):
            return "os.open() for writing"
    if (
        isinstance(func, ast.Attribute)
        and func.attr in ("write_text", "write_bytes")
        and receiver != "atomic"
    ):
        return f".{func.attr}()"
    if (
        isinstance(func, ast.Attribute)
        and func.attr == "open"
        and receiver not in _OPENERS_OF_THEIR_OWN
        and _writes(_mode(call, 0))
    ):
        return ".open() for writing"
    return None


def direct_writes(source: str) -> list[tuple[int, str]]:
    """(line, what) of every direct write in a module's source."""
    tree = ast.parse(source)
    names = {
        target.id: ast.unparse(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            what = _what(node, names)
            if what:
                found.append((node.lineno, what))
    return sorted(found)


def test_nothing_outside_the_writer_writes_a_file_directly() -> None:
    found = findings(ALLOWED, direct_writes)
    assert not found, (
        "write through verify/runtime/atomic.py (write_bytes/write_text/write_json for a path the user names; "
        "write_in_tree, move_in_tree, open_append_in_tree for --out, --logs, the index):\n" + "\n".join(found)
    )


def test_every_allowed_file_exists_and_still_needs_its_place() -> None:
    for relative in ALLOWED:
        path = REPO / relative
        assert path.is_file(), relative
        assert direct_writes(path.read_text(encoding="utf-8")), f"{relative} writes nothing directly: drop it"


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("open(log_dir / '.lock', 'a')\n", "open() for writing"),
        ("open(p, 'w', encoding='utf-8')\n", "open() for writing"),
        ("open(p, mode='xb')\n", "open() for writing"),
        ("open(p, 'r+')\n", "open() for writing"),
        ("io.open(p, 'ab')\n", "io.open() for writing"),
        ("with path.open('a') as f: pass\n", ".open() for writing"),
        ("Path(p).write_text('')\n", ".write_text()"),
        ("(d / 'x').write_bytes(b'')\n", ".write_bytes()"),
        ("os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)\n", "os.open() for writing"),
        ("os.open(p, os.O_RDWR)\n", "os.open() for writing"),
        ("flags = os.O_WRONLY | os.O_APPEND\nos.open(p, flags)\n", "os.open() for writing"),
    ],
)
def test_the_rule_catches_each_kind_of_direct_write(source: str, what: str) -> None:
    assert direct_writes(source) == [(source.count("\n"), what)]


@pytest.mark.parametrize(
    "source",
    [
        "open(p)\n",
        "open(p, 'rb')\n",
        "os.fdopen(atomic.open_append_in_tree(root, 'x.log'), 'a')\n",
        "os.open(p, os.O_RDONLY | os.O_DIRECTORY)\n",
        "atomic.write_text(p, 'x')\n",
        "atomic.write_in_tree(root, 'a/b.json', b'{}')\n",
        "zipfile.ZipFile(p, 'w')\n",
        "tarfile.open(fileobj=b, mode='w')\n",
    ],
)
def test_reads_and_writes_through_the_writer_are_not_direct_writes(source: str) -> None:
    assert direct_writes(source) == []
