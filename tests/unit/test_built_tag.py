"""`make verify` and `make plan` with `make image`'s variables name the image `make image` made, on either
route: one rule (base_route.built_cell), the engine's store injected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import REPO
from toolchain.commands import cells, images
from toolchain.commands.parser import build_parser
from toolchain.console import Console
from toolchain.image import base_route, container_verify
from verify.runtime import exit_codes

MATRIX = REPO / "matrix.toml"
CELL = ["--matrix", str(MATRIX), "--cuda", "12.4"]


def routes(base: str = "auto", has=lambda cell: False):
    args = build_parser().parse_args(["plan", *CELL])
    cell = cells.resolve_cells(args, all_when_empty=False)[0]
    return cell, base_route.built_cell(cell, base, cells._reresolver(args), has)


def test_auto_names_nvidias_tag_unless_only_the_local_routes_image_is_here() -> None:
    nvidia, (same, note) = routes()
    assert same == nvidia and note is None and nvidia.base_route == "nvidia"  # nothing built: NVIDIA's
    _, (local, _) = routes("local")
    assert local.base_route == "local" and local.id != nvidia.id
    _, (found, note) = routes(has=lambda cell: cell.id == local.id)
    assert found.id == local.id and note is not None and local.id in note
    _, (both, _) = routes(has=lambda cell: True)
    assert both.id == nvidia.id  # NVIDIA's first when both are here
    _, (forced, _) = routes("nvidia", has=lambda cell: cell.id == local.id)
    assert forced.id == nvidia.id


@pytest.fixture
def local_id() -> str:
    return routes("local")[1][0].id


def test_plan_names_the_local_routes_image_when_that_is_what_image_built(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], local_id: str
) -> None:
    monkeypatch.setattr(base_route, "engine_has_image", lambda: lambda ref: ref == local_id)
    args = build_parser().parse_args(["plan", *CELL, "--json"])
    assert cells.cmd_plan(args, Console()) == exit_codes.OK
    assert json.loads(capsys.readouterr().out)["tag"] == local_id


def test_verify_of_a_cell_verifies_the_local_routes_image(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local_id: str
) -> None:
    monkeypatch.setattr(base_route, "engine_has_image", lambda: lambda ref: ref == local_id)
    monkeypatch.setattr(images, "require_engine", lambda name: None)
    seen: list[str] = []

    def verify_image(image: str, **k: object) -> tuple[int, None]:
        seen.append(image)
        return 0, None

    monkeypatch.setattr(container_verify, "verify_image", verify_image)
    args = build_parser().parse_args(["verify", *CELL, "--out", str(tmp_path)])
    assert images.cmd_verify(args, Console()) == exit_codes.OK
    assert seen == [local_id]
