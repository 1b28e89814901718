"""The few OCI distribution API calls the toolchain makes itself (an image index from per-platform digests, the
signature artifact of a digest): manifests and blobs by reference, over `requests`, with the credentials
`docker login` stored (docker.auth reads config.json and credential helpers) and the registry's Bearer-token
challenge. A loopback registry is spoken to over http, as Docker and podman do by default; any other over https.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from toolchain.errors import EnvironmentUnavailable
from verify.runtime import input_files

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
ACCEPT = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
_LOOPBACK = re.compile(r"^(localhost|127(?:\.\d{1,3}){3}|\[::1\])(:\d+)?$")
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
TIMEOUT_S = 60


@dataclass(frozen=True)
class Manifest:
    media_type: str
    digest: str  # sha256 of `raw`: what the registry names it by
    raw: bytes

    def json(self) -> dict[str, Any]:
        """The manifest as an object; BadRegistryAnswer (exit 3, one line) when it is not JSON or not an object."""
        try:
            data = input_files.decode_json(
                self.raw, f"the manifest {self.digest}", input_files.REGISTRY_ANSWER
            )
        except input_files.InputFileError as error:
            raise BadRegistryAnswer(f"the registry's answer {error}") from None
        if not isinstance(data, dict):
            raise BadRegistryAnswer(
                f"the registry's manifest {self.digest} is {type(data).__name__}, not an object"
            )
        return data


class BadRegistryAnswer(EnvironmentUnavailable):
    """A registry answer that is not what the API promises (not JSON, the wrong shape, too large)."""


class NotFound(Exception):
    """The registry answered 404 for this manifest or blob."""


def split_repository(repository: str) -> tuple[str, str]:
    """'127.0.0.1:5000/apex-x' -> ('127.0.0.1:5000', 'apex-x'); 'ghcr.io/acme/apex' -> ('ghcr.io', 'acme/apex')."""
    host, _, name = repository.partition("/")
    if not name or ("." not in host and ":" not in host and host != "localhost"):
        return "registry-1.docker.io", repository if name == "" else f"{host}/{name}"
    return host, name


def digest_of(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


class Registry:
    """One repository on one registry, as `docker login` left its credentials."""

    def __init__(self, repository: str) -> None:
        import requests

        self.host, self.name = split_repository(repository.rstrip("/"))
        self.base = f"{'http' if _LOOPBACK.match(self.host) else 'https'}://{self.host}/v2/{self.name}"
        self.session = requests.Session()
        self._token: str | None = None

    # ------------------------------------------------------------ calls

    def get_manifest(self, reference: str) -> Manifest:
        answer = self._call("GET", f"/manifests/{reference}", headers={"Accept": ACCEPT})
        raw = answer.content  # bounded by _call (input_files.REGISTRY_ANSWER)
        media = (answer.headers.get("Content-Type") or "").split(";")[0] or _media_of(raw)
        return Manifest(media, digest_of(raw), raw)

    def get_blob(self, digest: str) -> bytes:
        raw = self._call("GET", f"/blobs/{digest}").content  # bounded by _call
        if digest_of(raw) != digest:
            raise EnvironmentUnavailable(
                f"{self.host}/{self.name}: blob {digest} came back with other content"
            )
        return raw

    def put_manifest(self, reference: str, raw: bytes, media_type: str) -> str:
        """PUT a manifest under a tag (or its digest); the digest the registry says it stored."""
        answer = self._call("PUT", f"/manifests/{reference}", data=raw, headers={"Content-Type": media_type})
        return answer.headers.get("Docker-Content-Digest") or digest_of(raw)

    # ------------------------------------------------------------ transport

    def _call(self, method: str, path: str, **kwargs: Any):
        import requests

        headers = dict(kwargs.pop("headers", {}))
        for attempt in range(2):
            if self._token:
                headers["Authorization"] = f"Bearer {self._token}"
            try:
                answer = self.session.request(
                    method, self.base + path, headers=headers, timeout=TIMEOUT_S, stream=True, **kwargs
                )
                _bound(answer, f"{self.host}/{self.name}{path}")
            except requests.RequestException as err:
                raise EnvironmentUnavailable(
                    f"registry {self.host} unreachable ({type(err).__name__}: "
                    f"{str(err).splitlines()[0][:200]}); check the address and network"
                ) from None
            if answer.status_code == 401 and attempt == 0 and self._authenticate(answer):
                continue
            break
        if answer.status_code == 404:
            raise NotFound(f"{self.host}/{self.name}{path}")
        if answer.status_code in (401, 403):
            raise EnvironmentUnavailable(
                f"registry {self.host} refused {method} {self.name}{path} ({answer.status_code}); "
                f"log in first: docker login {self.host}"
            )
        if answer.status_code >= 400:
            raise EnvironmentUnavailable(
                f"registry {self.host}: {method} {self.name}{path} answered "
                f"{answer.status_code} {answer.text[:200]!r}"
            )
        return answer

    def _authenticate(self, answer) -> bool:
        """The Bearer challenge: a token from the realm, with `docker login`'s credentials when there are any."""
        challenge = answer.headers.get("WWW-Authenticate", "")
        if not challenge.lower().startswith("bearer"):
            return False
        fields = dict(_CHALLENGE.findall(challenge))
        params = {k: v for k, v in fields.items() if k in ("service", "scope")}
        params.setdefault("scope", f"repository:{self.name}:pull,push")
        auth = _credentials(self.host)
        got = self.session.get(
            fields.get("realm", ""), params=params, auth=auth, timeout=TIMEOUT_S, stream=True
        )
        _bound(got, "the registry's token answer")
        if got.status_code != 200:
            return False
        try:
            body = input_files.decode_json(
                got.content, "the registry's token answer", input_files.REGISTRY_ANSWER
            )
        except input_files.InputFileError:
            return False
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        self._token = token if isinstance(token, str) else None
        return bool(self._token)


def _bound(answer: Any, name: str) -> None:
    """Read a streamed answer's body through the bounded reader (at most input_files.REGISTRY_ANSWER), so
    that .content and .text are what was read: an endless or huge answer costs the limit, not its size."""
    try:
        answer._content = input_files.read_chunks(
            answer.iter_content(1 << 20), name, input_files.REGISTRY_ANSWER
        )
    except input_files.InputFileError as error:
        answer.close()
        raise BadRegistryAnswer(f"registry answer {error}") from None


def _credentials(host: str) -> tuple[str, str] | None:
    from docker import auth

    found = auth.resolve_authconfig(auth.load_config(), host) or {}
    user, secret = (
        found.get("username") or found.get("Username"),
        found.get("password") or found.get("Secret"),
    )
    return (user, secret) if user and secret else None


def _media_of(raw: bytes) -> str:
    try:
        data = input_files.decode_json(raw, "a manifest", input_files.REGISTRY_ANSWER)
    except input_files.InputFileError:
        return ""
    if not isinstance(data, dict):
        return ""
    return data.get("mediaType") or (OCI_INDEX if "manifests" in data else OCI_MANIFEST)
