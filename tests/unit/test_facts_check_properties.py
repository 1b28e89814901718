"""Property tests for `build.py facts check`, in-process, on the contract of test_cli_properties: exit
0-3, no traceback, one `error: ...` line for a usage error, nothing written outside the example's temp
dir. Three generators: --index values, compat.toml files with one value replaced, and the stored index
answers (tests/fixtures/pypi-2026-12-01) with one part of the torch JSON or one METADATA replaced. No
example reaches the network: an http(s) index is 127.0.0.1:9 (refused at once) or file://."""

from __future__ import annotations

import json
import re
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import FROZEN_FACTS, REPO
from tests.unit.test_cli_properties import (
    PROPERTY,
    _assert_contract,
    _call,
    _files_under,
    _keeps_checkout,
    _sandbox,
    odd_text,
    toml_text,
    toml_value,
)
from toolchain import cli as toolchain_cli

# facts check's sources beyond PyPI at a closed port: refused at once, never the network
_CLOSED_SOURCES = [
    a for o in ("--registry", "--torch-index", "--apex-upstream") for a in (o, "http://127.0.0.1:9")
]

pytestmark = pytest.mark.property

INDEX = REPO / "tests" / "fixtures" / "pypi-2026-12-01"
FACT_LINES = [i for i, line in enumerate(FROZEN_FACTS.read_text().splitlines()) if re.match(r"^\w+ = ", line)]


SEEN: dict[str, set[int]] = {
    "index": set(),
    "facts": set(),
    "answer": set(),
}  # exit codes, so no test is vacuous


def _offline(text: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(text)
        return parts.scheme not in ("http", "https") or parts.hostname in (None, "127.0.0.1")
    except ValueError:
        return True


index_value = st.one_of(
    odd_text.filter(_offline),
    st.sampled_from(
        [
            "",
            " ",
            "pypi.org",
            "javascript:alert(1)",
            "data:,x",
            "ftp://x",
            "http://[::1",
            "http://[:::::]",
            "http://127.0.0.1:99999",
            "https:///x",
            "file://",
            "file:///",
            "file:///dev/zero",
            "file:///proc",
            "file://h/x",
            "http://127.0.0.1:9",
            "http://127.0.0.1:9/é",
            "%00",
            "file:///nonexistent",
        ]
    ),
    odd_text.map(lambda s: "http://127.0.0.1:9/" + s),
    odd_text.map(lambda s: "file:///" + s),
)


def test_every_index_value_is_read_or_refused() -> None:
    _keeps_checkout(_index_examples)
    assert SEEN["index"] == {2, 3}


@settings(PROPERTY, max_examples=80)
@given(index_value)
def _index_examples(index: str) -> None:
    with _sandbox() as tmp:
        code, stderr = _call(
            toolchain_cli.main,
            [
                "facts",
                "check",
                *_CLOSED_SOURCES,
                "--index",
                index.replace("\x00", ""),
                "--facts",
                str(FROZEN_FACTS),
            ],
        )
        _assert_contract(code, stderr, usage_prefix="error: ")
        assert code in (2, 3), (index, code, stderr)  # nothing here is a PyPI
        SEEN["index"].add(code)
        assert _files_under(tmp) == set()


def test_every_facts_file_is_read_or_refused() -> None:
    _keeps_checkout(_facts_examples)
    assert SEEN["facts"] >= {1, 2}


@settings(PROPERTY, max_examples=80)
@given(st.lists(st.tuples(st.sampled_from(FACT_LINES), toml_value), min_size=1, max_size=3))
def _facts_examples(changes: list[tuple[int, Any]]) -> None:
    lines = FROZEN_FACTS.read_text().splitlines()
    for number, value in changes:
        key = lines[number].split(" = ", 1)[0]
        lines[number] = f"{key} = {toml_text(value)}"
    with _sandbox() as tmp:
        path = tmp / "compat.toml"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        code, stderr = _call(
            toolchain_cli.main,
            ["facts", "check", *_CLOSED_SOURCES, "--index", INDEX.as_uri(), "--facts", str(path)],
        )
        _assert_contract(code, stderr, usage_prefix="error: ")
        assert code in (0, 1, 2), (code, stderr)  # a stored index is always readable: never exit 3
        SEEN["facts"].add(code)
        assert _files_under(tmp) == {Path("compat.toml")}


TORCH_PATHS = [
    ("info",),
    ("info", "requires_dist"),
    ("info", "version"),
    ("releases",),
    ("releases", "2.15.0"),
    ("releases", "2.15.0", 0),
    ("releases", "2.14.0", 0, "filename"),
    ("releases", "2.11.0", 3, "url"),
    ("releases", "2.11.0", 0, "yanked"),
    ("releases", "2.6.0", 1, "upload_time"),
    ("releases", "2.99.0"),
]
json_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**20), 10**20),
        odd_text,
        st.floats(allow_nan=False, allow_infinity=False),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["filename", "url", "x"]), inner, max_size=3),
    ),
    max_leaves=6,
)
METADATA = sorted(p.name for p in (INDEX / "packages").glob("*.metadata"))


def test_every_index_answer_is_read_or_refused() -> None:
    _keeps_checkout(_answer_examples)
    assert SEEN["answer"] >= {1, 3}


def _set(document: Any, path: tuple, value: Any) -> None:
    for step in path[:-1]:
        document = document[step]
    document[path[-1]] = value


@settings(PROPERTY, max_examples=60)
@given(
    st.one_of(
        st.tuples(st.just("json"), st.sampled_from(TORCH_PATHS), json_value),
        st.tuples(
            st.just("metadata"),
            st.sampled_from(METADATA),
            st.one_of(
                st.binary(max_size=300),
                odd_text.map(lambda s: f"Metadata-Version: 2.4\nName: torch\nRequires-Dist: {s}\n"),
            ),
        ),
    )
)
def _answer_examples(case: tuple) -> None:
    kind, where, value = case
    with _sandbox() as tmp:
        mirror = tmp / "mirror"
        shutil.copytree(INDEX, mirror, ignore=shutil.ignore_patterns("*.py", "*.md"))
        if kind == "json":
            data = json.loads((mirror / "pypi/torch/json").read_text())
            _set(data, where, value)
            (mirror / "pypi/torch/json").write_text(json.dumps(data))
        else:
            (mirror / "packages" / where).write_bytes(
                value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
            )
        before = _files_under(tmp)
        code, stderr = _call(
            toolchain_cli.main,
            ["facts", "check", *_CLOSED_SOURCES, "--index", mirror.as_uri(), "--facts", str(FROZEN_FACTS)],
        )
        _assert_contract(code, stderr, usage_prefix="error: ")
        assert code in (0, 1, 3), (case, code, stderr)  # the facts are fine: a broken answer is never exit 2
        SEEN["answer"].add(code)
        assert _files_under(tmp) == before
