"""The index's pages, as text: PEP 503 HTML and PEP 691 JSON (api-version 1.1, PEP 700's `versions` and
`size`) for each stack's `simple/` and `simple/apex/`, every link with its sha256 and its PEP 658/714
metadata hash, and the top page listing every stack. Pure functions of the published entries, so the
same wheels always give the same bytes (the index is idempotent)."""

from __future__ import annotations

import dataclasses
import html
import json
import urllib.parse
from collections.abc import Sequence
from typing import Protocol

PROJECT = "apex"
TOOL_PROJECT = "apex-verify"  # verify's own wheel, on every stack's page beside Apex's
TOOLS_FOLDER = "tools"  # INDEX/tools/: the apex-verify wheel and the verify zipapp, shared by every stack
API_VERSION = "1.1"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"


@dataclasses.dataclass(frozen=True)
class ToolFile:
    """A file under INDEX/tools/ (the apex-verify wheel, the zipapp), as the pages link it."""

    name: str
    sha256: str
    size: int
    version: str

    def href_from_project(self, top: bool) -> str:
        """From <stack>/simple/<project>/, or from the top-level simple/<project>/ when `top`."""
        up = "../../" if top else "../../../"
        return f"{up}{TOOLS_FOLDER}/{urllib.parse.quote(self.name)}"


@dataclasses.dataclass(frozen=True)
class Tools:
    """What `build.py index` publishes beside the wheels: verify as a wheel and as a zipapp."""

    wheel: ToolFile
    zipapp: ToolFile


@dataclasses.dataclass(frozen=True)
class Entry:
    """One published wheel, as the pages name it."""

    stack: str
    name: str
    folder: str  # files/<folder>/ under the stack
    sha256: str
    size: int
    version: str
    metadata_sha256: str
    requires_python: str | None
    built_at: str
    commit: str | None
    archs: str | None
    verdict: str
    glibc: str | None = None  # the glibc its modules need (wheel-check.json); None: published before that
    torch: str | None = None  # the exact torch it was built against (the manifest's versions.torch)
    torch_cuda: str | None = None  # that torch's CUDA (None: a CPU torch)
    gpu_verdict: str | None = None  # verify's full run on a GPU (verify-gpu.json); None: not run
    requires: tuple[str, ...] = ()  # its Requires-Dist: torch's pin and what the index serves beside it

    @property
    def python_tags(self) -> list[str]:
        """The wheel file name's Python tags (cp312), from its PEP 425 triple."""
        parts = self.name[: -len(".whl")].split("-")
        return parts[-3].split(".") if len(parts) in (5, 6) else []

    @property
    def href(self) -> str:  # from <stack>/simple/apex/
        return f"../../files/{self.folder}/{urllib.parse.quote(self.name)}"


class Linked(Protocol):
    """What a project page links: a published Apex wheel (Entry) or a dependency wheel beside it."""

    @property  # a Protocol member: read by mypy, never called
    def name(self) -> str: ...
    @property  # a Protocol member: read by mypy, never called
    def href(self) -> str: ...
    @property  # a Protocol member: read by mypy, never called
    def sha256(self) -> str: ...
    @property  # a Protocol member: read by mypy, never called
    def size(self) -> int: ...
    @property  # a Protocol member: read by mypy, never called
    def version(self) -> str: ...
    @property  # a Protocol member: read by mypy, never called
    def metadata_sha256(self) -> str: ...
    @property  # a Protocol member: read by mypy, never called
    def requires_python(self) -> str | None: ...


def _dumps(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _projects(tools: Tools | None, apex: bool, others: list[str]) -> list[str]:
    return [*([PROJECT] if apex else []), *([TOOL_PROJECT] if tools else []), *others]


def root_html(tools: Tools | None = None, apex: bool = True, others: list[str] | None = None) -> str:
    """A simple/ root: a stack's (apex, apex-verify and `others`, what Apex requires besides torch) or the
    index's own (`apex=False`: apex-verify)."""
    links = "\n".join(f'<a href="{p}/">{p}</a>' for p in _projects(tools, apex, others or []))
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n"
        f'<meta name="pypi:repository-version" content="{API_VERSION}">\n<title>Simple index</title>\n'
        f"</head>\n<body>\n{links}\n</body>\n</html>\n"
    )


def root_json(tools: Tools | None = None, apex: bool = True, others: list[str] | None = None) -> str:
    projects = [{"name": p} for p in _projects(tools, apex, others or [])]
    return _dumps({"meta": {"api-version": API_VERSION}, "projects": projects})


def tool_html(tool: ToolFile, top: bool = False) -> str:
    """simple/apex-verify/: its one wheel (pure Python; pip reads its metadata from the wheel itself).
    `top`: the index's own simple/ (apex-verify alone), which needs no stack in its URL."""
    href = html.escape(tool.href_from_project(top))
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n"
        f'<meta name="pypi:repository-version" content="{API_VERSION}">\n<title>Links for {TOOL_PROJECT}</title>\n'
        f"</head>\n<body>\n<h1>Links for {TOOL_PROJECT}</h1>\n"
        f'<a href="{href}#sha256={tool.sha256}" data-requires-python="&gt;=3.10">{html.escape(tool.name)}</a><br>\n'
        "</body>\n</html>\n"
    )


def tool_json(tool: ToolFile, top: bool = False) -> str:
    return _dumps(
        {
            "meta": {"api-version": API_VERSION},
            "name": TOOL_PROJECT,
            "versions": [tool.version],
            "files": [
                {
                    "filename": tool.name,
                    "url": tool.href_from_project(top),
                    "hashes": {"sha256": tool.sha256},
                    "requires-python": ">=3.10",
                    "size": tool.size,
                    "yanked": False,
                }
            ],
        }
    )


def project_html(entries: Sequence[Linked], project: str = PROJECT) -> str:
    """simple/<project>/: apex's wheels, or a dependency's (toolchain/index/dependencies.py)."""
    links = []
    for e in sorted(entries, key=lambda e: e.name):
        attrs = [f'href="{html.escape(e.href)}#sha256={e.sha256}"']
        if e.requires_python:
            attrs.append(f'data-requires-python="{html.escape(e.requires_python)}"')
        attrs += [
            f'data-dist-info-metadata="sha256={e.metadata_sha256}"',
            f'data-core-metadata="sha256={e.metadata_sha256}"',
        ]
        links.append(f"<a {' '.join(attrs)}>{html.escape(e.name)}</a><br>")
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n"
        f'<meta name="pypi:repository-version" content="{API_VERSION}">\n<title>Links for {project}</title>\n'
        f"</head>\n<body>\n<h1>Links for {project}</h1>\n" + "\n".join(links) + "\n</body>\n</html>\n"
    )


def project_json(entries: Sequence[Linked], project: str = PROJECT) -> str:
    files = [
        {
            "filename": e.name,
            "url": e.href,
            "hashes": {"sha256": e.sha256},
            **({"requires-python": e.requires_python} if e.requires_python else {}),
            "core-metadata": {"sha256": e.metadata_sha256},
            "dist-info-metadata": {"sha256": e.metadata_sha256},
            "size": e.size,
            "yanked": False,
        }
        for e in sorted(entries, key=lambda e: e.name)
    ]
    return _dumps(
        {
            "meta": {"api-version": API_VERSION},
            "name": project,
            "versions": sorted({e.version for e in entries}),
            "files": files,
        }
    )


def stack_rows(entries: list[Entry]) -> list[dict]:
    """One row per stack: its wheels, archs, Apex commits, verdicts and newest build date."""
    rows = []
    for stack in sorted({e.stack for e in entries}):
        mine = [e for e in entries if e.stack == stack]
        rows.append(
            {
                "stack": stack,
                "simple": f"{stack}/simple/",
                "wheels": sorted(e.name for e in mine),
                "archs": sorted({e.archs or "none (no CUDA module)" for e in mine}),
                "apex_commits": sorted({e.commit or "unknown" for e in mine}),
                "verify": sorted({e.verdict for e in mine}),
                "built": max(e.built_at for e in mine)[:10],
                "glibc": _newest_glibc(mine),
                "torch": sorted({e.torch or "unknown" for e in mine}),
                "cuda": sorted({_cuda_shown(e) for e in mine}),
                "python": sorted({t for e in mine for t in e.python_tags}),
                "gpu_verify": sorted({e.gpu_verdict or NOT_RUN for e in mine}),
            }
        )
    return rows


NOT_RUN = "not run"  # no GPU runner verified the wheel (the publish workflow's GPU job is optional)


def _cuda_shown(entry: Entry) -> str:
    if entry.torch is None:
        return "unknown"
    return entry.torch_cuda or "none (CPU torch)"


def _newest_glibc(entries: list[Entry]) -> str:
    """The glibc a machine needs for every wheel of the stack: the highest its wheels' tags name."""
    known = [e.glibc for e in entries if e.glibc]
    if not known:
        return "unknown"
    return max(known, key=lambda v: tuple(int(x) for x in v.split(".")))


def _tools_json(tools: Tools | None) -> dict[str, object]:
    if tools is None:
        return {}
    return {
        "tools": {
            TOOL_PROJECT: {"file": f"{TOOLS_FOLDER}/{tools.wheel.name}", "sha256": tools.wheel.sha256},
            "zipapp": {"file": f"{TOOLS_FOLDER}/{tools.zipapp.name}", "sha256": tools.zipapp.sha256},
        }
    }


PLACEHOLDER = "<INDEX>"  # the address, where `build.py index` was given none (--address, --repository)


def install_commands(address: str | None, stack: str | None = None) -> list[str]:
    """The lines a user runs: apex-verify from the index's own simple/ and `apex-verify install` (which
    finds the stack from the installed torch); with `stack`, pip straight from that stack's folder."""
    root = (address or PLACEHOLDER).rstrip("/")
    if stack:
        return [f"pip install apex --index-url {root}/{stack}/simple"]
    return [
        f"pip install {TOOL_PROJECT} --index-url {root}/simple",
        f"{TOOL_PROJECT} install --index {root}/",
    ]


def top_json(
    entries: list[Entry],
    tools: Tools | None = None,
    address: str | None = None,
    dependencies: dict[str, tuple[str, ...]] | None = None,
) -> str:
    """stacks.json; `dependencies`: per stack, the wheel files served beside Apex's (what it requires)."""
    rows = [
        {
            **row,
            "install": install_commands(address, row["stack"]),
            **(
                {"dependencies": sorted(dependencies.get(row["stack"], ()))}
                if dependencies is not None
                else {}
            ),
        }
        for row in stack_rows(entries)
    ]
    return _dumps(
        {
            "index_version": 1,
            "project": PROJECT,
            **({"address": address} if address else {}),
            **({"install": install_commands(address)} if tools else {}),
            "stacks": rows,
            **_tools_json(tools),
        }
    )


def _code(lines: list[str]) -> str:
    return "<pre><code>" + html.escape("\n".join(lines)) + "</code></pre>"


def _tools_html(tools: Tools | None, address: str | None) -> str:
    if tools is None:
        return ""
    wheel, app = (html.escape(urllib.parse.quote(t.name)) for t in (tools.wheel, tools.zipapp))
    return (
        "<h2>Install: any environment that has torch</h2>\n"
        + _code(install_commands(address))
        + "\n<p><code>apex-verify install</code> reads the installed torch (version, CUDA build), Python, "
        "platform and glibc, installs the matching wheel below with that torch pinned exactly, and runs "
        "<code>verify --static</code> (<code>--full</code>: the GPU checks too). A torch the index has no "
        "stack for is refused before anything is installed, naming the nearest stack. "
        f'Verify without installing: <a href="{TOOLS_FOLDER}/{app}">{app}</a> (<code>python {app} --static</code>); '
        f'the wheel: <a href="{TOOLS_FOLDER}/{wheel}">{wheel}</a>.</p>\n'
    )


_COLUMNS = ("stack", "torch", "CUDA", "Python", "glibc", "archs", "Apex commit", "static verify")
_COLUMNS_AFTER = ("GPU verify", "built", "wheels", "install")


def _row_html(row: dict, address: str | None) -> str:
    values = (
        row["stack"],
        ", ".join(row["torch"]),
        ", ".join(row["cuda"]),
        ", ".join(row["python"]),
        row["glibc"],
        ", ".join(row["archs"]),
        ", ".join(c[:12] for c in row["apex_commits"]),
        ", ".join(row["verify"]),
        ", ".join(row["gpu_verify"]),
        row["built"],
        "\n".join(row["wheels"]),
    )
    cells = "".join(f"<td>{html.escape(v)}</td>" for v in values)
    return f"<tr>{cells}<td>{_code(install_commands(address, row['stack']))}</td></tr>"


def top_html(entries: list[Entry], tools: Tools | None = None, address: str | None = None) -> str:
    header = "".join(f"<th>{c}</th>" for c in (*_COLUMNS, *_COLUMNS_AFTER))
    return (
        '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n<title>Apex wheels per stack</title>\n'
        "</head>\n<body>\n<h1>Verified NVIDIA Apex wheels, one index per stack</h1>\n"
        + _tools_html(tools, address)
        + "<h2>Stacks</h2>\n"
        "<p>Each wheel passed the build's static gate (<code>python -m verify --static</code>) and carries "
        "its build manifest and report in its .dist-info; pip refuses it on another torch minor. "
        "Each stack's page also serves the pure-Python wheels Apex requires (<code>packaging</code>), never "
        "torch: <code>--index-url</code> needs no other index. "
        "<em>glibc</em>: the oldest glibc the stack's wheels run on (their manylinux_2_X tag). "
        "<em>GPU verify</em>: verify's full run on a GPU with that very wheel, where one ran.</p>\n"
        f"<table>\n<tr>{header}</tr>\n"
        + "\n".join(_row_html(row, address) for row in stack_rows(entries))
        + "\n</table>\n</body>\n</html>\n"
    )
