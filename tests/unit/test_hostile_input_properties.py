"""Generated hostile input (hypothesis, derandomized) for the surfaces added since round three, in-process on
real parts: registry answers for the signature check served by a real HTTP server on 127.0.0.1 and signed
with a real ECDSA key (so a validly signed payload of the wrong shape reaches the payload check), wheel
files for the index's checks, and published index folders with their JSON damaged. Each property: no
exception but the documented ones (exit 1 or 3), and for the index, the pages always agree; raw requests to the
index server: answered or closed, nothing from outside its folder, still serving after each."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.unit.test_cli_properties import PROPERTY
from toolchain.errors import EnvironmentUnavailable
from toolchain.image import signature
from toolchain.index import publish, wheel_check
from verify.runtime import exit_codes

pytestmark = pytest.mark.property

DIGEST = "sha256:" + "a" * 64
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
KEYS = ("layers", "digest", "annotations", signature.SIGNATURE_ANNOTATION, "critical", "image", "type")


def _json_like() -> st.SearchStrategy[Any]:
    """Values near the real shapes: dicts keyed by the names the check reads, with anything as values."""
    return st.recursive(
        JSON_VALUES,
        lambda inner: (
            st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=4)
            | st.lists(inner, max_size=3)
        ),
        max_leaves=16,
    )


class _Registry(http.server.BaseHTTPRequestHandler):
    answers: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 (the base class's name)
        body = next((v for k, v in self.answers.items() if self.path.endswith(k)), None)
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return None


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}/apex"
    server.shutdown()


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path_factory.mktemp("key") / "cosign.pub"
    path.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, path


def _signed(private: Any, payload: bytes) -> str:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    return base64.b64encode(private.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()


@settings(PROPERTY, max_examples=60)
@example(  # the one outcome that passes: a valid signature over a payload that names this digest
    artifact={},
    payload={"critical": {"type": signature.PAYLOAD_TYPE, "image": {"docker-manifest-digest": DIGEST}}},
    raw="signed",
)
@given(artifact=_json_like(), payload=_json_like(), raw=st.sampled_from(["json", "bytes", "signed"]))
def test_every_registry_answer_is_signed_or_refused_never_a_traceback(
    registry: str, key: tuple[Any, Path], artifact: Any, payload: Any, raw: str
) -> None:
    private, key_path = key
    payload_bytes = json.dumps(payload).encode()
    blob = "sha256:" + hashlib.sha256(payload_bytes).hexdigest()
    if raw == "signed":  # a valid signature over a payload of any shape: the payload check must hold
        artifact = {
            "layers": [
                {
                    "digest": blob,
                    "annotations": {signature.SIGNATURE_ANNOTATION: _signed(private, payload_bytes)},
                }
            ]
        }
    body = json.dumps(artifact).encode() if raw != "bytes" else json.dumps(artifact).encode()[:-1] + b"\xff"
    _Registry.answers = {f"/manifests/{DIGEST.replace(':', '-')}.sig": body, f"/blobs/{blob}": payload_bytes}
    try:
        signature.check(registry, DIGEST, signature.Policy("key", key=key_path))
    except signature.SignatureRefused as refused:
        assert refused.exit_code == exit_codes.FAILED and "\n" not in str(refused)
    except EnvironmentUnavailable as unavailable:
        assert unavailable.exit_code == exit_codes.ENVIRONMENT
    else:  # signed: only a payload that claims this very digest
        assert isinstance(payload, dict) and payload["critical"]["image"]["docker-manifest-digest"] == DIGEST


MEMBER_NAMES = st.sampled_from(
    [
        "apex/__init__.py",
        "apex-0.1.dist-info/METADATA",
        "apex-0.1.dist-info/RECORD",
        "apex-0.1.dist-info/build-manifest.json",
        "apex-0.1.dist-info/verify-static.json",
        "apex-0.1.dist-info/WHEEL",
        "amp_C.cpython-312-x86_64-linux-gnu.so",
        "../evil.py",
        "/abs/evil",
        "other-0.1.dist-info/METADATA",
    ]
)


@settings(PROPERTY, max_examples=80)
@given(
    members=st.dictionaries(
        MEMBER_NAMES, st.binary(max_size=64) | JSON_VALUES.map(lambda v: json.dumps(v).encode()), max_size=7
    ),
    name=st.sampled_from(
        [
            "apex-0.1-cp312-cp312-linux_x86_64.whl",
            "apex-0.1+x١-py3-none-any.whl",
            "apex_x-0.1-py3-none-any.whl",
            "apex.whl",
        ]
    ),
)
def test_every_wheel_file_is_checked_or_refused_never_a_traceback(
    tmp_path_factory: pytest.TempPathFactory, members: dict[str, bytes], name: str
) -> None:
    folder = tmp_path_factory.mktemp("wheel")
    wheel = folder / name
    with zipfile.ZipFile(wheel, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    result = wheel_check.check(wheel, (), folder)
    assert isinstance(result, wheel_check.Refusal)  # none of these is a stamped, gated build
    assert result.reasons and all("\n" not in r for r in result.reasons)


FOLDER_FILES = st.sampled_from(["build-manifest.json", "verify-static.json", publish.CHECK_FILE])


@settings(PROPERTY, max_examples=40)
@given(damage=st.dictionaries(FOLDER_FILES, JSON_VALUES, min_size=1, max_size=3))
def test_every_damaged_published_folder_leaves_the_pages_in_agreement(
    tmp_path_factory: pytest.TempPathFactory, damage: dict[str, Any]
) -> None:
    from tests.unit.test_owned_tree import STACK, _checked_wheel

    root = tmp_path_factory.mktemp("index")
    index = root / "index"
    publish.add(index, [_checked_wheel(root)])
    (folder,) = (index / STACK / "files").iterdir()
    for file, value in damage.items():
        (folder / file).write_text(json.dumps(value))
    publish.add(index, [_checked_wheel(root, "0.2+cpu.torch2.13")])
    listed = [
        f["filename"] for f in json.loads((index / STACK / "simple/apex/index.json").read_text())["files"]
    ]
    html = (index / STACK / "simple/apex/index.html").read_text()
    stacks = json.loads((index / "stacks.json").read_text())["stacks"][0]["wheels"]
    assert sorted(listed) == sorted(stacks)
    assert all(name in html for name in listed) and html.count("<a ") == len(listed)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    from tests.unit.test_index_serve import Server

    root = tmp_path_factory.mktemp("served")
    index = root / "index"
    (index / "stack" / "simple").mkdir(parents=True)
    (index / "stacks.json").write_text("{}")
    (index / "stack" / "simple" / "index.html").write_text("<html>inside</html>")
    (index / "stack" / "simple" / "index.json").write_text('{"inside": true}')
    (root / "secret.txt").write_text("OUTSIDE-SECRET")
    (index / "leak").symlink_to(root / "secret.txt")
    server = Server(index, "--timeout", "2")
    yield server, index
    code, err = server.stop()
    assert code == exit_codes.FAILED and "Traceback" not in err, err


REQUEST_PATHS = st.sampled_from(
    ["/", "/stack/simple/", "/../secret.txt", "/leak", "/%2e%2e/secret.txt", "/stack/simple/index.json"]
) | st.text(alphabet=st.characters(codec="latin-1"), max_size=40).map(lambda t: "/" + t)


@settings(PROPERTY, max_examples=60)
@given(
    method=st.sampled_from(["GET", "HEAD", "POST", "BREW", "", "GET GET"]),
    path=REQUEST_PATHS,
    accept=st.sampled_from(["", "application/vnd.pypi.simple.v1+json", "*/*", "x" * 5000]),
    tail=st.sampled_from(["\r\n\r\n", "\r\n", "", "\n\n", "\r\nHost: x\r\n\r\n"]),
)
def test_every_request_is_answered_or_closed_and_nothing_outside_is_served(
    served: tuple[Any, Path], method: str, path: str, accept: str, tail: str
) -> None:
    import socket

    server, _ = served
    raw = f"{method} {path} HTTP/1.1\r\nAccept: {accept}{tail}".encode("latin-1")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(raw)
        sock.shutdown(
            socket.SHUT_WR
        )  # a half-sent request ends here: the server must not wait past its timeout
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    # a request line http.server cannot parse is answered HTTP/0.9-style: the error page, no status line
    assert answer == b"" or answer.startswith(b"HTTP/1.") or b"Error code: 400" in answer, answer[:200]
    assert b"OUTSIDE-SECRET" not in answer
    assert server.proc.poll() is None and server.get("/stack/simple/") == 200  # still serving
