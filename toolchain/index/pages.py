"""The index's pages, as text: PEP 503 HTML and PEP 691 JSON (api-version 1.1, PEP 700's `versions` and
`size`) for each stack's `simple/` and `simple/apex/`, every link with its sha256 and its PEP 658/714
metadata hash, and the top page listing every stack. Pure functions of the published entries, so the
same wheels always give the same bytes (the index is idempotent)."""

from __future__ import annotations

import dataclasses
import html
import json
import urllib.parse

PROJECT = "apex"
API_VERSION = "1.1"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"


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

    @property
    def href(self) -> str:  # from <stack>/simple/apex/
        return f"../../files/{self.folder}/{urllib.parse.quote(self.name)}"


def _dumps(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def root_html() -> str:
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n"
        f'<meta name="pypi:repository-version" content="{API_VERSION}">\n<title>Simple index</title>\n'
        f'</head>\n<body>\n<a href="{PROJECT}/">{PROJECT}</a>\n</body>\n</html>\n'
    )


def root_json() -> str:
    return _dumps({"meta": {"api-version": API_VERSION}, "projects": [{"name": PROJECT}]})


def project_html(entries: list[Entry]) -> str:
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
        f'<meta name="pypi:repository-version" content="{API_VERSION}">\n<title>Links for {PROJECT}</title>\n'
        f"</head>\n<body>\n<h1>Links for {PROJECT}</h1>\n" + "\n".join(links) + "\n</body>\n</html>\n"
    )


def project_json(entries: list[Entry]) -> str:
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
            "name": PROJECT,
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
            }
        )
    return rows


def _newest_glibc(entries: list[Entry]) -> str:
    """The glibc a machine needs for every wheel of the stack: the highest its wheels' tags name."""
    known = [e.glibc for e in entries if e.glibc]
    if not known:
        return "unknown"
    return max(known, key=lambda v: tuple(int(x) for x in v.split(".")))


def top_json(entries: list[Entry]) -> str:
    return _dumps({"index_version": 1, "project": PROJECT, "stacks": stack_rows(entries)})


def top_html(entries: list[Entry]) -> str:
    cells = []
    for row in stack_rows(entries):
        cells.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(v)}</td>"
                for v in (
                    row["stack"],
                    ", ".join(row["archs"]),
                    ", ".join(c[:12] for c in row["apex_commits"]),
                    ", ".join(row["verify"]),
                    row["glibc"],
                    row["built"],
                    "\n".join(row["wheels"]),
                )
            )
            + f"<td><code>pip install apex --index-url &lt;INDEX&gt;/{html.escape(row['simple'])}</code></td></tr>"
        )
    return (
        '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n<title>Apex wheels per stack</title>\n'
        "</head>\n<body>\n<h1>Verified NVIDIA Apex wheels, one index per stack</h1>\n"
        "<p>Each wheel passed the build's static gate (<code>python -m verify --static</code>) and carries "
        "its build manifest and report in its .dist-info; pip refuses it on another torch minor. "
        "<em>glibc</em>: the oldest glibc the stack's wheels run on (their manylinux_2_X tag).</p>\n"
        "<table>\n<tr><th>stack</th><th>archs</th><th>Apex commit</th><th>verify</th><th>glibc</th><th>built</th>"
        "<th>wheels</th><th>install</th></tr>\n" + "\n".join(cells) + "\n</table>\n</body>\n</html>\n"
    )
