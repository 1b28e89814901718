"""The suite's own cleanup (scripts/test_machine_state.py) decides from the engine's answers what to remove:
here those answers are recorded ones (the Docker API's image, container and build-cache records, read through
the Docker SDK's own models), so the decision runs without an engine. On an engine that was running before the
suite (shared with other builds) it removes only the images it made under its tags, never another's image,
never one that was there before, never the build cache; on an engine it started itself, everything new.
`reclaim` reads the free space of a disk the recorded engine keeps (what a removal or a prune gives back is
added to it), and the stop of a dockerd that ignores SIGTERM waits on a clock the test moves."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from docker.errors import APIError
from docker.models.containers import Container
from docker.models.images import Image

from tests.support import REPO

_spec = importlib.util.spec_from_file_location(
    "test_machine_state", REPO / "scripts" / "test_machine_state.py"
)
assert _spec and _spec.loader
machine_state = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(machine_state)

LABEL = machine_state.CELL_LABEL


def _image(
    short: str, tags: list[str], created: str, cell: str | None = None, size: int = 0
) -> dict[str, Any]:
    """One entry of GET /images/json + inspect, as the engine answers."""
    return {
        "Id": "sha256:" + short * (64 // len(short)),
        "RepoTags": tags or ["<none>:<none>"],
        "Created": created,
        "Size": size,
        "Config": {"Labels": {LABEL: cell} if cell else None},
    }


BEFORE = [  # on the engine when the snapshot was taken
    _image("a1", ["team/trainer:old"], "2026-12-01T00:00:00Z"),
    _image("a2", ["apex-ci-earlier:1"], "2026-12-01T00:00:01Z", "apex-ci-earlier"),  # an earlier run's
]
NEW = [  # made while the suite ran: its own, and another build's on the same engine
    _image(
        "b1", ["apex-ci-build:1", "localhost:5000/acme/apex-ci-build:1"], "2026-12-03T10:00:00Z", "apex-ci-x"
    ),
    _image("b2", [], "2026-12-03T10:00:01Z", "apex-ci-x"),  # left dangling by a rebuild under the suite's tag
    _image("b3", ["team/trainer:latest"], "2026-12-03T10:00:02Z"),  # another build, at the same time
    _image("b4", [], "2026-12-03T10:00:03Z"),  # another build's dangling layer
    _image("b5", ["team/trainer-apex-ci:1"], "2026-12-03T10:00:04Z", "team-cell"),  # apex-ci inside a name
    _image("b6", ["myapex-ci:1"], "2026-12-03T10:00:05Z"),  # the prefix is the start of the last part only
    _image("b7", ["apex-toolchain/base:bookworm"], "2026-12-03T09:59:00Z"),  # the base ensure-docker made
    _image("b8", ["registry:2"], "2025-05-01T00:00:00Z"),  # pulled while the suite ran: built long before
]


class RecordedApi:
    def __init__(self, engine: RecordedEngine) -> None:
        self.engine = engine

    def remove_container(self, container_id: str, **options: object) -> None:
        self.engine.removed.append(("container", container_id))
        self.engine.options.append(options)

    def prune_builds(self, **kwargs: object) -> dict[str, int]:
        """As the engine prunes: one record by its id, or the unused records least recently used first
        until no more than keep_storage bytes of them are left; a record shared with an image frees
        nothing on disk."""
        self.engine.removed.append(("cache", json.dumps(kwargs, sort_keys=True)))
        filters = kwargs.get("filters") or {}
        if isinstance(filters, dict) and "id" in filters:
            gone = [r for r in self.engine.cache if r["ID"] == filters["id"]]
        else:
            unused = sorted(
                (r for r in self.engine.cache if not r.get("InUse")), key=lambda r: r["LastUsedAt"]
            )
            left, gone = sum(r["Size"] for r in unused), []
            for record in unused:
                if left <= int(kwargs["keep_storage"]):  # type: ignore[call-overload]  # an int, as sent
                    break
                gone.append(record)
                left -= record["Size"]
        self.engine.cache = [r for r in self.engine.cache if r not in gone]
        reclaimed = sum(r["Size"] for r in gone if not r.get("Shared"))
        self.engine.free += reclaimed
        return {"SpaceReclaimed": reclaimed}


class RecordedImages:
    def __init__(self, engine: RecordedEngine) -> None:
        self.engine = engine

    def list(self, all: bool = False) -> list[Image]:  # noqa: A002 (the SDK's name)
        # as the engine answers: untagged images only when asked for all of them
        return [Image(attrs=a) for a in self.engine.images if all or a["RepoTags"] != ["<none>:<none>"]]

    def remove(self, image: str, **options: object) -> None:
        self.engine.removed.append(("image", image))
        self.engine.options.append(options)
        if image in self.engine.refuse:
            raise APIError(
                f"409 Client Error: Conflict (unable to remove {image}: in use by a running container)"
            )
        for attrs in [a for a in self.engine.images if a["Id"] == image]:  # by id: the image and its layers
            self.engine.images.remove(attrs)
            self.engine.free += attrs["Size"]


class RecordedContainers:
    def __init__(self, engine: RecordedEngine) -> None:
        self.engine = engine

    def list(self, all: bool = False, filters: dict | None = None) -> list[Container]:  # noqa: A002
        # the recorded containers have all exited: the engine lists them only when asked for all
        return [Container(attrs=a, client=self.engine) for a in self.engine.containers if all]  # type: ignore[arg-type]  # remove() calls client.api: the recorded one


class RecordedEngine:
    """The engine as the recorded answers describe it; every removal it is asked for is appended to `removed`."""

    def __init__(self, images: list[dict], containers: list[dict], cache: list[dict]) -> None:
        self.images, self.containers, self.cache = list(images), containers, cache
        self.removed: list[tuple[str, str]] = []
        self.options: list[dict[str, object]] = []  # what each image removal was asked with
        self.refuse: set[str] = set()  # images the engine will not remove (a running container uses them)
        self.api = RecordedApi(self)
        self.root = "/"  # DockerRootDir
        self.free = 0  # bytes free on the disk that holds it: what removals and prunes give back
        self.asked: list[str] = []  # the paths the disk was asked about

    def df(self) -> dict[str, list[dict]]:
        return {"BuildCache": list(self.cache)}

    def info(self) -> dict[str, str]:
        return {"DockerRootDir": self.root}

    def disk_usage(self, path: str | Path) -> SimpleNamespace:
        """shutil.disk_usage of the disk under the engine's root."""
        self.asked.append(str(path))
        return SimpleNamespace(total=2**50, used=2**50 - self.free, free=self.free)

    def close(self) -> None:
        pass


def _engine(monkeypatch: pytest.MonkeyPatch) -> RecordedEngine:
    engine = RecordedEngine(
        BEFORE + NEW,
        [
            {"Id": "c1", "Name": "/suite-run", "Image": NEW[0]["Id"]},
            {"Id": "c2", "Name": "/team-run", "Image": NEW[2]["Id"]},
        ],
        [
            {"ID": "old", "Size": 5},
            {"ID": "new1", "Size": 7 * 10**8},
            {"ID": "new2", "Parent": "new1", "Size": 9 * 10**8},
        ],
    )
    monkeypatch.setattr(machine_state, "_client", lambda: RecordedClient(engine))
    return engine


class RecordedClient:
    """client.images, client.containers, client.api, client.df(), as the Docker SDK's client offers them."""

    def __init__(self, engine: RecordedEngine) -> None:
        self.images = RecordedImages(engine)
        self.containers = RecordedContainers(engine)
        self.api = engine.api
        self.df = engine.df
        self.info = engine.info
        self.close = engine.close


def _state(tmp_path: Path, dockerd_pid: int | None, base_created: str | None = None) -> Path:
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps(
            {
                "started_at": 0,
                "dockerd_pid": dockerd_pid,
                "base_created": base_created,
                "images": sorted(i["Id"] for i in BEFORE),
                "build_cache": ["old"],
            }
        )
    )
    return state


def _id(short: str) -> str:
    return "sha256:" + short * (64 // len(short))


def test_on_a_shared_engine_only_the_suites_new_images_go(monkeypatch, tmp_path, capsys) -> None:
    engine = _engine(monkeypatch)
    engine.refuse = {"apex-ci-build:1"}  # one removal refused: the rest still go
    state = _state(tmp_path, dockerd_pid=None)
    assert machine_state.cleanup(state, dry_run=False) == 0
    assert engine.removed == [
        ("container", "c1"),  # its stopped container first: an image in use stays
        ("image", _id("b2")),  # newest first: an image before the one it was built on
        ("image", "apex-ci-build:1"),
        ("image", "localhost:5000/acme/apex-ci-build:1"),
    ]
    removed = {what for _, what in engine.removed}
    for kept in (
        "team/trainer:latest",
        "team/trainer:old",
        "apex-ci-earlier:1",
        "team/trainer-apex-ci:1",
        "registry:2",
    ):
        assert kept not in removed
    assert _id("b4") not in removed and "myapex-ci:1" not in removed and "c2" not in removed
    assert not any(kind == "cache" for kind, _ in engine.removed)  # another build may be using it
    # forced (a stopped container of another run may still name it), and its parent layers with it
    assert engine.options[0] == {"force": True}  # the container
    assert engine.options[1:] and all(o == {"force": True, "noprune": False} for o in engine.options[1:])
    out = capsys.readouterr().out
    assert "removing container suite-run (of apex-ci-build:1)\n" in out
    assert "not removed: 409 Client Error: Conflict (unable to remove apex-ci-build:1" in out
    assert "2 records (1.60 GB) new since the snapshot, kept" in out
    assert not state.exists()  # taken back: the next run snapshots afresh


def test_the_base_image_goes_only_when_this_run_created_it_and_the_engine_is_not_kept(
    monkeypatch, tmp_path
) -> None:
    engine = _engine(monkeypatch)
    machine_state.cleanup(_state(tmp_path, None, base_created="apex-toolchain/base:bookworm"), dry_run=False)
    assert ("image", "apex-toolchain/base:bookworm") in engine.removed
    engine.removed.clear()
    machine_state.cleanup(
        _state(tmp_path, None, base_created="apex-toolchain/base:bookworm"), dry_run=False, keep_engine=True
    )
    assert ("image", "apex-toolchain/base:bookworm") not in engine.removed
    assert ("image", "apex-ci-build:1") in engine.removed
    assert (tmp_path / "state.json").exists()  # kept for the next tier


def test_on_an_engine_this_run_started_everything_new_goes_and_the_new_cache_is_pruned(
    monkeypatch, tmp_path, capsys
) -> None:
    engine = _engine(monkeypatch)
    # this test's own pid stands in for dockerd: the cleanup sees it is no dockerd and leaves it alone
    assert machine_state.cleanup(_state(tmp_path, dockerd_pid=os.getpid()), dry_run=False) == 0
    removed = {what for kind, what in engine.removed if kind == "image"}
    assert {
        "team/trainer:latest",
        "myapex-ci:1",
        _id("b4"),
        "team/trainer-apex-ci:1",
        "registry:2",
    } <= removed
    assert "team/trainer:old" not in removed and "apex-ci-earlier:1" not in removed  # there before
    pruned = [json.loads(k) for kind, k in engine.removed if kind == "cache"]
    # one record a call, the child first, each unused or not; the record there before is not touched
    assert pruned == [{"all": True, "filters": {"id": "new2"}}, {"all": True, "filters": {"id": "new1"}}]
    out = capsys.readouterr().out
    assert "removing 2 build-cache records (1.60 GB) made since the snapshot" in out
    assert "    freed 1.60 GB\n" in out
    assert f"process {os.getpid()} is" in out


def test_a_dry_run_names_what_it_would_remove_and_removes_nothing(monkeypatch, tmp_path, capsys) -> None:
    engine = _engine(monkeypatch)
    engine.cache = [{"ID": "old", "Size": 5}, {"ID": "empty", "Size": 0}]  # a record that holds nothing
    state = _state(tmp_path, dockerd_pid=None)
    machine_state.cleanup(state, dry_run=True)
    assert engine.removed == [] and state.exists()
    out = capsys.readouterr().out
    assert "would remove image apex-ci-build:1" in out and "team/trainer" not in out
    assert "build cache: 1 records (0.00 GB) new since the snapshot, kept" in out


def test_what_counts_as_the_suites_tag() -> None:
    ours = machine_state._suite_tag
    prefix = machine_state.SUITE_TAG_PREFIX
    assert ours("apex-ci-build:1", prefix) and ours("localhost:5000/acme/apex-ci-build:1", prefix)
    assert ours("localhost:5000/apex-ci-build", prefix)  # no tag: the registry's port is not one
    assert ours(
        "apex-6424da3-torch2.11.0-cu13.0-py3.12-ubuntu24.04:latest", prefix
    )  # the apex-image tier's cell id
    assert not ours("myapex-ci:1", prefix) and not ours("apex-ci/trainer:1", prefix)
    assert not ours("team/trainer:apex-ci", prefix)  # a tag is not a repository


def test_reclaim_on_a_shared_engine_removes_nothing(monkeypatch, tmp_path, capsys) -> None:
    engine = _engine(monkeypatch)
    assert machine_state.reclaim(_state(tmp_path, None), free_gib=1e9, dry_run=False) == 0
    assert engine.removed == []
    assert "was running before the suite, so nothing is reclaimed" in capsys.readouterr().out


def test_a_snapshot_records_what_is_there_leaves_out_the_base_it_made_and_is_kept_once(
    monkeypatch, tmp_path, capsys
) -> None:
    engine = _engine(monkeypatch)
    state = tmp_path / "state.json"
    assert machine_state.snapshot(state, 4242, "apex-toolchain/base:bookworm") == 0
    data = json.loads(state.read_text())
    assert data["dockerd_pid"] == 4242 and data["base_created"] == "apex-toolchain/base:bookworm"
    assert _id("b7") not in data["images"] and _id("a1") in data["images"]
    assert len(data["images"]) == len(BEFORE + NEW) - 1
    assert data["build_cache"] == ["new1", "new2", "old"]
    assert (
        "recorded 9 images and 3 build-cache records; dockerd 4242 started by this run"
        in capsys.readouterr().out
    )
    engine.images = engine.images[:1]
    assert machine_state.snapshot(state, None, None) == 0  # a second tier keeps the first snapshot
    assert json.loads(state.read_text()) == data
    plain = tmp_path / "plain.json"
    machine_state.snapshot(plain, None, None)
    assert json.loads(plain.read_text())["images"] == [_id("a1")]
    assert "started by this run" not in capsys.readouterr().out


def test_an_unusable_snapshot_is_exit_2_and_removes_nothing(monkeypatch, tmp_path, capsys) -> None:
    engine = _engine(monkeypatch)
    broken = tmp_path / "state.json"
    broken.write_text('{"images": []}')  # no build_cache
    assert machine_state.cleanup(broken, dry_run=False) == 2
    assert machine_state.reclaim(broken, free_gib=1, dry_run=False) == 2
    assert machine_state.cleanup(tmp_path / "missing.json", dry_run=False) == 2
    assert engine.removed == [] and "no usable snapshot" in capsys.readouterr().err


def _process(tmp_path: Path, name: str, ignore_term: bool = False) -> int:
    """A real process named `name` (sleep under that name), not our child: as a daemon is, so that whoever
    reaps it is not this test."""
    exe = tmp_path / name
    exe.symlink_to(shutil.which("sleep") or "/bin/sleep")
    trap = "trap '' TERM; " if ignore_term else ""  # an ignored signal stays ignored across exec
    started = subprocess.run(
        ["sh", "-c", f'{trap}"{exe}" 60 >/dev/null 2>&1 & echo $!'],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(started.stdout)


def test_stopping_the_dockerd_this_run_started_and_nothing_else(monkeypatch, tmp_path, capsys) -> None:
    pid = _process(tmp_path, "dockerd")
    neighbour = _process(tmp_path, "containerd")  # sorts before "dockerd": a name other than it, not after it
    monkeypatch.setattr(machine_state, "DOCKERD_STOP_S", 20)
    try:
        machine_state._stop_dockerd(pid, dry_run=True)
        assert Path(f"/proc/{pid}").exists() and f"would stop dockerd {pid}" in capsys.readouterr().out
        machine_state._stop_dockerd(pid, dry_run=False)
        assert f"stopped dockerd {pid}" in capsys.readouterr().out
        machine_state._stop_dockerd(neighbour, dry_run=False)
        assert Path(f"/proc/{neighbour}").exists()
        assert (
            f"process {neighbour} is 'containerd', not the dockerd this run started"
            in capsys.readouterr().out
        )
    finally:
        for left in (pid, neighbour):
            if Path(f"/proc/{left}").exists():
                os.kill(left, signal.SIGKILL)
    machine_state._stop_dockerd(pid, dry_run=False)
    assert f"dockerd {pid}: already gone" in capsys.readouterr().out
    machine_state._stop_dockerd(os.getpid(), dry_run=False)  # not a dockerd: left alone
    assert "not the dockerd this run started: left alone" in capsys.readouterr().out


class Clock:
    """time.monotonic and time.sleep on a clock the test moves: each sleep takes what it asks plus `late`
    (a sleeper woken late), and none takes real time."""

    def __init__(self, late: float) -> None:
        self.now, self.late, self.woken_at = 1000.0, late, [1000.0]

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert self.now < 1000.0 + 10 * machine_state.DOCKERD_STOP_S, "still waiting long after the deadline"
        self.now += seconds + self.late
        self.woken_at.append(self.now)


@pytest.mark.parametrize("late", [0.0, 0.2], ids=["on-time", "woken-late"])
def test_a_dockerd_that_does_not_stop_is_waited_for_until_the_deadline_and_named(
    monkeypatch, tmp_path, capsys, late
) -> None:
    pid = _process(tmp_path, "dockerd", ignore_term=True)
    clock = Clock(late)
    monkeypatch.setattr(machine_state, "time", clock)
    try:
        machine_state._stop_dockerd(pid, dry_run=False)
        assert Path(f"/proc/{pid}").exists()  # SIGTERM ignored
    finally:
        os.kill(pid, signal.SIGKILL)
    deadline = 1000.0 + machine_state.DOCKERD_STOP_S
    # it polls while the deadline is ahead, and stops at the first look past it
    assert clock.woken_at[-2] < deadline <= clock.woken_at[-1]
    assert (
        f"dockerd {pid} still running {machine_state.DOCKERD_STOP_S} s after SIGTERM: stop it by hand"
        in capsys.readouterr().out
    )


G = 2**30  # a GiB, as reclaim counts


def _record(record_id: str, gib: float, used_at: str, shared: bool = False, in_use: bool = False) -> dict:
    """One BuildCache record of GET /system/df, as the engine answers."""
    return {
        "ID": record_id,
        "Size": int(gib * G),
        "LastUsedAt": used_at,
        "Shared": shared,  # its layers are an image's too: pruning it frees nothing
        "InUse": in_use,
    }


RECLAIM = {  # free bytes, our dangling image's GiB (None: none), build cache -> images removed, keep_storage of each prune, printed
    "enough-already": (10 * G, 1, [_record("x", 4, "t1")], [], [], ["10.0 GiB free", "nothing to reclaim"]),
    "one-byte-short": (
        10 * G - 1,
        None,
        [_record("x", 4, "t1")],
        [],
        [4 * G - 1],  # short by one byte: all but one byte of the unused cache kept
        ["freed 4.29 GB", "14.0 GiB free under Docker's root (10 wanted)"],
    ),
    "dangling-image-is-enough": (
        9 * G,
        1,
        [_record("x", 4, "t1")],
        [_id("b2")],
        [],
        ["dangling image sha256:b2b2b2b2b2b2 (cell apex-ci-x)"],
    ),
    "one-prune": (
        8 * G,
        1,
        [
            _record("z", 2, "t0", in_use=True),
            _record("x", 4, "t1"),
            _record("y", 3, "t2"),
            _record("mount", 0, "t3"),  # an empty record: it counts nothing
        ],
        [_id("b2")],
        [6 * G],  # 7 GiB unused, 1 short: the least recent 1 GiB goes (the whole of x), 6 kept
        ["7.52 GB unused, keeping 6.44 GB", "freed 4.29 GB", "13.0 GiB free"],
    ),
    "shared-records-then-an-earlier-runs-image": (
        8 * G,
        None,
        [
            _record("a", 4, "t1", shared=True),
            _record("b", 4, "t2", shared=True),
            _record("c", 4, "t3", shared=True),
        ],
        [_id("a2")],  # still short after the cache: an earlier run's tagged image
        [10 * G, 6 * G, 0],  # each frees nothing; the last round keeps nothing
        [
            "12.88 GB unused, keeping 10.74 GB",
            "keeping 0.00 GB",
            "    freed 0.00 GB\n",  # a shared record gives back nothing on disk
            "earlier run's image apex-ci-earlier:1 (cell apex-ci-earlier)",
        ],
    ),
    "never-enough": (
        1 * G,
        None,
        [_record("x", 4, "t1"), _record("z", 1, "t0", in_use=True)],
        [_id("a2")],
        [0, 0],  # short by more than all of it: keep nothing, once a pass
        ["4.29 GB unused, keeping 0.00 GB", "7.0 GiB free under Docker's root (10 wanted)"],
    ),
}


@pytest.mark.parametrize("case", RECLAIM)
def test_reclaim_on_the_engine_this_run_started_frees_ours_least_recent_first_and_no_more(
    monkeypatch, tmp_path, capsys, case
) -> None:
    free, dangling, cache, images_removed, keeps, printed = RECLAIM[case]
    images = [
        _image("a1", ["team/trainer:old"], "2026-12-01T00:00:00Z", size=5 * G),  # not ours: never removed
        _image(
            "a2", ["apex-ci-earlier:1", "apex-ci-earlier:2"], "2026-12-01T00:00:01Z", "apex-ci-earlier", 2 * G
        ),
    ]
    if dangling is not None:
        images.append(_image("b2", [], "2026-12-03T10:00:01Z", "apex-ci-x", size=dangling * G))
    engine = RecordedEngine(images, [], cache)
    engine.free, engine.root = free, str(tmp_path)
    monkeypatch.setattr(machine_state, "_client", lambda: RecordedClient(engine))
    monkeypatch.setattr(machine_state, "shutil", SimpleNamespace(disk_usage=engine.disk_usage))
    assert machine_state.reclaim(_state(tmp_path, dockerd_pid=4242), free_gib=10, dry_run=False) == 0
    assert [what for kind, what in engine.removed if kind == "image"] == images_removed
    assert all(o == {"force": True} for o in engine.options)
    prunes = [json.loads(k) for kind, k in engine.removed if kind == "cache"]
    assert prunes == [{"all": True, "keep_storage": keep} for keep in keeps]
    out = capsys.readouterr().out
    for line in printed:
        assert line in out
    assert set(engine.asked) == {str(tmp_path)}  # the disk under the engine's root


def test_free_space_is_read_under_the_engines_root_or_at_slash_when_it_is_not_here(
    monkeypatch, tmp_path
) -> None:
    engine = RecordedEngine([], [], [])
    engine.free = 3 * G + G // 2
    monkeypatch.setattr(machine_state, "shutil", SimpleNamespace(disk_usage=engine.disk_usage))
    engine.root = str(tmp_path)
    assert machine_state._free_gib(RecordedClient(engine)) == 3.5
    engine.root = str(tmp_path / "not-here")  # the engine runs in another mount namespace
    assert machine_state._free_gib(RecordedClient(engine)) == 3.5
    assert engine.asked == [str(tmp_path), "/"]


def test_reclaim_dry_run_and_an_image_in_use(monkeypatch, tmp_path, capsys) -> None:
    engine = _engine(monkeypatch)
    engine.cache = []
    monkeypatch.setattr(machine_state, "shutil", SimpleNamespace(disk_usage=engine.disk_usage))
    state = _state(tmp_path, dockerd_pid=4242)
    machine_state.reclaim(state, free_gib=1, dry_run=True)
    out = capsys.readouterr().out
    assert (
        engine.removed == [] and "would remove dangling image" in out and "would remove earlier run's" in out
    )
    engine.refuse = {_id("b2")}  # in use: named, and the rest still go
    machine_state.reclaim(state, free_gib=1, dry_run=False)
    assert [what for kind, what in engine.removed if kind == "image"] == [_id("b2"), _id("a2")]
    assert "not removed: 409 Client Error" in capsys.readouterr().out


def test_pruning_goes_record_by_record_and_names_what_it_could_not(monkeypatch, tmp_path, capsys) -> None:
    engine = _engine(monkeypatch)
    r1, r2, r3 = (str(n) * 64 for n in (1, 2, 3))  # the engine's ids are 64 hex digits
    engine.cache = [
        {"ID": r1, "Size": 5},
        {"ID": r2, "Parent": r1, "Size": 5},
        {"ID": r3, "Parent": r2, "Size": 5},
    ]

    def refuse(**kwargs: object) -> dict[str, int]:
        engine.removed.append(("cache", json.dumps(kwargs, sort_keys=True)))
        raise RuntimeError("record in use")

    monkeypatch.setattr(engine.api, "prune_builds", refuse)
    machine_state._prune_records(RecordedClient(engine), [r1, r2, r3])
    tried = [json.loads(k)["filters"]["id"] for _, k in engine.removed]
    assert tried == [r3, r2, r1, r3, r2, r1]  # two rounds, the child first each time
    out = capsys.readouterr().out
    assert (
        "freed 0.00 GB; 3 not pruned (in use?); errors: 333333333333 (record in use), 222222222222 (" in out
    )
    assert out.count("(record in use)") == 5  # the first five of six


def test_pruning_a_record_that_frees_nothing_says_so(monkeypatch, capsys) -> None:
    engine = _engine(monkeypatch)
    engine.cache = [{"ID": "layers", "Size": 9 * 10**8, "Shared": True}]  # an image holds its layers
    machine_state._prune_records(RecordedClient(engine), ["layers"])
    assert engine.cache == []
    assert capsys.readouterr().out == "    freed 0.00 GB\n"


def test_without_an_engine_it_says_so_and_exits_3(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(SystemExit) as stopped:
        machine_state._client()
    assert stopped.value.code == 3
    assert "no Docker engine answers" in capsys.readouterr().err


def test_the_command_line_reaches_each_command(monkeypatch, tmp_path, capsys) -> None:
    engine = _engine(monkeypatch)
    state = tmp_path / "cli-state.json"
    # a command read from a real argv is a new string, not the interned literal the script compares with
    snapshot, reclaim = "".join(["snap", "shot"]), "".join(["re", "claim"])
    assert machine_state.main([snapshot, str(state), "--base-created", "b:1"]) == 0
    assert json.loads(state.read_text())["dockerd_pid"] is None
    engine.images = [*engine.images, _image("c1", ["acme/team-trainer:new"], "2026-12-03T11:00:00Z")]
    assert machine_state.main([reclaim, str(state), "--free-gib", "0"]) == 0
    assert machine_state.main(["cleanup", str(state), "--dry-run", "--tag-prefix", "team"]) == 0
    out = capsys.readouterr().out
    assert "nothing to reclaim" in out and "would remove image acme/team-trainer:new" in out
    assert "apex-ci-build" not in out  # the prefix given, not the default
    assert engine.removed == [] and state.exists()
    assert machine_state.main(["cleanup", str(state), "--keep-engine"]) == 0 and state.exists()
    assert ("image", "apex-ci-build:1") not in engine.removed  # there before this snapshot
    with pytest.raises(SystemExit):
        machine_state.main(["reclaim", str(state)])  # --free-gib is required
    with pytest.raises(SystemExit):
        machine_state.main([])  # a command is required: no default one runs


def test_an_earlier_runs_image_needs_both_our_label_and_our_tag() -> None:
    ours = machine_state._tagged_of_ours

    def image(tags: list[str], cell: str | None) -> Image:
        return Image(attrs=_image("d1", tags, "2026-12-02T00:00:00Z", cell))

    assert ours(image(["apex-ci-build:1"], "apex-ci-x"))
    assert not ours(
        image(["team/trainer:1"], "apex-ci-x")
    )  # our label under another name: retagged, not ours to remove
    assert not ours(image(["apex-ci-build:1"], None))  # our tag's name, no label: not made by the suite
    assert not ours(image(["apex-ci-build:1"], "team-cell"))


def test_run_as_a_script_it_does_what_its_command_line_asks(tmp_path) -> None:
    state = tmp_path / "state.json"
    state.write_text("{}")  # a snapshot already there: kept, before any engine is asked
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "test_machine_state.py"), "snapshot", str(state)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"{state} exists: keeping the first snapshot of this run" in done.stdout
