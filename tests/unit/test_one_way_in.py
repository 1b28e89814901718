"""One way in: every byte build.py, verify and the scripts read from a file, a zip or tar member, a URL or a
registry answer goes through verify/runtime/input_files.py (the bounded reader). This reads the source of
build.py, toolchain/, verify/, scripts/ and cluster/ and fails on a direct open, read, unzip or parse outside it.

What counts as a direct read (tests below show each is caught):
- `open(...)`, `io.open(...)`, `os.fdopen(...)`, `Path.open(...)` in a read mode; `os.open(..., O_RDONLY)`
  of something that is not a folder;
- `.read_text()` / `.read_bytes()` on anything but the reader's own modules;
- `zipfile.ZipFile(...)` and `tarfile.open(...)` for reading, `urlopen(...)`, `json.load(s)`, `tomllib.load`.
Writing (a zip made, a log appended) is the safe writer's matter, not this rule's. Parsing TOML text that
was read through the reader (`tomllib.loads`) is allowed.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import REPO

# The reader itself, the writer (which compares a page's bytes before replacing it), and the named routes
# for data the project ships or that never comes from a file, each with why it is not a file read
ALLOWED = {
    "verify/runtime/input_files.py": "the bounded reader itself",
    "verify/runtime/atomic.py": "the safe writer: it reads back only what it is about to replace, without links",
    "verify/runtime/resources.py": "verify's own shipped data files, through importlib.resources (also in a zipapp)",
    "verify/layers/import_probe.py": "the probe child's request on its stdin from its parent; it runs as source "
    "text without the verify package, so it cannot import the reader",
    "toolchain/builder/unit_runner.py": "ninja runs it by path in the build's Python, where the project is not "
    "installed (a bare-metal build), so it cannot import the reader; its one read is bounded by hand",
    "verify/runtime/json_lines_child.py": "a child process's pipe (a stream, meant), read line by line, each "
    "line bounded by input_files.CHILD_MESSAGE and parsed through the reader",
}
_OWN_READERS = {
    "input_files",
    "resources",
    "verify_report",
    "reader",
}  # modules whose read_* take bytes/names
_OPENERS_OF_THEIR_OWN = {"os", "tarfile", "zipfile", "io", "webbrowser"}


def _mode(call: ast.Call, position: int) -> object:
    for keyword in call.keywords:
        if keyword.arg == "mode":
            return keyword.value.value if isinstance(keyword.value, ast.Constant) else "?"
    if len(call.args) > position:
        arg = call.args[position]
        return arg.value if isinstance(arg, ast.Constant) else "?"
    return "r"


def _reads(mode: object) -> bool:
    return isinstance(mode, str) and not any(c in mode for c in "wax+")


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def _what(call: ast.Call) -> str | None:
    func, name = call.func, _dotted(call.func)
    receiver = _dotted(func.value).split(".")[0] if isinstance(func, ast.Attribute) else ""
    if name in ("open", "io.open", "os.fdopen") and _reads(_mode(call, 1)):
        return f"{name}() for reading"
    if name == "os.open" and "O_RDONLY" in ast.unparse(call) and "O_DIRECTORY" not in ast.unparse(call):
        return "os.open(O_RDONLY)"
    if (
        isinstance(func, ast.Attribute)
        and func.attr in ("read_text", "read_bytes")
        and receiver not in _OWN_READERS
    ):
        return f".{func.attr}()"
    if (
        isinstance(func, ast.Attribute)
        and func.attr == "open"
        and receiver not in _OPENERS_OF_THEIR_OWN
        and _reads(_mode(call, 0))
    ):
        return ".open() for reading"
    if name == "zipfile.ZipFile" and _reads(_mode(call, 1)):
        return "zipfile.ZipFile() for reading"
    if name == "tarfile.open" and _reads(_mode(call, 1)):
        return "tarfile.open() for reading"
    if name.endswith("urlopen"):
        return "urlopen()"
    if name in ("json.load", "json.loads", "tomllib.load"):
        return f"{name}()"
    return None


def direct_reads(source: str) -> list[tuple[int, str]]:
    """(line, what) of every direct read in a module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            what = _what(node)
            if what:
                found.append((node.lineno, what))
    return sorted(found)


def _sources() -> list[Path]:
    files = [REPO / "build.py"]
    for top in ("toolchain", "verify", "scripts", "cluster"):
        files += sorted((REPO / top).rglob("*.py"))
    return files


def findings(allowed: dict[str, str], check: Callable[[str], list[tuple[int, str]]]) -> list[str]:
    """`file:line: what` for each hit of `check` in the project's sources outside the `allowed` files."""
    found = []
    for path in _sources():
        relative = path.relative_to(REPO).as_posix()
        if relative not in allowed:
            found += [f"{relative}:{line}: {what}" for line, what in check(path.read_text(encoding="utf-8"))]
    return found


def test_nothing_outside_the_reader_opens_reads_or_unzips_directly() -> None:
    found = findings(ALLOWED, direct_reads)
    assert not found, (
        "read through verify/runtime/input_files.py (read_bytes/read_text/read_json, open_zip, tar_files, "
        "read_stream, open_url, read_system_text, read_shipped_text, read_log_tail):\n" + "\n".join(found)
    )


def test_every_allowed_file_exists_and_still_needs_its_place() -> None:
    for relative in ALLOWED:
        path = REPO / relative
        assert path.is_file(), relative
        assert direct_reads(path.read_text(encoding="utf-8")), f"{relative} reads nothing directly: drop it"


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("open(p)\n", "open() for reading"),
        ("open(p, 'rb')\n", "open() for reading"),
        ("with path.open() as f: pass\n", ".open() for reading"),
        ("Path(p).read_text()\n", ".read_text()"),
        ("(d / 'x').read_bytes()\n", ".read_bytes()"),
        ("os.fdopen(fd, 'rb')\n", "os.fdopen() for reading"),
        ("os.open(p, os.O_RDONLY)\n", "os.open(O_RDONLY)"),
        ("zipfile.ZipFile(w)\n", "zipfile.ZipFile() for reading"),
        ("tarfile.open(fileobj=b)\n", "tarfile.open() for reading"),
        ("urllib.request.urlopen(u, timeout=3)\n", "urlopen()"),
        ("json.loads(raw)\n", "json.loads()"),
        ("json.load(handle)\n", "json.load()"),
    ],
)
def test_the_rule_catches_each_kind_of_direct_read(source: str, what: str) -> None:
    assert direct_reads(source) == [(1, what)]


@pytest.mark.parametrize(
    "source",
    [
        "open(p, 'w')\n",
        "open(p, 'a', encoding='utf-8')\n",
        "zipfile.ZipFile(p, 'w')\n",
        "tarfile.open(fileobj=b, mode='w')\n",
        "os.open(p, os.O_RDONLY | os.O_DIRECTORY)\n",
        "input_files.read_bytes(p, input_files.WHEEL)\n",
        "tomllib.loads(input_files.read_shipped_text(p))\n",
        "resources.read_text('data/x.json')\n",
    ],
)
def test_writes_and_reads_through_the_reader_are_not_direct_reads(source: str) -> None:
    assert direct_reads(source) == []
