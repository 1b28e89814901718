"""The suite's own cleanup (scripts/test_machine_state.py) decides from the engine's answers what to remove:
here those answers are recorded ones (the Docker API's image, container and build-cache records, read through
the Docker SDK's own models), so the decision runs without an engine. On an engine that was running before the
suite (shared with other builds) it removes only the images it made under its tags, never another's image,
never one that was there before, never the build cache; on an engine it started itself, everything new."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest
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


def _image(short: str, tags: list[str], created: str, cell: str | None = None) -> dict[str, Any]:
    """One entry of GET /images/json + inspect, as the engine answers."""
    return {
        "Id": "sha256:" + short * (64 // len(short)),
        "RepoTags": tags or ["<none>:<none>"],
        "Created": created,
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
]


class RecordedApi:
    def __init__(self, engine: RecordedEngine) -> None:
        self.engine = engine

    def remove_container(self, container_id: str, **options: object) -> None:
        self.engine.removed.append(("container", container_id))
        self.engine.options.append(options)

    def prune_builds(self, **kwargs: object) -> dict[str, int]:
        self.engine.removed.append(("cache", json.dumps(kwargs, sort_keys=True)))
        filters = kwargs.get("filters") or {}
        if isinstance(filters, dict) and "id" in filters:
            self.engine.cache = [r for r in self.engine.cache if r["ID"] != filters["id"]]
        return {"SpaceReclaimed": 1000}


class RecordedImages:
    def __init__(self, engine: RecordedEngine) -> None:
        self.engine = engine

    def list(self, all: bool = False) -> list[Image]:  # noqa: A002 (the SDK's name)
        # as the engine answers: untagged images only when asked for all of them
        return [Image(attrs=a) for a in self.engine.images if all or a["RepoTags"] != ["<none>:<none>"]]

    def remove(self, image: str, **options: object) -> None:
        self.engine.removed.append(("image", image))
        self.engine.options.append(options)


class RecordedContainers:
    def __init__(self, engine: RecordedEngine) -> None:
        self.engine = engine

    def list(self, all: bool = False, filters: dict | None = None) -> list[Container]:  # noqa: A002
        # the recorded containers have all exited: the engine lists them only when asked for all
        return [Container(attrs=a, client=self.engine) for a in self.engine.containers if all]  # type: ignore[arg-type]  # remove() calls client.api: the recorded one


class RecordedEngine:
    """The engine as the recorded answers describe it; every removal it is asked for is appended to `removed`."""

    def __init__(self, images: list[dict], containers: list[dict], cache: list[dict]) -> None:
        self.images, self.containers, self.cache = images, containers, cache
        self.removed: list[tuple[str, str]] = []
        self.options: list[dict[str, object]] = []  # what each image removal was asked with
        self.api = RecordedApi(self)

    def df(self) -> dict[str, list[dict]]:
        return {"BuildCache": list(self.cache)}

    def info(self) -> dict[str, str]:
        return {"DockerRootDir": "/"}

    def close(self) -> None:
        pass


def _engine(monkeypatch: pytest.MonkeyPatch) -> RecordedEngine:
    engine = RecordedEngine(
        BEFORE + NEW,
        [
            {"Id": "c1", "Name": "/suite-run", "Image": NEW[0]["Id"]},
            {"Id": "c2", "Name": "/team-run", "Image": NEW[2]["Id"]},
        ],
        [{"ID": "old", "Size": 5}, {"ID": "new1", "Size": 7}, {"ID": "new2", "Parent": "new1", "Size": 9}],
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
    state = _state(tmp_path, dockerd_pid=None)
    assert machine_state.cleanup(state, dry_run=False) == 0
    assert engine.removed[0] == ("container", "c1")  # its stopped container first: an image in use stays
    assert sorted(engine.removed[1:]) == sorted(
        [("image", "apex-ci-build:1"), ("image", "localhost:5000/acme/apex-ci-build:1"), ("image", _id("b2"))]
    )
    removed = {what for _, what in engine.removed}
    for kept in ("team/trainer:latest", "team/trainer:old", "apex-ci-earlier:1", "team/trainer-apex-ci:1"):
        assert kept not in removed
    assert _id("b4") not in removed and "myapex-ci:1" not in removed and "c2" not in removed
    assert not any(kind == "cache" for kind, _ in engine.removed)  # another build may be using it
    # forced (a stopped container of another run may still name it), and its parent layers with it
    assert engine.options[0] == {"force": True}  # the container
    assert engine.options[1:] and all(o == {"force": True, "noprune": False} for o in engine.options[1:])
    assert "2 records (0.00 GB) new since the snapshot, kept" in capsys.readouterr().out
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
    assert {"team/trainer:latest", "myapex-ci:1", _id("b4"), "team/trainer-apex-ci:1"} <= removed
    assert "team/trainer:old" not in removed and "apex-ci-earlier:1" not in removed  # there before
    pruned = [json.loads(k)["filters"]["id"] for kind, k in engine.removed if kind == "cache"]
    assert pruned == ["new2", "new1"]  # the child first; the record there before is not touched
    assert f"process {os.getpid()} is" in capsys.readouterr().out


def test_a_dry_run_names_what_it_would_remove_and_removes_nothing(monkeypatch, tmp_path, capsys) -> None:
    engine = _engine(monkeypatch)
    state = _state(tmp_path, dockerd_pid=None)
    machine_state.cleanup(state, dry_run=True)
    assert engine.removed == [] and state.exists()
    out = capsys.readouterr().out
    assert "would remove image apex-ci-build:1" in out and "team/trainer" not in out


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
        "recorded 8 images and 3 build-cache records; dockerd 4242 started by this run"
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


def test_stopping_the_dockerd_this_run_started_and_nothing_else(monkeypatch, tmp_path, capsys) -> None:
    import subprocess

    fake = tmp_path / "dockerd"  # a real process named dockerd (sleep under that name), not our child: as
    fake.symlink_to("/bin/sleep")  # a daemon is, so that whoever reaps it is not this test
    started = subprocess.run(
        ["sh", "-c", f'"{fake}" 60 >/dev/null 2>&1 & echo $!'], capture_output=True, text=True
    )
    pid = int(started.stdout)
    monkeypatch.setattr(machine_state, "DOCKERD_STOP_S", 20)
    try:
        machine_state._stop_dockerd(pid, dry_run=True)
        assert Path(f"/proc/{pid}").exists() and f"would stop dockerd {pid}" in capsys.readouterr().out
        machine_state._stop_dockerd(pid, dry_run=False)
        assert f"stopped dockerd {pid}" in capsys.readouterr().out
    finally:
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, 9)
    machine_state._stop_dockerd(pid, dry_run=False)
    assert f"dockerd {pid}: already gone" in capsys.readouterr().out
    machine_state._stop_dockerd(os.getpid(), dry_run=False)  # not a dockerd: left alone
    assert "not the dockerd this run started: left alone" in capsys.readouterr().out


def test_reclaim_on_the_engine_this_run_started_frees_ours_least_recent_first(
    monkeypatch, tmp_path, capsys
) -> None:
    engine = _engine(monkeypatch)
    engine.cache = [{"ID": "x", "Size": 4e9, "InUse": False}, {"ID": "y", "Size": 1e9, "InUse": True}]
    state = _state(tmp_path, dockerd_pid=4242)
    assert machine_state.reclaim(state, free_gib=1e9, dry_run=False) == 0  # never enough: every step runs
    removed = [what for kind, what in engine.removed if kind == "image"]
    assert removed == [_id("b2"), _id("a2")]  # our dangling image, then an earlier run's tagged one
    assert all(o.get("force") is True for o in engine.options)
    prunes = [json.loads(k) for kind, k in engine.removed if kind == "cache"]
    assert prunes[0] == {"all": True, "keep_storage": 0}  # short by more than all of it: keep nothing
    out = capsys.readouterr().out
    assert "least recently used build cache: 4.00 GB unused" in out and "dangling image" in out
    engine.removed.clear()
    assert machine_state.reclaim(state, free_gib=0, dry_run=False) == 0
    assert engine.removed == [] and "nothing to reclaim" in capsys.readouterr().out
    machine_state.reclaim(state, free_gib=1e9, dry_run=True)
    assert engine.removed == [] and "would remove" in capsys.readouterr().out


def test_pruning_goes_record_by_record_and_names_what_it_could_not(monkeypatch, tmp_path, capsys) -> None:
    engine = _engine(monkeypatch)

    def refuse(**kwargs: object) -> dict[str, int]:
        engine.removed.append(("cache", json.dumps(kwargs, sort_keys=True)))
        raise RuntimeError("record in use")

    monkeypatch.setattr(engine.api, "prune_builds", refuse)
    machine_state._prune_records(RecordedClient(engine), ["new1", "new2"])
    tried = [json.loads(k)["filters"]["id"] for _, k in engine.removed]
    assert tried == ["new2", "new1", "new2", "new1"]  # two rounds, the child first each time
    out = capsys.readouterr().out
    assert "2 not pruned (in use?)" in out and "errors: new2 (record in use)" in out


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
