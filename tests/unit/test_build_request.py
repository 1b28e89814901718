"""The request records: every option of `build.py wheel` lands in one BuildRequest field, `build.py
image`/`matrix`/`plan` options in one RunRequest, and each survives its JSON round trip."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from toolchain.builder import request as build_request
from toolchain.builder.request import BuildRequest, Provenance
from toolchain.commands.parser import build_parser
from toolchain.runs.run_request import RunRequest

FULL = [
    "--apex-src",
    "~/apex",
    "--out",
    "dist",
    "--archs",
    "8.0;9.0+PTX",
    "--flags",
    "APEX_CPP_EXT",
    "--extras",
    "xentropy",
    "--jobs",
    "8",
    "--nvcc-threads",
    "2",
    "--memory-gib",
    "32.5",
    "--no-ccache",
    "--no-cuda-from-pypi",
    "--cuda-prefix",
    "/opt/cuda",
    "--no-gate",
    "--ignore-hardcoded-archs",
    "--install",
    "--naive",
    "--keep-build-dir",
    "--cell",
    "c1",
    "--apex-ref",
    "25.09",
    "--apex-source",
    "git+x@y",
    "--apex-commit",
    "abc",
    "--base-image",
    "base:1",
    "--base-image-digest",
    "sha256:00",
    "--wheel-hashes",
    "a.sha256",
    "--wheel-hashes",
    "b.sha256",
]


def test_every_option_is_a_field() -> None:
    dests = {a.dest for a in build_request.build_parser()._actions if a.dest != "help"}
    fields = {f.name for f in dataclasses.fields(BuildRequest)} - {"provenance"}
    assert dests == fields | {f.name for f in dataclasses.fields(Provenance)}


def test_parsed_values_are_typed_and_paths_kept_as_written() -> None:
    request = build_request.parse(FULL)
    assert request.apex_src == Path("~/apex") and request.src_dir == Path("~/apex").expanduser().absolute()
    assert request.out_dir.is_absolute() and request.cuda_prefix == Path("/opt/cuda")
    assert (request.jobs, request.nvcc_threads, request.memory_gib) == (8, 2, 32.5)
    assert (request.ccache, request.cuda_from_pypi) == ("off", "never")
    assert request.provenance.wheel_hashes == ("a.sha256", "b.sha256") and request.provenance.cell == "c1"
    defaults = build_request.parse(["--apex-src", "s", "--out", "o"])
    assert (defaults.ccache, defaults.cuda_from_pypi, defaults.provenance) == ("auto", "auto", Provenance())


def test_default_flags_are_handed_in_and_an_explicit_flags_wins() -> None:
    assert build_request.parse(["--apex-src", "s", "--out", "o"]).flags is None  # run directly: no default
    handed = build_request.parse(["--apex-src", "s", "--out", "o"], default_flags="APEX_CPP_EXT")
    assert handed.flags == "APEX_CPP_EXT"
    assert build_request.parse(FULL, default_flags="none").flags == "APEX_CPP_EXT"


def test_json_round_trip() -> None:
    for argv in (FULL, ["--apex-src", "s", "--out", "o"]):
        request = build_request.parse(argv)
        data = json.loads(json.dumps(request.to_json()))
        assert BuildRequest.from_json(data) == request


def test_run_request_from_each_command_that_builds() -> None:
    parser = build_parser()
    image = RunRequest.from_args(
        parser.parse_args(
            [
                "image",
                "--cuda",
                "12.4",
                "--out",
                "o",
                "--logs",
                "l",
                "--target",
                "runtime-slim",
                "--wheelhouse",
                "w",
                "--extra-ca",
                "ca.pem",
                "--progress",
                "plain",
                "--verify",
                "auto",
            ]
        )
    )
    assert image == RunRequest(
        out=Path("o"),
        logs=Path("l"),
        target="runtime-slim",
        wheelhouse=Path("w"),
        extra_ca=Path("ca.pem"),
        progress="plain",
        verify="auto",
    )
    assert (
        RunRequest.from_args(parser.parse_args(["matrix"])).verify == "auto"
    )  # the matrix verifies by default
    plan = RunRequest.from_args(parser.parse_args(["plan", "--apex-src", "src"]))
    assert plan.verify == "none" and plan.apex_src == Path("src")  # plan has no --verify: it builds nothing
    for request in (image, plan):
        assert RunRequest.from_json(json.loads(json.dumps(request.to_json()))) == request
