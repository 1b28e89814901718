"""The registry calls the toolchain makes itself (the manifests and configs an image index is made from, the
index put under its tag, a digest's signature artifact), made by skopeo rather than by hand-written HTTP:
containers/image brings the credentials `docker login` and `podman login` stored, registries.conf, the token
dance, retries and a digest check of every manifest and blob it reads. A loopback registry is spoken to
without TLS, as Docker and podman do by default; any other over https.

skopeo is Debian's and Ubuntu's `skopeo` package (GitHub's runners carry it); without it these calls are exit 3
naming the package. What skopeo cannot do here stays ours: the index's content (the platform check, kept
attestations) and the cosign key signature check (toolchain/image/signature.py; docs/architecture.md says why).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import EnvironmentUnavailable, UsageError
from verify.runtime import atomic, input_files
from verify.runtime.messages import bounded, printable

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
_LOOPBACK = re.compile(r"^(localhost|127(?:\.\d{1,3}){3}|\[::1\])(:\d+)?$")
_FATAL = re.compile(r'msg="(.*)"$')  # skopeo's last line: time="…" level=fatal msg="…"
TIMEOUT_S = 120  # one skopeo call: a manifest, a config, a signature artifact, or the index
MAX_BLOB = 64 * 2**20  # what skopeo writes for us: a signature's blobs are a few hundred bytes
INSTALL = "install skopeo (apt-get install skopeo; brew install skopeo), which makes the registry calls"


@dataclass(frozen=True)
class Manifest:
    media_type: str
    digest: str  # sha256 of `raw`: what the registry names it by
    raw: bytes

    def json(self) -> dict[str, Any]:
        """The manifest as an object; BadRegistryAnswer (exit 3, one line) when it is not a JSON object."""
        return _object(self.raw, f"the manifest {self.digest}")


class BadRegistryAnswer(EnvironmentUnavailable):
    """A registry answer that is not what the API promises (not JSON, the wrong shape)."""


class NotFound(Exception):
    """The registry has no manifest under this reference."""


def split_repository(repository: str) -> tuple[str, str]:
    """'127.0.0.1:5000/apex-x' -> ('127.0.0.1:5000', 'apex-x'); 'ghcr.io/acme/apex' -> ('ghcr.io', 'acme/apex')."""
    host, _, name = repository.partition("/")
    if not name or ("." not in host and ":" not in host and host != "localhost"):
        return "registry-1.docker.io", repository if name == "" else f"{host}/{name}"
    return host, name


def digest_of(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


class Registry:
    """One repository on one registry, reached through skopeo with the credentials a login stored."""

    def __init__(self, repository: str) -> None:
        self.repository = repository.rstrip("/")
        if not self.repository or any(c.isspace() or not c.isprintable() for c in self.repository):
            raise UsageError(
                f"{printable(repository)!r}: not an image repository (empty, or a space or control character "
                "in it); pass e.g. ghcr.io/OWNER/apex"
            )
        self.host, self.name = split_repository(self.repository)
        self._insecure = bool(_LOOPBACK.match(self.host))

    def get_manifest(self, reference: str) -> Manifest:
        """The manifest (an image's or an index) under a tag or digest, as the registry holds its bytes."""
        raw = self._skopeo("inspect", "--raw", *self._tls("--tls-verify"), self._ref(reference))
        return Manifest(_media_of(raw), digest_of(raw), raw)

    def get_config(self, reference: str) -> dict[str, Any]:
        """The config blob of the image manifest under `reference` (its os, architecture, variant)."""
        raw = self._skopeo("inspect", "--config", "--raw", *self._tls("--tls-verify"), self._ref(reference))
        return _object(raw, f"the config of {printable(reference)}")

    def get_artifact(self, reference: str) -> tuple[Manifest, dict[str, bytes]]:
        """A small artifact (a signature) whole: its manifest and each blob by digest, each checked against it."""
        with tempfile.TemporaryDirectory(prefix="apex-registry-") as work:
            folder = Path(work) / "artifact"
            self._skopeo(
                "copy", "--quiet", *self._tls("--src-tls-verify"), self._ref(reference), f"dir:{folder}"
            )
            raw = self._own_file(folder / "manifest.json")
            blobs = {}
            for path in folder.iterdir():
                if re.fullmatch(r"[0-9a-f]{64}", path.name):
                    data = self._own_file(path)
                    if digest_of(data) != f"sha256:{path.name}":
                        raise EnvironmentUnavailable(
                            f"{self.host}/{self.name}: blob sha256:{path.name} came back with other content"
                        )
                    blobs[f"sha256:{path.name}"] = data
        return Manifest(_media_of(raw), digest_of(raw), raw), blobs

    def put_index(self, tag: str, raw: bytes) -> str:
        """PUT the image index `raw` under `tag` as it is (its images are already in the repository: skopeo's
        `--multi-arch index-only`); the digest the registry stored it as."""
        with tempfile.TemporaryDirectory(prefix="apex-registry-") as work:
            layout = Path(work) / "layout"
            blob = digest_of(raw)
            atomic.write_bytes(layout / "blobs" / "sha256" / blob.split(":", 1)[1], raw)
            atomic.write_text(layout / "oci-layout", '{"imageLayoutVersion":"1.0.0"}')
            entry = {"mediaType": OCI_INDEX, "digest": blob, "size": len(raw)}
            atomic.write_text(layout / "index.json", json.dumps({"schemaVersion": 2, "manifests": [entry]}))
            stored = Path(work) / "digest"
            self._skopeo(
                "copy", "--quiet", "--multi-arch", "index-only", *self._tls("--dest-tls-verify"),
                "--digestfile", str(stored), f"oci:{layout}", self._ref(tag),
            )  # fmt: skip
            return self._own_file(stored).decode(errors="replace").strip() or blob

    # ------------------------------------------------------------ skopeo

    def _own_file(self, path: Path) -> bytes:
        """A file skopeo wrote into this call's own temporary folder, refused when larger than any it writes
        (input_files.REGISTRY_ANSWER)."""
        try:
            return input_files.read_bytes(path, input_files.REGISTRY_ANSWER)
        except input_files.InputFileError as error:
            raise BadRegistryAnswer(f"registry {printable(self.host)}: {error}") from None

    def _ref(self, reference: str) -> str:
        return f"docker://{self.repository}{'@' if reference.startswith('sha256:') else ':'}{reference}"

    def _tls(self, flag: str) -> list[str]:
        return [f"{flag}=false"] if self._insecure else []

    def _skopeo(self, verb: str, *args: str) -> bytes:
        where = printable(f"{self.host}/{self.name}")
        try:
            done = subprocess.run(["skopeo", verb, *args], capture_output=True, timeout=TIMEOUT_S)
        except FileNotFoundError:
            raise EnvironmentUnavailable(f"registry {where}: no skopeo on PATH; {INSTALL}") from None
        except subprocess.TimeoutExpired:
            raise EnvironmentUnavailable(
                f"registry {where}: skopeo {verb} took over {TIMEOUT_S} s; check the address and network"
            ) from None
        if done.returncode == 0:
            return done.stdout
        why = _why(done.stderr.decode(errors="replace"))
        if "manifest unknown" in why:
            raise NotFound(f"{where}: {why}")
        if re.search(
            r"unsupported schema version|parsing manifest|unmarshal|invalid character|unknown media|reading blob",
            why,
        ):
            raise BadRegistryAnswer(
                f"{where}: skopeo {verb}: the registry's answer is not what the API promises ({why})"
            )
        if "invalid reference format" in why:
            raise UsageError(
                f"{printable(self.repository)}: not an image repository ({why}); pass e.g. ghcr.io/OWNER/apex"
            )
        if re.search(r"unauthorized|authentication required|denied", why, re.I):
            raise EnvironmentUnavailable(
                f"registry {where} refused skopeo {verb} ({why}); log in first: docker login {self.host}"
            )
        raise EnvironmentUnavailable(
            f"registry {where}: skopeo {verb} failed ({why}); check the address and network"
        )


def _why(stderr: str) -> str:
    """skopeo's own reason, one bounded line."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else "no message"
    found = _FATAL.search(last)
    return bounded(printable((found.group(1) if found else last).replace('\\"', '"')))


def _object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        found = input_files.decode_json(raw, what, input_files.REGISTRY_ANSWER)
    except input_files.InputFileError as error:  # not JSON, not UTF-8, too large
        raise BadRegistryAnswer(f"the registry's answer for {bounded(str(error))}") from None
    if not isinstance(found, dict):
        raise BadRegistryAnswer(f"the registry's answer for {what} is {type(found).__name__}, not an object")
    return found


def _media_of(raw: bytes) -> str:
    try:
        data = input_files.decode_json(raw, "a manifest", input_files.REGISTRY_ANSWER)
    except input_files.InputFileError:
        return ""
    if not isinstance(data, dict):
        return ""
    return data.get("mediaType") or (OCI_INDEX if "manifests" in data else OCI_MANIFEST)
