"""`build.py facts check` beyond PyPI: NVIDIA's image tags, the CUDA builds on PyTorch's own index, and
Apex's upstream HEAD and tags. Each source is compared when it answers; when it does not, the report says
"unreachable" and why, never that it is current.

- NVIDIA's registry (Docker Hub's tag API, `/v2/repositories/nvidia/cuda/tags?name=13.0.`): per CUDA minor
  of the facts (a `[cuda]` row, or an nvcc of a `[[toolkit]]` row with none), the newest patch with devel
  images against `full`, and the devel and runtime tags of each OS the row names.
- PyTorch's index (`/whl/cu130/torch/`, the PEP 503 page of that CUDA's wheels): per torch minor, whether
  it has linux x86_64 and aarch64 wheels for each CUDA, against `cuda` and `aarch64_cuda`.
- Apex upstream (GitHub's API): HEAD of the default branch against `[apex] default_ref`, the newest NGC-style
  tag against those the module map knows, and setup.py at that HEAD (read by the builder's own reader,
  toolchain/builder/apex_setup.py): its flag style and its extension modules against the module map.

Every answer comes through the same Fetcher as the PyPI check (verify's bounded reader); a source that
does not answer (no network, a refusal, a malformed answer) stops at its first failure. Tests serve stored
answers from a server on 127.0.0.1 (tests/unit/test_upstream_facts.py).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
import urllib.parse
from pathlib import Path

from toolchain.builder import apex_setup
from toolchain.spec.compat import Compat, minor_of, version_key
from toolchain.spec.facts_check import BadAnswer, Fetcher, Finding, IndexUnreachable, NotPublished
from verify.layers import module_map
from verify.runtime import field_types as ft
from verify.runtime import input_files

DEFAULT_REGISTRY = "https://hub.docker.com"
DEFAULT_TORCH_INDEX = "https://download.pytorch.org"
DEFAULT_APEX_UPSTREAM = "https://api.github.com"
MAX_PAGES = 20  # tag pages per CUDA minor (100 tags a page; nvidia/cuda has ~60 per patch)
_TAG = re.compile(r"^(?P<patch>\d+\.\d+\.\d+)-(?P<flavor>devel|runtime)-(?P<os>[a-z]+\d+(?:\.\d+)?)$")
_INDEX_WHEEL = re.compile(
    r"torch-(?P<version>\d+\.\d+\.\d+)(?:\+|%2B)(?P<tag>cu\d+)-cp\d+-cp\d+t?-[A-Za-z0-9_.]*?(?P<machine>x86_64|aarch64)\.whl"
)
_SOURCE_NAMES = ("NVIDIA image registry", "PyTorch index", "Apex upstream")


@dataclasses.dataclass(frozen=True)
class SourceResult:
    """One source beyond PyPI: what it answered, or why it could not be read."""

    name: str  # "NVIDIA image registry"
    url: str
    findings: tuple[Finding, ...] = ()
    compared: str = ""  # what was compared, when it answered
    unreachable: str | None = None  # why it was not compared; None when it was


def check_all(
    facts: Compat, fetch: Fetcher, registry: str, torch_index: str, apex_upstream: str
) -> tuple[SourceResult, ...]:
    """Each source in turn; one that does not answer is reported unreachable, the others still compared."""
    return tuple(
        _guarded(name, base, lambda read=read, base=base: read(facts, fetch, base))
        for name, base, read in zip(
            _SOURCE_NAMES,
            (registry, torch_index, apex_upstream),
            (image_tags, torch_index_builds, apex_head),
            strict=True,
        )
    )


def _guarded(name: str, base: str, compare) -> SourceResult:  # noqa: ANN001
    try:
        findings, compared = compare()
    except IndexUnreachable as err:  # BadAnswer too: an answer that is not this source's is no answer
        return SourceResult(name, base, unreachable=str(err))
    return SourceResult(name, base, tuple(findings), compared)


# --- NVIDIA's image tags --------------------------------------------------------------------------

_TAG_PAGE = ft.Record(
    {
        "next": ft.Nullable(ft.Str(max_len=4096)),
        "results": ft.ListOf(ft.Record({"name": ft.Str(max_len=256)}, required=("name",)), max_items=1000),
    },
    required=("results",),
)


def _tag_names(fetch: Fetcher, base: str, repo: str, minor: str) -> set[str]:
    url: str | None = f"{base}/v2/repositories/{repo}/tags?page_size=100&name={minor}."
    names: set[str] = set()
    for _ in range(MAX_PAGES):
        if url is None:
            break
        if not url.startswith(base + "/"):  # a next page on another host is not followed
            raise BadAnswer(f"{base}: a tag page points to {url}, outside the registry asked")
        try:
            page = _json(fetch.get(url), url, _TAG_PAGE)
        except NotPublished:
            raise IndexUnreachable(f"{url}: no such repository ({repo})") from None
        names |= {entry["name"] for entry in page["results"]}
        url = page.get("next")
    return names


def image_tags(facts: Compat, fetch: Fetcher, base: str) -> tuple[list[Finding], str]:
    repo = facts.devel_image_pattern.split(":", 1)[0]
    oldest = min(facts.cuda, key=version_key)
    minors = set(facts.cuda) | {
        v for row in facts.toolkits for v in row.nvcc if version_key(v) >= version_key(oldest)
    }
    found: list[Finding] = []
    for minor in sorted(minors, key=version_key):
        tags = [m for m in map(_TAG.match, _tag_names(fetch, base, repo, minor)) if m]
        tags = [t for t in tags if minor_of(t["patch"]) == minor and t["os"] in facts.os]
        devel = {t["patch"] for t in tags if t["flavor"] == "devel"}
        pairs = {(t["patch"], t["flavor"], t["os"]) for t in tags}
        found += _compare_minor(facts, repo, minor, devel, pairs)
    return found, f"{repo} tags of CUDA {', '.join(sorted(minors, key=version_key))}"


def _compare_minor(
    facts: Compat, repo: str, minor: str, devel: set[str], pairs: set[tuple[str, str, str]]
) -> list[Finding]:
    where, subject = f'[cuda."{minor}"]', f"cuda {minor}"
    newest = max(devel, key=version_key) if devel else None
    both = sorted({o for p, f, o in pairs if p == newest and f == "devel" and (p, "runtime", o) in pairs})
    row = facts.cuda.get(minor)
    if row is None:
        if newest is None:
            return []
        return [
            Finding(
                "missing",
                subject,
                f"the registry has {repo}:{newest}-devel-{'/'.join(both) or '...'}; the facts have no {where} row",
                f'add {where} to toolchain/data/compat.toml: full = "{newest}", os = {json.dumps(both)}',
            )
        ]
    found: list[Finding] = []
    if newest is not None and version_key(newest) > version_key(row.full):
        found.append(
            Finding(
                "wrong",
                subject,
                f"the facts name {row.full}; the registry's newest {minor} images are {newest} "
                f"({', '.join(both) or 'devel only'})",
                f'set full = "{newest}" in {where}',
            )
        )
    for os_name in row.os:
        absent = [f for f in ("devel", "runtime") if (row.full, f, os_name) not in pairs]
        if absent:
            found.append(
                Finding(
                    "wrong",
                    subject,
                    f"{repo}:{row.full}-{'/'.join(absent)}-{os_name} is not on the registry",
                    f'remove "{os_name}" from os in {where}, or set full to a patch that has it',
                )
            )
    at_full = {o for p, f, o in pairs if p == row.full and f == "devel" and (p, "runtime", o) in pairs}
    for os_name in sorted(at_full - set(row.os)):
        found.append(
            Finding(
                "missing",
                subject,
                f"the registry has {repo}:{row.full}-devel-{os_name} and -runtime-{os_name}; "
                f"the facts' os list ({', '.join(row.os)}) lacks it",
                f'add "{os_name}" to os in {where}',
            )
        )
    return found


# --- PyTorch's own index --------------------------------------------------------------------------


def torch_index_builds(facts: Compat, fetch: Fetcher, base: str) -> tuple[list[Finding], str]:
    cudas = {c for row in facts.torch.values() for c in (*row.cuda, *row.aarch64_cuda)} | set(facts.cuda)
    wheels: dict[str, set[tuple[str, str]]] = {}  # cuda -> {(torch minor, machine)}
    for cuda in sorted(cudas, key=version_key):
        url = f"{base}/whl/cu{cuda.replace('.', '')}/torch/"
        try:
            page = fetch.get(url)
        except NotPublished:
            wheels[cuda] = set()  # no page: no wheels for this CUDA
            continue
        text = page.decode("utf-8", errors="replace")
        if "torch-" not in text and "<a" not in text.lower():
            raise BadAnswer(f"{url}: not a package index page (no links)")
        wheels[cuda] = {(minor_of(m["version"]), m["machine"]) for m in _INDEX_WHEEL.finditer(text)}
    found: list[Finding] = []
    for minor, row in sorted(facts.torch.items(), key=lambda kv: version_key(kv[0])):
        for machine, field, listed in (
            ("x86_64", "cuda", row.cuda),
            ("aarch64", "aarch64_cuda", row.aarch64_cuda),
        ):
            for cuda in sorted(cudas, key=version_key):
                has = (minor, machine) in wheels[cuda]
                tag = f"cu{cuda.replace('.', '')}"
                if has and cuda not in listed:
                    found.append(
                        Finding(
                            "missing",
                            f"torch {minor}",
                            f"PyTorch's index has linux {machine} wheels of torch {minor} for {tag}; the "
                            f"facts' {field} ({', '.join(listed) or 'none'}) lack it",
                            f'add "{cuda}" to {field} in [torch."{minor}"]',
                        )
                    )
                elif not has and cuda in listed:
                    found.append(
                        Finding(
                            "wrong",
                            f"torch {minor}",
                            f"the facts list a CUDA {cuda} build with linux {machine} wheels; "
                            f"{base}/whl/{tag}/torch/ has no torch {minor} {machine} wheel",
                            f'remove "{cuda}" from {field} in [torch."{minor}"]',
                        )
                    )
    return found, f"torch builds on whl/cu* for CUDA {', '.join(sorted(cudas, key=version_key))}"


# --- Apex upstream --------------------------------------------------------------------------------

_COMMIT = ft.Record(
    {
        "sha": ft.Str(max_len=64),
        "commit": ft.Record({"committer": ft.Record({"date": ft.Str(max_len=64)})}),
    },
    required=("sha",),
)
_TAGS = ft.ListOf(ft.Record({"name": ft.Str(max_len=256)}, required=("name",)), max_items=1000)
_CONTENT = ft.Record(
    {"encoding": ft.Str(max_len=32), "content": ft.Str(max_len=8 << 20)}, required=("encoding", "content")
)


def apex_head(facts: Compat, fetch: Fetcher, base: str) -> tuple[list[Finding], str]:
    repo = urllib.parse.urlsplit(facts.apex_repo).path.strip("/").removesuffix(".git")
    api = f"{base}/repos/{repo}"
    try:
        head = _json(fetch.get(f"{api}/commits/HEAD"), f"{api}/commits/HEAD", _COMMIT)
        tags = _json(fetch.get(f"{api}/tags?per_page=100"), f"{api}/tags", _TAGS)
        sha = head["sha"].lower()
        content = _json(fetch.get(f"{api}/contents/setup.py?ref={sha}"), f"{api}/contents/setup.py", _CONTENT)
    except NotPublished as err:
        raise IndexUnreachable(f"{err}: no such repository or file") from None
    if content["encoding"] != "base64":
        raise BadAnswer(f"{api}/contents/setup.py: encoding {content['encoding']}, not base64")
    try:
        text = base64.b64decode(content["content"]).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        raise BadAnswer(f"{api}/contents/setup.py: its content is not base64") from None
    date = ((head.get("commit") or {}).get("committer") or {}).get("date", "")[:10]
    pin = facts.apex_default_ref.lower()
    found: list[Finding] = []
    if not (sha.startswith(pin) or pin.startswith(sha)):
        found.append(
            Finding(
                "behind",
                "apex HEAD",
                f"upstream {repo} is at {sha[:8]} ({date}); the facts pin {pin[:8]}",
                f"review git log {pin[:8]}..{sha[:8]}, then move default_ref in [apex] of "
                "toolchain/data/compat.toml and add its [[apex.builds]] row once it builds",
            )
        )
    found += _compare_tags([t["name"] for t in tags])
    found += _compare_setup(apex_setup.parse(text, Path(f"{repo}@{sha[:8]}/setup.py")), text, sha)
    return found, f"{repo} HEAD {sha[:8]}, its tags and setup.py"


def _known_tags() -> list[str]:
    known = [m.since for m in module_map.modules() if m.since] + [
        m.until for m in module_map.modules() if m.until
    ]
    known += [s.get("first_tag", "") for s in module_map.flag_styles().values()]
    known += [s.get("last_tag", "") for s in module_map.flag_styles().values()]
    return [t for t in known if module_map.tag_key(t)]


def _compare_tags(names: list[str]) -> list[Finding]:
    ngc = [n for n in names if module_map.tag_key(n)]
    if not ngc:
        return []
    newest = max(ngc, key=lambda t: module_map.tag_key(t) or ())
    known = max(_known_tags(), key=lambda t: module_map.tag_key(t) or ())
    if (module_map.tag_key(newest) or ()) <= (module_map.tag_key(known) or ()):
        return []
    return [
        Finding(
            "missing",
            f"apex tag {newest}",
            f"upstream has tag {newest}, newer than any the module map knows ({known})",
            f"read setup.py at {newest} into verify/data/apex_modules.json (since/until, flag_styles)",
        )
    ]


def _compare_setup(setup: apex_setup.SetupPy, text: str, sha: str) -> list[Finding]:
    found: list[Finding] = []
    if setup.style != apex_setup.ENV:
        rewrite = " (it names op_builder: the USE_ROCM rewrite's layout)" if "op_builder" in text else ""
        found.append(
            Finding(
                "wrong",
                "apex setup.py",
                f"at HEAD {sha[:8]}: {setup.evidence}{rewrite}, not the APEX_* environment style "
                "the builder passes",
                "teach toolchain/builder/apex_setup.py the new style and record it in flag_styles of "
                "verify/data/apex_modules.json",
            )
        )
    built = set(setup.all_modules())
    mapped = {m.name for m in module_map.modules()}
    at_head = {m.name for m in module_map.modules() if m.until is None}
    if built - mapped:
        found.append(
            Finding(
                "missing",
                "apex modules",
                f"setup.py at HEAD {sha[:8]} builds {', '.join(sorted(built - mapped))}, which the module "
                "map lacks",
                "add a row for each to verify/data/apex_modules.json (flag, kind, features)",
            )
        )
    if built and at_head - built:
        found.append(
            Finding(
                "wrong",
                "apex modules",
                f"the module map has {', '.join(sorted(at_head - built))} at upstream HEAD; setup.py at "
                f"{sha[:8]} no longer builds them",
                "set until (the last tag) and removed (the commit) on each in verify/data/apex_modules.json",
            )
        )
    return found


def _json(body: bytes, what: str, shape: ft.Shape):  # noqa: ANN202 (a dict or a list, per shape)
    try:
        data = input_files.decode_json(body, what, input_files.INDEX_ANSWER)
    except (input_files.InputFileError, RecursionError):
        raise BadAnswer(f"{what}: the answer is not JSON (a proxy or login page?)") from None
    problems = ft.check(data, shape, what)
    if problems:
        raise BadAnswer(f"{what}: not the expected answer ({ft.summary(problems, 3)})")
    return data
