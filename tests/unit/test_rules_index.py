"""What the index publishes, on a real wheel the project's builder makes (tests/wheel_builds.py), varied one
field at a time with the builder's own stamp: the exact torch pin its METADATA must carry, the stack it claims
against the stack its versions name and the folder it is filed under, and the PEP 658 hash its page carries;
the manylinux tag a linux_* wheel is published under, and each refusal check() makes before it reads further.
Each of wheel_check's rules also as a table on its own part (platform tag, static gate, identity, manifest
beside the wheel, modules, linked libraries, METADATA headers), on small zips written here.
The pages' own rules on published entries: tests/unit/test_rules_pages.py."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import wheel_builds as wb
from tests.unit.test_zip_input import GOOD, _wheel
from toolchain.builder import build_outputs, wheel_identity
from toolchain.index import dependencies, portability, publish, wheel_check
from toolchain.index.wheel_check import REBUILD, CheckedWheel, Refusal

MINOR = ".".join(torch.__version__.split(".")[:2])
STACK = f"torch{MINOR}-{wheel_identity.cuda_tag(torch.version.cuda)}"
OTHER_STACK = "torch2.9-cu130"
ARCH = platform.machine()
OTHER_ARCH = "aarch64" if ARCH == "x86_64" else "x86_64"
CACHE_ENV = "APEX_TEST_WHEEL_CACHE"  # a folder to keep the built wheel in between runs (the mutation run's)


# --- a real wheel of the project's builder -------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The builder's stamped and gated wheel (kept in $APEX_TEST_WHEEL_CACHE when set: the mutation run)."""
    cache = os.environ.get(CACHE_ENV)
    if cache and list(Path(cache).glob("*.whl")):
        (wheel,) = Path(cache).glob("*.whl")
        yield wheel
        return
    root = tmp_path_factory.mktemp("rules-index")
    done = wb.build_stamped(root / "good", wb.torch_venv(root / "venv"))
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (root / "good" / "out").glob("*.whl")
    if cache:
        Path(cache).mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, Path(cache) / wheel.name)
    yield wheel


def _variant(
    built: Path,
    where: Path,
    *,
    pin: str | None = None,
    manifest: Any = None,
    files: dict[str, bytes] | None = None,
    drop: tuple[str, ...] = (),
    add: dict[str, bytes] | None = None,
) -> Path:
    """The built wheel alone in a folder of its own, re-stamped by the builder with one field changed: its
    manifest, other dist-info `files` (name -> bytes), dist-info files dropped or members added beside its
    own (then its RECORD is the builder's fresh one all the same)."""
    inside = json.loads(wheel_identity.read_dist_info(built)[wheel_identity.MANIFEST_FILE])
    version = wheel_identity.parse_name(built.name)[1]
    extra = {wheel_identity.MANIFEST_FILE: json.dumps(manifest if manifest is not None else inside).encode()}
    extra.update(files or {})
    source = built
    if drop or add:
        source = where / "raw" / built.name
        source.parent.mkdir(parents=True)
        with zipfile.ZipFile(built) as old, zipfile.ZipFile(source, "w") as new:
            for info in old.infolist():
                if info.filename.partition("/")[2] not in drop:
                    new.writestr(info, old.read(info))
            for member, data in (add or {}).items():
                new.writestr(member, data)
        extra = {k: v for k, v in extra.items() if k not in drop}
    return wheel_identity.stamp(
        source, where / built.name, version, pin or inside["wheel_identity"]["torch_requirement"], extra
    )


@pytest.mark.slow  # builds a wheel (pip wheel of a C module, the builder's gate): several seconds
def test_the_wheel_must_pin_exactly_its_torch_minor(built: Path, tmp_path: Path) -> None:
    as_built = wheel_check.check(_variant(built, tmp_path / "same"), work=tmp_path)
    assert isinstance(as_built, CheckedWheel), as_built
    assert as_built.stack == STACK
    for pin in ("torch>=2.6.0", "torch==2.9.*", f"torch=={MINOR}.*,<3", "torch"):
        refused = wheel_check.check(_variant(built, tmp_path / pin.replace("*", "x"), pin=pin), work=tmp_path)
        assert isinstance(refused, Refusal), pin
        (reason,) = refused.reasons
        assert reason.startswith(f"its METADATA requires ['{pin}'], not exactly torch=={MINOR}.*"), reason


@pytest.mark.slow
def test_a_wheel_claiming_another_stack_than_its_versions_is_refused(built: Path, tmp_path: Path) -> None:
    inside = json.loads(wheel_identity.read_dist_info(built)[wheel_identity.MANIFEST_FILE])
    claims = {**inside, "wheel_identity": {**inside["wheel_identity"], "stack": OTHER_STACK}}
    refused = wheel_check.check(_variant(built, tmp_path, manifest=claims), work=tmp_path)
    assert isinstance(refused, Refusal)
    (reason,) = refused.reasons
    assert "its manifest's wheel_identity" in reason and OTHER_STACK in reason
    assert "is not what its versions say" in reason


@pytest.mark.slow
def test_a_published_wheel_filed_under_another_stack_is_left_out(built: Path, tmp_path: Path, capsys) -> None:
    checked = wheel_check.check(_variant(built, tmp_path / "w"), work=tmp_path)
    assert isinstance(checked, CheckedWheel)
    index = tmp_path / "index"
    source = dependencies.Source((wb.dependency_folder(tmp_path),))  # its packaging requirement
    outcome, added = publish.add(index, [checked], publish.Extras(dependencies=source))
    assert (outcome.stack, outcome.action, added.action) == (STACK, "added", "dependency")
    (folder,) = (index / STACK / "files").iterdir()
    assert [e.stack for e in publish.published(index)] == [STACK]
    shutil.copytree(folder, index / OTHER_STACK / "files" / folder.name)  # filed by hand under another stack
    assert [(e.stack, e.name) for e in publish.published(index)] == [(STACK, checked.name)]
    assert f"holds a wheel built for {STACK}, filed under {OTHER_STACK}" in capsys.readouterr().err
    page = (index / STACK / "simple" / "apex" / "index.html").read_text()
    (link,) = wb.anchors(page)
    metadata = (folder / f"{checked.name}.metadata").read_bytes()
    want = "sha256=" + hashlib.sha256(metadata).hexdigest()
    assert link["data-dist-info-metadata"] == link["data-core-metadata"] == want
    assert metadata == wheel_identity.read_dist_info(folder / checked.name)["METADATA"]


@pytest.mark.slow
def test_a_manifest_beside_the_wheel_must_agree_with_it(built: Path, tmp_path: Path) -> None:
    wheel = _variant(built, tmp_path / "beside")
    inside = json.loads(wheel_identity.read_dist_info(wheel)[wheel_identity.MANIFEST_FILE])
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    beside = wheel.parent / build_outputs.MANIFEST_NAME
    beside.write_text(json.dumps({**inside, "build": {**inside["build"], "wheel_sha256": sha}}))
    assert isinstance(wheel_check.check(wheel, work=tmp_path), CheckedWheel)  # the same build: it passes
    beside.write_text(json.dumps({**inside, "build": {**inside["build"], "wheel_sha256": "0" * 64}}))
    refused = wheel_check.check(wheel, work=tmp_path)
    assert isinstance(refused, Refusal) and "the wheel was changed or replaced" in refused.reasons[0]


# --- check() on the built wheel: the tag it is published under, and every refusal before the rest -----------


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_linux_wheel_is_published_retagged_and_the_retagged_wheel_as_it_is(
    built: Path, tmp_path: Path
) -> None:
    wheel = _variant(built, tmp_path / "as-built")
    _, version, tags = wheel_identity.parse_name(wheel.name)
    checked = wheel_check.check(wheel, work=tmp_path)
    assert isinstance(checked, CheckedWheel), checked
    found = checked.portability
    assert found is not None and found.tag and tags.endswith(f"-linux_{ARCH}")
    assert checked.name == f"apex-{version}-{portability.with_platform(tags, found.tag)}.whl"
    assert checked.path.name == checked.name and checked.path.parent.parent == tmp_path  # a folder under work
    assert checked.retagged_from == {"wheel": wheel.name, "sha256": _sha256(wheel)}
    assert checked.sha256 == _sha256(checked.path) != checked.retagged_from["sha256"]
    build = checked.manifest["build"]
    assert (build["wheel"], build["wheel_sha256"], build["started_at"]) == (
        checked.name,
        checked.sha256,
        "2026-12-01T20:00:00+00:00",
    )
    files = wheel_identity.read_dist_info(checked.path)
    assert (checked.metadata, checked.verify_json, checked.verify_md) == (
        files["METADATA"],
        files["verify-static.json"],
        files["verify-static.md"],
    )
    assert (checked.version, checked.stack, checked.built_at) == (version, STACK, build["started_at"])
    assert f"torch=={MINOR}.*" in checked.requires and checked.requires_python is None  # setup.py sets none
    with zipfile.ZipFile(wheel) as archive:
        (module,) = [n for n in archive.namelist() if n.endswith(".so")]
    assert checked.libraries == {module: []}  # the C module links nothing: DT_NEEDED is empty
    record = checked.check_record()
    assert {
        k: record[k] for k in ("wheel", "sha256", "version", "stack", "gate", "manylinux", "allowed_from")
    } == {
        "wheel": checked.name,
        "sha256": checked.sha256,
        "version": version,
        "stack": STACK,
        "gate": "PASS",
        "manylinux": found.tag,
        "allowed_from": "wheel_libraries.toml",
    }
    assert (
        record["retagged_from"] == checked.retagged_from and record["needed_libraries"] == checked.libraries
    )
    again = wheel_check.check(checked.path, work=tmp_path / "again")  # an honest manylinux tag: kept
    assert isinstance(again, CheckedWheel), again
    assert (again.path, again.sha256, again.retagged_from) == (checked.path, checked.sha256, None)
    assert again.check_record()["retagged_from"] is None and not (tmp_path / "again").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "tag", [f"linux_{OTHER_ARCH}", f"manylinux_2_5_{OTHER_ARCH}", f"manylinux_2_4_{ARCH}"]
)
def test_a_platform_tag_its_modules_do_not_satisfy_is_refused(built: Path, tmp_path: Path, tag: str) -> None:
    version = wheel_identity.parse_name(built.name)[1]
    wheel = portability.retag(built, tmp_path, tag, version, f"torch=={MINOR}.*")
    assert wheel.name.endswith(f"-{tag}.whl")
    refused = wheel_check.check(wheel, work=tmp_path)
    assert isinstance(refused, Refusal), refused
    (reason,) = refused.reasons
    assert reason.startswith(
        f"its platform tag {tag} claims what its modules do not satisfy: they are {ARCH} code"
    )


@pytest.mark.slow
def test_a_module_linking_a_library_beyond_the_allowed_ones_is_refused(built: Path, tmp_path: Path) -> None:
    """torch's own small extension module as one more of the wheel's: it links libtorch_python.so and libc."""
    inside = json.loads(wheel_identity.read_dist_info(built)[wheel_identity.MANIFEST_FILE])
    linked = {**inside, "built_modules": sorted([*inside["built_modules"], "apex._linked"])}
    so = Path(torch._C.__file__).read_bytes()
    wheel = _variant(built, tmp_path / "w", manifest=linked, add={"apex/_linked.so": so})
    checked = wheel_check.check(wheel, work=tmp_path)  # torch's wheel brings libtorch_python.so
    assert isinstance(checked, CheckedWheel), checked
    assert checked.libraries["apex/_linked.so"] == ["libtorch_python.so", "libc.so.6"]
    refused = wheel_check.check(wheel, ("libc.so.*",), tmp_path)
    assert isinstance(refused, Refusal)
    assert refused.reasons == (
        "its extension modules link libraries that neither glibc, the GCC runtime nor torch's wheels provide: "
        "apex/_linked.so needs libtorch_python.so; build against torch's own CUDA wheels (no system CUDA "
        "library on the link line), or add the library to wheel_libraries.toml with its source if torch's "
        "wheels do bring it",
    )


def _copy_as(name: str) -> Callable[[Path, Path, dict], Path]:
    def make(built: Path, where: Path, inside: dict) -> Path:
        where.mkdir()
        return Path(shutil.copy2(built, where / name))

    return make


def _not_a_zip(built: Path, where: Path, inside: dict) -> Path:
    where.mkdir()
    (where / built.name).write_bytes(b"PK but not a zip")
    return where / built.name


def _two_dist_infos(built: Path, where: Path, inside: dict) -> Path:
    wheel = _copy_as(built.name)(built, where, inside)
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("other-1.0.dist-info/METADATA", "Name: other\n")
    return wheel


def _manifest(change: Callable[[dict], Any]) -> Callable[[Path, Path, dict], Path]:
    return lambda built, where, inside: _variant(built, where, manifest=change(inside))


def _files(files: dict[str, bytes]) -> Callable[[Path, Path, dict], Path]:
    return lambda built, where, inside: _variant(built, where, files=files)


NOT_A_MANIFEST = f"its build-manifest.json is not a manifest_version 1 build manifest; {REBUILD}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "said"),
    [
        (_not_a_zip, "not a usable wheel (is not a readable zip archive ("),
        (  # no PY-ABI part: pip refuses the name ("wrong number of parts")
            _copy_as("apex-0.1-linux_x86_64.whl"),
            "not a readable wheel ('apex-0.1-linux_x86_64.whl' is not a wheel file name "
            "(NAME-VERSION-PY-ABI-PLATFORM.whl))",
        ),
        (_two_dist_infos, "not a readable wheel (a wheel holds one .dist-info folder; this one holds 2:"),
        (
            lambda built, where, inside: _variant(built, where, drop=("build-manifest.json",)),
            "its .dist-info holds no build-manifest.json: setup.py's plain wheel, not one this project's "
            f"builder stamped; {REBUILD}",
        ),
        (_files({"build-manifest.json": b"{"}), "its build-manifest.json is not valid JSON ("),
        (_manifest(lambda m: []), NOT_A_MANIFEST),
        (_manifest(lambda m: {**m, "manifest_version": "0"}), NOT_A_MANIFEST),
        (_manifest(lambda m: {**m, "manifest_version": "2"}), NOT_A_MANIFEST),
        (_manifest(lambda m: {**m, "manifest_version": 1}), NOT_A_MANIFEST),
        (_manifest(lambda m: {"manifest_version": "1"}), "its build-manifest.json is malformed ("),
        (
            _manifest(lambda m: {**m, "wheel_identity": None}),
            f"its manifest has no wheel_identity (built before wheels named their stack); {REBUILD}",
        ),
        (
            _manifest(
                lambda m: {**m, "wheel_identity": {**m["wheel_identity"], "stack": "torch2.1\u0663-cpu"}}
            ),
            f"its manifest's stack 'torch2.1\u0663-cpu' is not a stack name (torch2.11-cu130, ASCII); {REBUILD}",
        ),
    ],
    ids=[
        "not-a-zip",
        "no-abi-tag",
        "two-dist-infos",
        "no-manifest",
        "manifest-not-json",
        "manifest-a-list",
        "manifest-version-0",
        "manifest-version-2",
        "manifest-version-int",
        "manifest-malformed",
        "no-identity",
        "stack-not-ascii",
    ],
)
def test_a_wheel_that_is_no_stamped_build_is_refused_before_the_rest_is_read(
    built: Path, tmp_path: Path, make: Callable[[Path, Path, dict], Path], said: str
) -> None:
    inside = json.loads(wheel_identity.read_dist_info(built)[wheel_identity.MANIFEST_FILE])
    refused = wheel_check.check(make(built, tmp_path / "w", inside), work=tmp_path)
    assert isinstance(refused, Refusal), refused
    (reason,) = refused.reasons
    assert reason.startswith(said) if said.endswith(("(", ":")) else reason == said, reason


# --- each rule on its own part: pure tables (no build) ---------------------------------------------------------


def test_a_refusal_message_names_the_wheel_and_every_reason() -> None:
    assert Refusal(Path("w.whl"), ("one", "two")).message() == "w.whl: one; two"


def _found(arch: str = "x86_64", problems: tuple[str, ...] = ()) -> portability.Portability:
    """What the modules of a wheel ask: glibc 2.28 (GLIBC_2.28's fcntl64), on `arch`."""
    return portability.Portability(
        arch=arch,
        glibc=(2, 28),
        highest={"GLIBC": "2.28"},
        symbols={"GLIBC_2.28": ["fcntl64"]},
        modules={"apex_C.so": ["libc.so.6: GLIBC_2.28"]},
        problems=problems,
    )


@pytest.mark.parametrize(
    ("arch", "tag", "refused", "published_as"),
    [
        ("x86_64", "linux_x86_64", False, "manylinux_2_28_x86_64"),  # setup.py's tag: retagged
        ("aarch64", "linux_aarch64", False, "manylinux_2_28_aarch64"),
        ("x86_64", "manylinux_2_28_x86_64", False, None),  # exactly the glibc asked: kept as it is
        ("x86_64", "manylinux_2_34_x86_64", False, None),  # a newer glibc than asked: honest, kept
        ("x86_64", "manylinux_2_27_x86_64", True, None),  # one minor older than asked
        ("x86_64", "manylinux_2_17_x86_64.manylinux2014_x86_64", True, None),
        ("x86_64", "manylinux2014_x86_64", True, None),  # legacy name: glibc 2.17
        ("x86_64", "manylinux_2_28_aarch64", True, None),  # another machine's
        ("aarch64", "manylinux_2_28_x86_64", True, None),
        ("x86_64", "linux_aarch64", True, None),
        ("aarch64", "linux_x86_64", True, None),
    ],
)
def test_the_platform_tag_must_claim_what_the_modules_satisfy(
    arch: str, tag: str, refused: bool, published_as: str | None
) -> None:
    problem, publish_as = wheel_check._platform_problem("w.whl", tag, _found(arch))
    assert publish_as == published_as
    if refused:
        assert problem == (
            f"its platform tag {tag} claims what its modules do not satisfy: they are {arch} code that needs "
            f"glibc 2.28 (GLIBC_2.28 (fcntl64)), so pip would install it where it fails at import; "
            f"{portability.FIX}, or tag it linux_{arch} and `build.py index` publishes it as "
            f"manylinux_2_28_{arch}"
        )
    else:
        assert problem is None


def test_modules_no_manylinux_tag_fits_are_refused_whatever_the_tag() -> None:
    for tag in ("linux_x86_64", "manylinux_2_28_x86_64"):
        problem, publish_as = wheel_check._platform_problem(
            "w.whl", tag, _found(problems=("it asks GLIBC_PRIVATE",))
        )
        assert publish_as is None
        assert problem == (
            "no manylinux tag fits its modules (it asks GLIBC_PRIVATE); highest versions found: "
            f"GLIBC_2.28 (fcntl64); {portability.FIX}"
        )


V = "0.1+g6424da3.cpu.torch2.13"
NEVER_RAN = (
    "its static gate never ran (no verify-static.json in its .dist-info): built without --install or with "
    f"--no-gate; {REBUILD}"
)
STATUSES = [{"id": f"c-{s.lower()}", "status": s} for s in ("PASS", "WARN", "FAIL", "INFO", "SKIP")]


def _report(**fields: Any) -> bytes:
    report = {"verdict": "PASS", "exit_code": 0, "checks": [], "apex": {"distribution": {"version": V}}}
    return json.dumps({k: v for k, v in {**report, **fields}.items() if v is not ...}).encode()


def _failed(verdict: object, exit_code: object, failed: str = "") -> str:
    return f"its static gate failed (verdict {verdict}, exit {exit_code}{failed}); fix the build and rebuild"


@pytest.mark.parametrize(
    ("raw", "problems"),
    [
        (_report(), []),
        (_report(checks=[*STATUSES, "not a check"]), []),
        (None, [NEVER_RAN]),
        (b"[]", [f"its verify-static.json is not a verify report; {REBUILD}"]),
        (_report(verdict="FAIL", exit_code=1), [_failed("FAIL", 1)]),
        (_report(verdict="FAIL", exit_code=0), [_failed("FAIL", 0)]),
        (_report(verdict="WARN"), [_failed("WARN", 0)]),
        (_report(exit_code=1), [_failed("PASS", 1)]),
        (_report(exit_code=...), [_failed("PASS", None)]),  # no exit code: not a finished run
        (_report(verdict=...), [_failed(None, 0)]),
        (
            _report(verdict="FAIL", exit_code=1, checks=[*STATUSES, "x", {"id": "c2", "status": "FAIL"}]),
            [_failed("FAIL", 1, ": FAIL c-fail, c2")],
        ),
        (
            _report(
                verdict="FAIL", exit_code=1, checks=[{"id": f"c{i}", "status": "FAIL"} for i in range(1, 10)]
            ),
            [_failed("FAIL", 1, ": FAIL c1, c2, c3, c4, c5, c6, c7, c8")],  # the first 8 of 9
        ),
        (
            _report(apex={"distribution": {"version": "0.0"}}),
            [f"its verify report checked apex 0.0, not this wheel's {V}"],
        ),
        (
            _report(apex={"distribution": {"version": "9.9"}}),
            [f"its verify report checked apex 9.9, not this wheel's {V}"],
        ),
        (_report(apex=...), [f"its verify report checked apex None, not this wheel's {V}"]),
        (_report(apex={}), [f"its verify report checked apex None, not this wheel's {V}"]),
        (
            _report(verdict="FAIL", exit_code=1, apex=...),
            [_failed("FAIL", 1), f"its verify report checked apex None, not this wheel's {V}"],
        ),
    ],
)
def test_the_static_gate_must_have_passed_on_this_version(raw: bytes | None, problems: list[str]) -> None:
    assert wheel_check._gate_problems(raw, V) == problems


def test_a_gate_report_that_is_no_json_is_named() -> None:
    (problem,) = wheel_check._gate_problems(b'{"verdict": ', V)
    assert problem.startswith("its verify-static.json is not valid JSON (") and problem.endswith(REBUILD)


METADATA = b"Metadata-Version: 2.4\nName: apex\nversion: 0.1\nRequires-Python: >=3.10\n\nName: the body\nSummary: x\n"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Metadata-Version", "2.4"),
        ("Name", "apex"),
        ("Version", "0.1"),  # header names are case-insensitive
        ("Requires-Python", ">=3.10"),
        ("Summary", None),  # after the blank line: the body, not a header
        ("License", None),
    ],
)
def test_a_metadata_header_is_read_from_the_headers_alone(name: str, value: str | None) -> None:
    assert wheel_check._header(METADATA, name) == value


def _metadata(version: str | None) -> bytes:
    return f"Metadata-Version: 2.4\nName: apex\n{f'Version: {version}' if version else ''}\n\n".encode()


def _version_problem(version: str) -> str:
    return f"its version {version!r} is not a PEP 440 version: pip skips the file"


@pytest.mark.parametrize(
    ("file_version", "meta_version", "problems"),
    [
        ("0.1", "0.1", []),
        ("0.1", None, []),  # no Version header: the identity check names it
        ("0.1", "0.0.x", [_version_problem("0.0.x")]),  # sorts before the file's
        ("0.1", "9.x", [_version_problem("9.x")]),  # sorts after it
        ("0.1.x", "0.1.x", [_version_problem("0.1.x")]),  # the same bad version: named once
        ("0.1.x", "0.1", [_version_problem("0.1.x")]),
        (
            "0.1",
            "0.1+x\u0661",
            ["its version '0.1+x\u0661' has non-ASCII characters; a PEP 440 version is ASCII"],
        ),
    ],
)
def test_pip_must_be_able_to_parse_both_versions_before_anything_else(
    tmp_path: Path, file_version: str, meta_version: str | None, problems: list[str]
) -> None:
    wheel = _wheel(tmp_path / "apex-0.1-py3-none-any.whl", GOOD)
    if not problems:
        wheel_check._pip_would_take(wheel, "apex", file_version, _metadata(meta_version))
        return
    with pytest.raises(wheel_check._Refused) as refused:
        wheel_check._pip_would_take(wheel, "apex", file_version, _metadata(meta_version))
    assert refused.value.reasons == problems


COMMIT = wb.COMMIT  # the Apex commit the built wheel's manifest names
APEX = {"version": "0.1", "commit": COMMIT, "ref": None}
VERSIONS = {"torch": "2.13.0+cpu", "torch_cuda": None}
IDENT = wheel_identity.identity("0.1", COMMIT, None, "2.13.0+cpu", None)
NAME = f"apex-{IDENT.version}-cp311-cp311-linux_x86_64.whl"
PIN = "torch==2.13.*"


def _requires(version: str | None = IDENT.version, pins: tuple[str, ...] = (PIN,)) -> bytes:
    lines = ["Metadata-Version: 2.4", "Name: apex", *([f"Version: {version}"] if version else [])]
    lines += [
        "Summary: torch extensions",
        *(f"Requires-Dist: {p}" for p in pins),
        "Requires-Dist: packaging>20.6",
    ]
    return ("\n".join(lines) + "\n\nThe body.\n").encode()


def _identity(**given: Any) -> list[str]:
    case = {
        "name": NAME,
        "file_version": IDENT.version,
        "ident": IDENT.to_json(),
        "manifest": {"apex": APEX, "versions": VERSIONS, "build": {"wheel": NAME}},
        "metadata": _requires(),
        **given,
    }
    return wheel_check._identity_problems(**case)


def _renamed(file_version: str) -> str:
    return f"its file name says version {file_version}, its manifest {IDENT.version} (torch 2.13.0+cpu, CUDA None): a renamed wheel"


OTHER = wheel_identity.identity("0.2", COMMIT, None, "2.13.0+cpu", None)
OTHER_NAME = f"apex-{OTHER.version}-cp311-cp311-linux_x86_64.whl"
STACK_ERROR = (
    f"its manifest cannot name a stack (torch version '' does not start with MAJOR.MINOR); {REBUILD}"
)
CLAIMS_OTHER = {**IDENT.to_json(), "stack": OTHER_STACK}
WRONG_PIN = "not exactly torch==2.13.*: pip would install it on another torch minor"


@pytest.mark.parametrize(
    ("given", "problems"),
    [
        ({}, []),
        (
            {  # another base version: every name follows it
                "name": OTHER_NAME,
                "file_version": OTHER.version,
                "ident": OTHER.to_json(),
                "manifest": {
                    "apex": {**APEX, "version": "0.2"},
                    "versions": VERSIONS,
                    "build": {"wheel": OTHER_NAME},
                },
                "metadata": _requires(OTHER.version),
            },
            [],
        ),
        # no apex version in the manifest: setup.py's default, 0.1
        ({"manifest": {"apex": {"commit": COMMIT}, "versions": VERSIONS, "build": {"wheel": NAME}}}, []),
        ({"manifest": {"apex": APEX, "versions": {"torch": None}, "build": {"wheel": NAME}}}, [STACK_ERROR]),
        ({"manifest": {"apex": APEX, "build": {"wheel": NAME}}}, [STACK_ERROR]),
        (
            {"ident": CLAIMS_OTHER},
            [
                f"its manifest's wheel_identity {CLAIMS_OTHER} is not what its versions say ({IDENT.to_json()})"
            ],
        ),
        ({"file_version": "0.0+x", "metadata": _requires("0.0+x")}, [_renamed("0.0+x")]),
        ({"file_version": "9.9+x", "metadata": _requires("9.9+x")}, [_renamed("9.9+x")]),
        (
            {
                "manifest": {
                    "apex": APEX,
                    "versions": VERSIONS,
                    "build": {"wheel": "apex-0.0-py3-none-any.whl"},
                }
            },
            [f"its manifest names the wheel 'apex-0.0-py3-none-any.whl', not {NAME!r}"],
        ),
        (
            {
                "manifest": {
                    "apex": APEX,
                    "versions": VERSIONS,
                    "build": {"wheel": "apex-9.9-py3-none-any.whl"},
                }
            },
            [f"its manifest names the wheel 'apex-9.9-py3-none-any.whl', not {NAME!r}"],
        ),
        (
            {"manifest": {"apex": APEX, "versions": VERSIONS}},
            [f"its manifest names the wheel None, not {NAME!r}"],
        ),
        ({"metadata": _requires("0.0")}, [f"its METADATA says Version 0.0, its file name {IDENT.version}"]),
        ({"metadata": _requires("9.9")}, [f"its METADATA says Version 9.9, its file name {IDENT.version}"]),
        ({"metadata": _requires(None)}, [f"its METADATA says Version None, its file name {IDENT.version}"]),
        ({"metadata": _requires(pins=())}, [f"its METADATA requires no torch, {WRONG_PIN}"]),
        (
            {"metadata": _requires(pins=("torch==2.9.*",))},
            [f"its METADATA requires ['torch==2.9.*'], {WRONG_PIN}"],
        ),
        (
            {"metadata": _requires(pins=(PIN, "torch>=2"))},
            [f"its METADATA requires ['torch==2.13.*', 'torch>=2'], {WRONG_PIN}"],
        ),
    ],
)
def test_the_wheel_names_what_its_manifest_says_it_is(given: dict[str, Any], problems: list[str]) -> None:
    assert _identity(**given) == problems


SHA = "5" * 64  # the wheel's sha256 in these cases; "0" * 64 and "f" * 64 sort before and after it
INSIDE: dict[str, Any] = {
    "manifest_version": "1",
    "flags": {"APEX_CPP_EXT": "1"},
    "build": {"wheel": NAME, "wheel_sha256": None, "started_at": "t0"},
}


def _beside(build: dict | None = None, **top: Any) -> str:
    """A build's manifest as the builder leaves it beside its wheel: the sha256 written in."""
    return json.dumps({**INSIDE, **top, "build": {**INSIDE["build"], "wheel_sha256": SHA, **(build or {})}})


def _changed(beside: Path, sha: str) -> str:
    return (
        f"the manifest beside it ({beside}) records sha256 {sha}, the file has {SHA}: the wheel was changed or "
        "replaced after its build"
    )


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        (None, []),  # none beside it: the one inside is the manifest
        (_beside(), []),
        # another build's manifest in the same folder, named before and after this wheel: not this one's
        (_beside(build={"wheel": "apex-0.0-py3-none-any.whl", "wheel_sha256": "0" * 64}, flags={}), []),
        (_beside(build={"wheel": "zzz-9.9-py3-none-any.whl", "wheel_sha256": "0" * 64}, flags={}), []),
        ("[]", ['the manifest beside it ({beside}) is not a build manifest (no "build" object); ' + REBUILD]),
        (
            '{"build": 1}',
            ['the manifest beside it ({beside}) is not a build manifest (no "build" object); ' + REBUILD],
        ),
        (_beside(build={"wheel_sha256": "0" * 64}), ["{changed0}"]),
        (_beside(build={"wheel_sha256": "f" * 64}), ["{changedf}"]),
        (_beside(flags={}), ["the manifest beside it ({beside}) and the one inside disagree on flags"]),
        (
            _beside(build={"started_at": "t1"}),
            ["the manifest beside it ({beside}) and the one inside disagree on build"],
        ),
        (
            _beside(build={"wheel_url": "x"}),
            ["the manifest beside it ({beside}) and the one inside disagree on build"],
        ),
        (
            _beside(build={"wheel_sha256": "f" * 64}, flags={}, cell="cu130"),
            ["{changedf}", "the manifest beside it ({beside}) and the one inside disagree on cell, flags"],
        ),
    ],
)
def test_a_manifest_beside_the_wheel_for_it_must_agree_with_it_and_the_one_inside(
    tmp_path: Path, text: str | None, problems: list[str]
) -> None:
    beside = tmp_path / build_outputs.MANIFEST_NAME
    if text is not None:
        beside.write_text(text)
    inside = json.loads(json.dumps(INSIDE))  # as read from the wheel: JSON's own strings
    said = [
        p.format(beside=beside, changed0=_changed(beside, "0" * 64), changedf=_changed(beside, "f" * 64))
        for p in problems
    ]
    assert wheel_check._beside_problems(tmp_path / NAME, SHA, inside) == said


@pytest.mark.parametrize("make", ["dangling link", "folder", "bad JSON"])
def test_a_manifest_beside_the_wheel_that_cannot_be_read_is_named_never_skipped(
    tmp_path: Path, make: str
) -> None:
    beside = tmp_path / build_outputs.MANIFEST_NAME
    if make == "dangling link":
        beside.symlink_to(tmp_path / "gone.json")
    elif make == "folder":
        beside.mkdir()
    else:
        beside.write_text("{")
    (problem,) = wheel_check._beside_problems(tmp_path / NAME, SHA, INSIDE)
    assert problem.startswith(f"the manifest beside it is unusable: {beside}: ")


PYTHON_ONLY = (
    "it holds no compiled extension its build expected (a Python-only build: FusedAdam and the other fused "
    "modules would fail at first use); build it with the core flags (APEX_CPP_EXT, APEX_CUDA_EXT)"
)


def _lists(modules: list[str], listed: list[str]) -> str:
    return f"it holds the modules {modules}, its manifest lists {listed}"


@pytest.mark.parametrize(
    ("members", "manifest", "problems"),
    [
        (["apex_C"], {"built_modules": ["apex_C"], "expected_modules": ["apex_C"]}, []),
        (["apex_C", "amp_C"], {"built_modules": ["apex_C", "amp_C"], "expected_modules": ["apex_C"]}, []),
        (["apex_C"], {"built_modules": [], "expected_modules": ["apex_C"]}, [_lists(["apex_C"], [])]),
        (["apex_C"], {"expected_modules": ["apex_C"]}, [_lists(["apex_C"], [])]),
        (
            ["apex_C"],
            {"built_modules": ["aaa"], "expected_modules": ["apex_C"]},
            [_lists(["apex_C"], ["aaa"])],
        ),
        (
            ["apex_C"],
            {"built_modules": ["zzz"], "expected_modules": ["apex_C"]},
            [_lists(["apex_C"], ["zzz"])],
        ),
        (
            ["apex_C"],
            {"built_modules": ["zzz", "apex_C"], "expected_modules": ["apex_C"]},
            [_lists(["apex_C"], ["apex_C", "zzz"])],
        ),
        (["apex_C"], {"built_modules": ["apex_C"], "expected_modules": []}, [PYTHON_ONLY]),
        (["apex_C"], {"built_modules": ["apex_C"]}, [PYTHON_ONLY]),
        (
            ["apex_C"],
            {"built_modules": ["apex_C"], "expected_modules": ["fused_b", "apex_C", "fused_a"]},
            ["expected modules missing from it: fused_a, fused_b (the silent Python-only fallback)"],
        ),
        (
            [],
            {"built_modules": [], "expected_modules": ["apex_C"]},
            [PYTHON_ONLY, "expected modules missing from it: apex_C (the silent Python-only fallback)"],
        ),
    ],
)
def test_the_wheel_must_hold_the_modules_its_build_expected_and_listed(
    tmp_path: Path, members: list[str], manifest: dict, problems: list[str]
) -> None:
    files = {**GOOD, **{f"{m}.cpython-312-x86_64-linux-gnu.so": b"" for m in members}}
    wheel = _wheel(tmp_path / "apex-0.1-cp312-cp312-linux_x86_64.whl", files)
    assert wheel_check._module_problems(wheel, manifest) == problems


def test_a_library_the_wheel_holds_or_the_list_allows_is_no_foreign_one(tmp_path: Path) -> None:
    """torch's own small module (it needs libtorch_python.so and libc.so.6), twice: once under a name of its own
    and once as the libtorch_python.so the wheel ships; and a member that is no ELF."""
    so = Path(torch._C.__file__).read_bytes()
    members = {"apex_C.so": so, "apex/lib/libtorch_python.so": so, "broken.so": b"not an ELF file"}
    wheel = _wheel(tmp_path / "apex-0.1-cp312-cp312-linux_x86_64.whl", {**GOOD, **members})
    needs = ["libtorch_python.so", "libc.so.6"]
    found, foreign = wheel_check._libraries(wheel, ("libc.so.*",))
    (unreadable,) = found.pop("broken.so")
    assert unreadable.startswith("unreadable ELF: ")
    assert found == {"apex_C.so": needs, "apex/lib/libtorch_python.so": needs}
    assert foreign == {"broken.so": [unreadable]}  # libtorch_python.so: the wheel's own; libc: allowed
    assert wheel_check._libraries(wheel, ())[1] == {
        "apex_C.so": ["libc.so.6"],
        "apex/lib/libtorch_python.so": ["libc.so.6"],
        "broken.so": [unreadable],
    }
