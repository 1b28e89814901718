"""The stacks an Apex index has: its stacks.json (toolchain/index/pages.py's top_json: `{"index_version":
1, "stacks": [{"stack", "simple", "wheels", "verify", ...}]}`), fetched through the project's bounded
reader and checked for the shape this command reads, so a wrong page is one line, not a KeyError."""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from verify.domain import stack_name
from verify.install.problem import InstallProblem
from verify.runtime import exit_codes, input_files

STACKS_FILE = "stacks.json"
TIMEOUT_S = 30.0  # a static file: a healthy index answers in well under a second


@dataclasses.dataclass(frozen=True)
class IndexStack:
    name: str  # torch2.11-cu130
    simple_url: str  # absolute: INDEX/torch2.11-cu130/simple/
    wheels: tuple[str, ...]  # file names
    verify: tuple[str, ...]  # the static gate's verdicts (PASS)


def root_url(index: str) -> str:
    """The index root with one trailing slash; InstallProblem (exit 2) for what is not an index URL."""
    try:
        parts = urllib.parse.urlsplit(index)
        usable = parts.scheme in input_files.URL_SCHEMES and (parts.scheme == "file" or bool(parts.hostname))
    except ValueError:  # an unclosed IPv6 bracket, say
        usable = False
    if not usable:
        raise InstallProblem(
            f"--index {index!r}: not an http://, https:// or file:// URL; pass the index root, the folder"
            f" holding {STACKS_FILE} (e.g. https://HOST/apex/ or file:///srv/apex-index/)",
            exit_codes.USAGE,
        )
    return index.rstrip("/") + "/"


def read(index: str) -> list[IndexStack]:
    root = root_url(index)
    url = urllib.parse.urljoin(root, STACKS_FILE)
    try:
        data = input_files.decode_json(
            input_files.read_url(url, input_files.INDEX_STACKS, timeout_s=TIMEOUT_S),
            url,
            input_files.INDEX_STACKS,
        )
    except input_files.InputFileError as exc:
        code = exit_codes.USAGE if exc.reason == "bad_url" else exit_codes.ENVIRONMENT
        raise InstallProblem(f"--index {index}: {exc}", code) from None
    return [_stack(row, i, root, url) for i, row in enumerate(_rows(data, url))]


def _bad(url: str, what: str) -> InstallProblem:
    return InstallProblem(
        f"{url}: not the stack list `build.py index` writes ({what}); point --index at an index root that"
        " build.py index wrote, or rewrite it with `python build.py index WHEELS --index DIR`"
    )


def _rows(data: Any, url: str) -> list[Any]:
    if not isinstance(data, dict) or not isinstance(data.get("stacks"), list):
        raise _bad(url, "no `stacks` list at its top")
    return data["stacks"]


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _stack(row: Any, i: int, root: str, url: str) -> IndexStack:
    if not isinstance(row, dict):
        raise _bad(url, f"stacks[{i}] is not an object")
    name, simple = row.get("stack"), row.get("simple")
    if not isinstance(name, str) or stack_name.parse(name) is None:
        raise _bad(url, f"stacks[{i}].stack is not a stack name like torch2.11-cu130")
    if not isinstance(simple, str) or not simple:
        raise _bad(url, f"stacks[{i}].simple is not a path")
    if not _names(row.get("wheels")) or not _names(row.get("verify", [])):
        raise _bad(url, f"stacks[{i}].wheels or .verify is not a list of names")
    return IndexStack(
        name, urllib.parse.urljoin(root, simple), tuple(row["wheels"]), tuple(row.get("verify", []))
    )
