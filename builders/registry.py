"""Push an OCI image layout to a registry over the Distribution (Docker Registry v2) HTTP API.

Why our own client rather than ``docker push``/``podman push``: the same push works after any engine's build (buildah,
podman, a Docker daemon), retries are ours and visible (5xx answers and dropped connections are retried with
backoff), auth comes from the usual credential files, and the pushed manifest is read back and its digest checked.

- Credentials: ``REGISTRY_AUTH_FILE``, podman's ``auth.json`` (``$XDG_RUNTIME_DIR/containers``,
  ``~/.config/containers``) and Docker's ``config.json`` (``$DOCKER_CONFIG`` or ``~/.docker``), including
  ``credHelpers``/``credsStore`` (``docker-credential-<name> get``). Basic and Bearer-token registries both work.
- TLS: verified against the system CAs (``SSL_CERT_FILE`` is honoured) plus any ``certs.d/<host>/*.crt`` in the Docker
  and containers config directories; ``insecure=True`` skips verification and falls back to plain HTTP for the named
  registry's host and port only, like Docker's ``insecure-registries``: token servers and upload backends elsewhere
  are verified as always.
- Where credentials go: only to the registry's own origin (scheme, host and port), and to a Bearer token realm over
  https (over plain HTTP only when the realm is the --insecure registry's own address). An https registry that sends
  an upload to plain HTTP is refused. No message shows a password; a reference with ``user:password@`` is refused.

>>> ImageRef.parse("127.0.0.1:5000/team/app:v1")
ImageRef(registry='127.0.0.1:5000', repository='team/app', tag='v1', digest=None)
>>> ImageRef.parse("ubuntu").repository
'library/ubuntu'
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from builders.errors import PushError

DOCKER_HUB = "docker.io"
_DOCKER_HUB_API = "registry-1.docker.io"
_DOCKER_HUB_AUTH_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
_INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
_MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_MANIFEST_LIST)

_REPO_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_LAYOUT_DIGEST = re.compile(r"sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}")
_DIGEST_SHAPE = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[^/]*")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_REGISTRY_HOST = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?")
_MAX_REF_LENGTH = 512
#: A credential helper is run as ``docker-credential-<name>``: a plain name, never a path.
_HELPER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MAX_CREDENTIAL_FILE_BYTES = 4 << 20
#: No answer we read (manifests, errors, tokens) comes near this; blobs are only ever sent.
_MAX_ANSWER_BYTES = 32 << 20
#: What may go into an ``Authorization: Bearer`` header (RFC 6750 b64token, JWTs included).
_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]+")
_CHUNK = 1 << 20

Progress = Callable[[str], None]


class RegistryError(PushError):
    """A push that cannot succeed (bad reference, auth refused, unreachable, retries used up); one line per problem."""

    default_line = "registry error"


def shown(text: str, limit: int = 120) -> str:
    """``text`` fit for a one-line message: quoted with escapes when it holds control characters, and capped."""
    if text.isprintable() and len(text) <= limit:
        return text
    quoted = repr(text)
    return quoted if len(quoted) <= limit else f"{quoted[:limit]}... ({len(text)} characters)"


def _mask_userinfo(text: str) -> str:
    """``text`` with everything before its last ``@`` masked: that part may be ``user:password`` (or hold an ``@``)."""
    _, at, tail = text.rpartition("@")
    return shown(f"***@{tail}" if at else text)


class _Retryable(Exception):
    """A fault worth another try: a 5xx answer or a connection dropped mid-request."""


# --- references -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageRef:
    """A parsed image reference ``[registry/]repository[:tag][@digest]`` (Docker's rules for the registry part)."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        """Parse ``text``; a first component with ``.`` or ``:`` (or ``localhost``) is the registry, else Docker Hub.

        A ``user:password@`` before the registry is refused, and the error shows it masked (``***@host/...``).
        """
        if len(text) > _MAX_REF_LENGTH:
            raise RegistryError(f"{shown(text)}: image reference longer than {_MAX_REF_LENGTH} characters")
        if not text or any(c.isspace() or not c.isprintable() for c in text):
            raise RegistryError(f"{shown(text)}: image reference is empty or contains whitespace or control characters")
        if "://" in text:
            raise RegistryError(f"{_mask_userinfo(text)}: image reference must not have a scheme (no https://)")
        rest, digest = text, None
        if "@" in text:
            rest, _, digest = text.rpartition("@")
            if "@" in rest or not _DIGEST_SHAPE.fullmatch(digest):
                raise RegistryError(
                    f"{_mask_userinfo(text)}: '@' may only come before a digest (sha256:...); credentials do not "
                    "belong in an image reference: log in with `podman login HOST` or `docker login HOST`"
                )
            if not _DIGEST.fullmatch(digest):
                # "user:password@host:5000" has a digest's shape: mask whatever before the '@' has a colon
                raise RegistryError(f"{_mask_userinfo(text) if ':' in rest else text}: digest must be "
                                    "sha256:<64 hex digits>")
        tag = None
        last = rest.rsplit("/", 1)[-1]
        if ":" in last:
            rest, tag = rest.rsplit(":", 1)
            if not _TAG.fullmatch(tag):
                raise RegistryError(f"{text}: invalid tag {tag!r}")
        parts = rest.split("/")
        if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
            registry, path = parts[0], parts[1:]
            if not _REGISTRY_HOST.fullmatch(registry):
                raise RegistryError(f"{text}: invalid registry address {registry!r} (host[:port])")
        else:
            registry, path = DOCKER_HUB, parts
            if len(path) == 1:
                path = ["library", *path]
        if not path or not all(_REPO_COMPONENT.fullmatch(p) for p in path):
            raise RegistryError(f"{text}: invalid repository name (lower-case letters, digits and . _ - only)")
        return cls(registry=registry, repository="/".join(path), tag=tag, digest=digest)

    @property
    def reference(self) -> str:
        """What the manifest is stored under: the tag, else the digest, else ``latest``."""
        return self.tag or self.digest or "latest"

    @property
    def api_host(self) -> str:
        return _DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


# --- credentials ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    """A username and password (or token) for one registry, and where they were found."""

    username: str
    password: str = field(repr=False)
    source: str = ""


def credential_files(env: Mapping[str, str] | None = None) -> list[Path]:
    """The credential files looked at, in podman's then Docker's order (first match wins)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    files: list[Path] = []
    if env.get("REGISTRY_AUTH_FILE"):
        files.append(Path(env["REGISTRY_AUTH_FILE"]))
    if env.get("XDG_RUNTIME_DIR"):
        files.append(Path(env["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    config_home = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    files.append(config_home / "containers" / "auth.json")
    docker_dir = Path(env["DOCKER_CONFIG"]) if env.get("DOCKER_CONFIG") else home / ".docker"
    files.append(docker_dir / "config.json")
    return files


def _auth_key_matches(key: str, ref: ImageRef) -> int:
    """How specifically a credential file key names ``ref`` (0: not at all; longer ``host/namespace`` keys win)."""
    bare = re.sub(r"^https?://", "", key).rstrip("/")
    bare = re.sub(r"/v[12]$", "", bare)
    if ref.registry == DOCKER_HUB and (key in _DOCKER_HUB_AUTH_KEYS or bare in _DOCKER_HUB_AUTH_KEYS):
        return 1
    if bare == ref.registry:
        return 1
    full = f"{ref.registry}/{ref.repository}"
    if full == bare or full.startswith(bare + "/"):
        return 1 + bare.count("/")
    return 0


def _credentials_from_helper(helper: str, server: str, source: str) -> Credentials | None:
    program = f"docker-credential-{helper}"
    if shutil.which(program) is None:
        raise RegistryError(f"{source}: credential helper {program} for {server} is not on PATH")
    try:
        proc = subprocess.run([program, "get"], input=server, capture_output=True, text=True, timeout=30,
                              check=False)
    except subprocess.TimeoutExpired:
        raise RegistryError(f"{program}: no answer for {server} within 30 s") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{program}: cannot be run for {server} ({type(exc).__name__})") from None
    if proc.returncode != 0:
        return None  # the helper has nothing stored for this server
    try:
        data = json.loads(proc.stdout)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("Username"), str) \
            or not isinstance(data.get("Secret"), str):
        raise RegistryError(f"{program}: unreadable answer for {server} (want JSON with Username and Secret)")
    return Credentials(data["Username"], data["Secret"], f"{source} ({program})")


@dataclass(frozen=True)
class CredentialFile:
    """A parsed ``config.json``/``auth.json``: inline credentials per key, helpers per key, the default store.

    A key's entry is None when it holds no inline credentials (Docker writes ``{}`` when a credsStore keeps them).
    """

    path: Path
    auths: dict[str, Credentials | None]
    helpers: dict[str, str]
    store: str | None


def read_credential_file(path: Path) -> CredentialFile | None:
    """Parse a credential file strictly (None when it does not exist); any malformed part is one RegistryError line
    naming the file and key, and never showing a secret. Like Docker, every ``auths`` entry is decoded on load."""
    try:
        if path.stat().st_size > _MAX_CREDENTIAL_FILE_BYTES:
            raise RegistryError(f"{path}: credential file larger than {_MAX_CREDENTIAL_FILE_BYTES >> 20} MiB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RegistryError(f"{path}: unreadable credential file: {exc.strerror or type(exc).__name__}") from None
    except UnicodeDecodeError:
        raise RegistryError(f"{path}: unreadable credential file: not UTF-8 text") from None
    except ValueError as exc:
        raise RegistryError(f"{path}: unreadable credential file: {shown(str(exc))}") from None
    except RecursionError:
        raise RegistryError(f"{path}: unreadable credential file: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{path}: a credential file holds a JSON object, not {_json_type(data)}")
    auths = _object(data, "auths", path)
    helpers = _object(data, "credHelpers", path)
    store = data.get("credsStore")
    if store is not None and store != "" and not (isinstance(store, str) and _HELPER_NAME.fullmatch(store)):
        raise RegistryError(f"{path}: credsStore must be a helper name like \"pass\" ({_json_type(store)} given)")
    for key, helper in helpers.items():
        if not (isinstance(helper, str) and _HELPER_NAME.fullmatch(helper)):
            raise RegistryError(f"{path}: credHelpers.{shown(key)} must be a helper name like \"pass\"")
    parsed = {key: _inline_credentials(entry, f"auths.{shown(key)}", path) for key, entry in auths.items()}
    return CredentialFile(path, parsed, dict(helpers), store or None)


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _object(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RegistryError(f"{path}: {key} must be an object of registry keys, not {_json_type(value)}")
    return value


def _inline_credentials(entry: object, where: str, path: Path) -> Credentials | None:
    """The user and password of one ``auths`` entry: ``auth`` (base64 of user:password) or username + password."""
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise RegistryError(f"{path}: {where} must be an object, not {_json_type(entry)}")
    for name in ("auth", "username", "password"):
        if entry.get(name) is not None and not isinstance(entry[name], str):
            raise RegistryError(f"{path}: {where}.{name} must be a string, not {_json_type(entry[name])}")
    if entry.get("auth"):
        try:
            decoded = base64.b64decode(entry["auth"].strip(), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            raise RegistryError(f"{path}: {where}.auth is not base64 of user:password") from None
        user, colon, password = decoded.partition(":")
        if not colon or not user:
            raise RegistryError(f"{path}: {where}.auth decodes to no user:password pair (a ':' and a user name)")
        return Credentials(user, password, str(path))
    username, password = entry.get("username") or "", entry.get("password") or ""
    if bool(username) != bool(password):
        raise RegistryError(f"{path}: {where} has a {'username' if username else 'password'} "
                            f"without a {'password' if username else 'username'}")
    return Credentials(username, password, str(path)) if username else None


def find_credentials(ref: ImageRef, env: Mapping[str, str] | None = None) -> Credentials | None:
    """Credentials for ``ref`` from the first credential file (or helper) that has any, else None."""
    server = "https://index.docker.io/v1/" if ref.registry == DOCKER_HUB else ref.registry
    for path in credential_files(env):
        parsed = read_credential_file(path)
        if parsed is None:
            continue
        for key, helper in parsed.helpers.items():
            if _auth_key_matches(key, ref):
                found = _credentials_from_helper(helper, server, str(path))
                if found:
                    return found
        matches = sorted(((_auth_key_matches(k, ref), k) for k in parsed.auths), reverse=True)
        for score, key in matches:
            if score == 0:
                break
            inline = parsed.auths[key]
            if inline is not None:
                return inline
        if parsed.store:
            found = _credentials_from_helper(parsed.store, server, str(path))
            if found:
                return found
    return None


# --- the OCI image layout we push from --------------------------------------------------------------------------


@dataclass(frozen=True)
class Blob:
    """A content-addressed file of the layout."""

    digest: str
    size: int
    path: Path


@dataclass(frozen=True)
class LayoutImage:
    """What a push sends: blobs (config and layers, child manifests of an index) and the top manifest."""

    blobs: tuple[Blob, ...]
    children: tuple[tuple[str, str, bytes], ...]  # (digest, media type, bytes) of manifests under an index
    manifest: bytes
    media_type: str

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.manifest).hexdigest()


def read_layout(layout: Path) -> LayoutImage:
    """The single image (manifest, or index of manifests) in an OCI image layout directory."""
    try:
        return _read_layout(layout)
    except (KeyError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        detail = f"missing {exc}" if isinstance(exc, KeyError) else type(exc).__name__
        raise RegistryError(f"{layout}: malformed OCI image layout ({shown(detail)})") from None
    except OSError as exc:
        raise RegistryError(f"{layout}: unreadable OCI image layout ({exc.strerror or type(exc).__name__})") from None


def _read_layout(layout: Path) -> LayoutImage:
    try:
        index = json.loads((layout / "index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RegistryError(f"{layout}: not an OCI image layout ({shown(str(exc))})") from None
    manifests = index.get("manifests") or []
    if len(manifests) != 1:
        raise RegistryError(f"{layout}: expected one image in index.json, found {len(manifests)}")
    top = manifests[0]
    top_bytes = _blob_path(layout, top["digest"]).read_bytes()
    media_type = top.get("mediaType") or json.loads(top_bytes).get("mediaType") or OCI_MANIFEST
    blobs: dict[str, Blob] = {}
    children: list[tuple[str, str, bytes]] = []
    if media_type in _INDEX_TYPES:
        for child in json.loads(top_bytes).get("manifests", []):
            data = _blob_path(layout, child["digest"]).read_bytes()
            children.append((child["digest"], child.get("mediaType", OCI_MANIFEST), data))
            _collect_blobs(layout, json.loads(data), blobs)
    else:
        _collect_blobs(layout, json.loads(top_bytes), blobs)
    return LayoutImage(tuple(blobs.values()), tuple(children), top_bytes, media_type)


def _collect_blobs(layout: Path, manifest: dict[str, Any], into: dict[str, Blob]) -> None:
    for desc in [manifest["config"], *manifest.get("layers", [])]:
        path = _blob_path(layout, desc["digest"])
        size = path.stat().st_size
        if type(desc["size"]) is not int or size != desc["size"]:
            raise RegistryError(f"{path}: size {size} does not match the manifest's {desc['size']}")
        into[desc["digest"]] = Blob(desc["digest"], size, path)


def _blob_path(layout: Path, digest: str) -> Path:
    if not isinstance(digest, str) or not _LAYOUT_DIGEST.fullmatch(digest):
        raise RegistryError(f"{layout}: {shown(str(digest))} is not a sha256/sha512 digest")  # no ../ out of blobs/
    algorithm, _, hexdigest = digest.partition(":")
    path = layout / "blobs" / algorithm / hexdigest
    if not path.is_file():
        raise RegistryError(f"{layout}: blob {digest} is missing")
    return path


# --- HTTP with retries and auth ---------------------------------------------------------------------------------


@dataclass
class _Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def header(self, name: str) -> str:
        return self.headers.get(name) or ""


def _tls_context(host: str, insecure: bool, env: Mapping[str, str]) -> ssl.SSLContext:
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    ctx = ssl.create_default_context(cafile=env.get("SSL_CERT_FILE") or None)
    home = Path(env.get("HOME") or Path.home())
    cert_dirs = [Path("/etc/docker/certs.d"), Path("/etc/containers/certs.d"), home / ".docker" / "certs.d",
                 home / ".config" / "containers" / "certs.d"]
    for base in cert_dirs:
        host_dir = base / host
        if host_dir.is_dir():
            for cert in sorted(host_dir.glob("*.crt")):
                ctx.load_verify_locations(cafile=str(cert))
    return ctx


class RegistryClient:
    """One registry host: requests with auth, TLS and retries; ``push_layout`` is the operation users call."""

    def __init__(
        self,
        ref: ImageRef,
        *,
        insecure: bool = False,
        credentials: Credentials | None = None,
        attempts: int = 4,
        backoff_seconds: float = 0.5,
        timeout_seconds: float = 60.0,
        progress: Progress | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.ref = ref
        self.insecure = insecure
        self.credentials = credentials
        self.attempts = max(attempts, 1)
        self.backoff_seconds = backoff_seconds
        self.timeout_seconds = timeout_seconds
        self.progress = progress or (lambda _line: None)
        self.env = os.environ if env is None else env
        self.retries = 0
        self._scheme = "https"
        self._authorization: str | None = None
        self._tls: dict[tuple[str, bool], ssl.SSLContext] = {}

    # -- plumbing --

    def registry_origin(self) -> Origin:
        """Where credentials may go: the registry's own scheme, host and port (HTTP only after an --insecure ping)."""
        return Origin.of(self._url("/"))

    def _connection(self, origin: Origin, netloc: str) -> http.client.HTTPConnection:
        if origin.scheme != "https":
            return http.client.HTTPConnection(netloc, timeout=self.timeout_seconds)
        # --insecure names one registry: its host and port skip verification, every other host (a token server,
        # a storage backend an upload is sent to) is verified as usual
        insecure = self.insecure and origin.host_port == self.registry_origin().host_port
        key = (netloc, insecure)
        if key not in self._tls:
            self._tls[key] = _tls_context(netloc, insecure, self.env)
        return http.client.HTTPSConnection(netloc, timeout=self.timeout_seconds, context=self._tls[key])

    def _url(self, path_or_url: str) -> str:
        if path_or_url.startswith(("http://", "https://")):
            return path_or_url
        return f"{self._scheme}://{self.ref.api_host}{path_or_url}"

    def _send(
        self, method: str, url: str, headers: Mapping[str, str] | None = None, body: bytes | BinaryIO | None = None,
        *, auth: bool = True,
    ) -> _Response:
        """One HTTP exchange; raises _Retryable for dropped connections and RegistryError for unreachable hosts."""
        parsed = urllib.parse.urlsplit(url)
        origin = Origin.of(url)
        target = parsed.path + (f"?{parsed.query}" if parsed.query else "")
        all_headers = {"User-Agent": "appopt", **(headers or {})}
        if auth and self._authorization and origin == self.registry_origin():
            all_headers["Authorization"] = self._authorization  # never to another scheme, host or port
        if body is None and method in ("PUT", "POST", "PATCH"):
            all_headers.setdefault("Content-Length", "0")
        conn = self._connection(origin, parsed.netloc)
        try:
            conn.request(method, target, body=body, headers=all_headers)
            resp = conn.getresponse()
            data = resp.read(_MAX_ANSWER_BYTES + 1)
            if len(data) > _MAX_ANSWER_BYTES:
                raise RegistryError(f"{parsed.netloc}: {method} answer larger than {_MAX_ANSWER_BYTES >> 20} MiB; "
                                    "refused")
            return _Response(resp.status, resp.headers, data)
        except ConnectionRefusedError:
            raise RegistryError(f"{parsed.netloc}: connection refused (is the registry running at that address?)") \
                from None
        except socket.gaierror as exc:
            raise RegistryError(f"{parsed.netloc}: host not found ({exc.strerror})") from None
        except ssl.SSLCertVerificationError as exc:
            raise RegistryError(
                f"{parsed.netloc}: TLS certificate not trusted ({exc.verify_message}); add its CA "
                f"(SSL_CERT_FILE or certs.d/{parsed.netloc}/ca.crt) or use --insecure for a local registry"
            ) from None
        except ssl.SSLError as exc:
            raise _TLSFailed(f"{parsed.netloc}: TLS failed ({exc.reason or exc})") from None
        except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected, http.client.IncompleteRead,
                TimeoutError, ConnectionAbortedError) as exc:
            raise _Retryable(f"{parsed.netloc}: connection dropped ({type(exc).__name__})") from None
        except OSError as exc:
            raise RegistryError(f"{parsed.netloc}: {exc.strerror or exc}") from None
        finally:
            conn.close()

    def _retrying(self, what: str, fn: Callable[[], _Response]) -> _Response:
        """Run ``fn`` until it gives a non-5xx answer, retrying 5xx and dropped connections with backoff."""
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = fn()
                if resp.status < 500 or resp.status == 501:
                    return resp
                last = f"HTTP {resp.status} {_error_text(resp)}".strip()
            except _Retryable as exc:
                last = str(exc)
            self._back_off(attempt, what, last)

    def _back_off(self, attempt: int, what: str, problem: str) -> None:
        """After failed ``attempt`` at ``what``: wait (doubling) before the next, or raise when it was the last."""
        if attempt >= self.attempts:
            raise RegistryError(f"{self.ref.api_host}: {what} failed after {self.attempts} attempts: {problem}")
        delay = self.backoff_seconds * 2 ** (attempt - 1)
        self.retries += 1
        self.progress(f"retry {attempt}/{self.attempts - 1}: {what}: {problem}; again in {delay:.1f}s")
        time.sleep(delay)

    def _request(
        self, method: str, path: str, what: str, headers: Mapping[str, str] | None = None,
        body_path: Path | None = None, body: bytes | None = None,
    ) -> _Response:
        """An authorised, retried request; a 401 triggers one (re)authentication from the challenge."""

        def once() -> _Response:
            if body_path is not None:
                with body_path.open("rb") as fh:
                    return self._send(method, self._url(path), headers, fh)
            return self._send(method, self._url(path), headers, body)

        resp = self._retrying(what, once)
        if resp.status == 401:
            self._authenticate(resp)
            resp = self._retrying(what, once)
            if resp.status == 401:
                raise self._auth_error(resp)
        return resp

    # -- auth --

    def ping(self) -> None:
        """``GET /v2/``: pick the scheme (HTTPS, or HTTP when insecure), and authenticate if the registry asks."""
        try:
            resp = self._retrying("GET /v2/", lambda: self._send("GET", self._url("/v2/")))
        except _TLSFailed as exc:
            if not self.insecure:
                raise RegistryError(f"{exc}; for a plain-HTTP local registry use --insecure") from None
            self._scheme = "http"
            self.progress(f"{self.ref.api_host}: no TLS, using plain HTTP (--insecure)")
            resp = self._retrying("GET /v2/", lambda: self._send("GET", self._url("/v2/")))
        if resp.status == 401:
            self._authenticate(resp)
            resp = self._retrying("GET /v2/", lambda: self._send("GET", self._url("/v2/")))
            if resp.status == 401:
                raise self._auth_error(resp)
        if resp.status != 200:
            raise RegistryError(f"{self.ref.api_host}: GET /v2/ answered HTTP {resp.status}: not a registry API")

    def _authenticate(self, resp: _Response) -> None:
        challenge = resp.header("WWW-Authenticate")
        scheme, _, params_text = challenge.partition(" ")
        if self.credentials is None and scheme.lower() == "basic":
            raise self._auth_error(resp)
        if scheme.lower() == "basic":
            assert self.credentials is not None
            token = f"{self.credentials.username}:{self.credentials.password}".encode()
            self._authorization = "Basic " + base64.b64encode(token).decode()
        elif scheme.lower() == "bearer":
            self._authorization = "Bearer " + self._bearer_token(dict(_challenge_params(params_text)))
        else:
            raise RegistryError(f"{self.ref.api_host}: unsupported authentication scheme {scheme or '(none)'!r}")

    def _bearer_token(self, params: dict[str, str]) -> str:
        realm = params.get("realm")
        if not realm:
            raise RegistryError(f"{self.ref.api_host}: Bearer challenge without a realm")
        origin = Origin.of(realm, f"{self.ref.api_host}: Bearer realm")
        own_insecure = self.insecure and origin == self.registry_origin()
        if self.credentials is not None and origin.scheme != "https" and not own_insecure:
            raise RegistryError(
                f"{self.ref.api_host}: the token server {origin} is plain HTTP; credentials go to a token realm "
                "only over https (or to the --insecure registry's own address)"
            )
        query = {"service": params.get("service", ""),
                 "scope": f"repository:{self.ref.repository}:pull,push"}
        sep = "&" if "?" in realm else "?"
        url = f"{realm}{sep}{urllib.parse.urlencode({k: v for k, v in query.items() if v})}"
        headers = {}
        if self.credentials is not None:
            raw = f"{self.credentials.username}:{self.credentials.password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
        resp = self._retrying("token request", lambda: self._send("GET", url, headers, auth=False))
        if resp.status in (401, 403):
            raise self._auth_error(resp)
        try:
            data = json.loads(resp.body)
        except (ValueError, RecursionError):
            data = None
        token = (data.get("token") or data.get("access_token")) if isinstance(data, dict) else None
        if not isinstance(token, str) or len(token) > 65536 or not _TOKEN.fullmatch(token):
            raise RegistryError(f"{origin}: token answer without a usable token (HTTP {resp.status})")
        return token

    def _auth_error(self, resp: _Response) -> RegistryError:
        host = self.ref.registry
        if self.credentials is None:
            return RegistryError(
                f"{host}: authentication required (HTTP {resp.status}) and no credentials found; "
                f"log in with `podman login {host}` or `docker login {host}`"
            )
        return RegistryError(
            f"{host}: credentials for user {self.credentials.username!r} from {self.credentials.source} "
            f"were refused (HTTP {resp.status})"
        )

    # -- the push --

    def _repo_path(self, suffix: str) -> str:
        return f"/v2/{self.ref.repository}/{suffix}"

    def blob_exists(self, digest: str) -> bool:
        resp = self._request("HEAD", self._repo_path(f"blobs/{digest}"), f"HEAD blob {digest[:19]}")
        if resp.status in (200, 404):
            return resp.status == 200
        raise self._unexpected(resp, f"HEAD blob {digest[:19]}")

    def upload_blob(self, blob: Blob) -> bool:
        """Upload one blob unless the registry has it; True when bytes were sent. Retries restart the upload."""
        if self.blob_exists(blob.digest):
            return False
        what = f"upload blob {blob.digest[:19]} ({blob.size} bytes)"
        attempt = 0
        while True:
            attempt += 1
            start = self._request("POST", self._repo_path("blobs/uploads/"), what)
            if start.status != 202 or not start.header("Location"):
                raise self._unexpected(start, what)
            location = self._upload_location(start.header("Location"), what)
            sep = "&" if "?" in location else "?"
            url = f"{location}{sep}digest={urllib.parse.quote(blob.digest)}"
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(blob.size)}
            try:
                with blob.path.open("rb") as fh:
                    done = self._send("PUT", url, headers, fh)
            except _Retryable as exc:
                done = None
                problem = str(exc)
            if done is not None and done.status < 500:
                if done.status != 201:
                    raise self._unexpected(done, what)
                echoed = done.header("Docker-Content-Digest")
                if echoed and echoed != blob.digest:
                    raise RegistryError(f"{self.ref.api_host}: {what}: stored as {echoed}, expected {blob.digest}")
                return True
            if done is not None:
                problem = f"HTTP {done.status} {_error_text(done)}".strip()
            self._back_off(attempt, what, problem)

    def _upload_location(self, header: str, what: str) -> str:
        """The absolute upload URL of a ``Location`` header; a TLS registry may not send the upload to plain HTTP.

        Credentials follow only to the registry's own origin (``_send``); a move from https to http is refused
        outright, --insecure or not, because the upload URL carries the session and the bytes would go in clear.
        """
        location = urllib.parse.urljoin(self._url("/"), header)
        origin = Origin.of(location, f"{self.ref.api_host}: {what}: upload Location")
        own = self.registry_origin()
        if origin.scheme != "https" and own.scheme == "https":
            raise RegistryError(
                f"{self.ref.api_host}: {what}: the registry (https) sent the upload to plain HTTP ({origin}); "
                "refused, credentials and data are never sent in clear"
            )
        return location

    def put_manifest(self, reference: str, media_type: str, data: bytes) -> str:
        """Store a manifest under ``reference``; returns the digest the registry reports (or ours)."""
        what = f"PUT manifest {reference}"
        resp = self._request("PUT", self._repo_path(f"manifests/{reference}"), what,
                             {"Content-Type": media_type}, body=data)
        if resp.status not in (200, 201):
            raise self._unexpected(resp, what)
        return resp.header("Docker-Content-Digest") or "sha256:" + hashlib.sha256(data).hexdigest()

    def get_manifest(self, reference: str) -> tuple[bytes, str, str]:
        """(bytes, media type, Docker-Content-Digest) of a stored manifest."""
        what = f"GET manifest {reference}"
        resp = self._request("GET", self._repo_path(f"manifests/{reference}"), what,
                             {"Accept": ", ".join(_MANIFEST_TYPES)})
        if resp.status != 200:
            raise self._unexpected(resp, what)
        return resp.body, resp.header("Content-Type"), resp.header("Docker-Content-Digest")

    def _unexpected(self, resp: _Response, what: str) -> RegistryError:
        if resp.status in (401, 403):
            return self._auth_error(resp)
        return RegistryError(f"{self.ref.api_host}: {what}: HTTP {resp.status} {_error_text(resp)}".rstrip())


@dataclass(frozen=True)
class Origin:
    """A URL's origin as browsers define it: scheme, host and port (the default port filled in)."""

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str, what: str = "URL") -> Origin:
        """The origin of an absolute http(s) URL; a URL with a user name or password in it is refused."""
        parsed = urllib.parse.urlsplit(url)
        try:
            port = parsed.port
        except ValueError:
            port = -1
        scheme = parsed.scheme.lower()
        host = parsed.hostname or ""
        bracketed = f"[{host}]" if ":" in host else host
        if scheme not in ("http", "https") or not _REGISTRY_HOST.fullmatch(bracketed) or port == -1:
            raise RegistryError(f"{what}: {_mask_userinfo(url)} is not an http(s) URL")
        if parsed.username is not None or parsed.password is not None:
            raise RegistryError(f"{what}: {_mask_userinfo(url)} carries a user name or password; refused")
        return cls(scheme, host.lower(), port or (443 if scheme == "https" else 80))

    @property
    def host_port(self) -> tuple[str, int]:
        return self.host, self.port

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


class _TLSFailed(RegistryError):
    """The TLS handshake failed (often: the registry speaks plain HTTP)."""


def _challenge_params(text: str) -> Iterator[tuple[str, str]]:
    for match in re.finditer(r'(\w+)="([^"]*)"', text):
        yield match.group(1), match.group(2)


def _error_text(resp: _Response) -> str:
    """The registry's error code and message from a JSON error body, else nothing."""
    try:
        errors = json.loads(resp.body).get("errors") or []
    except (ValueError, AttributeError, RecursionError):
        return ""
    if not isinstance(errors, list):
        return ""
    parts = [f"{e.get('code', '')}: {e.get('message', '')}".strip(": ") for e in errors[:2] if isinstance(e, dict)]
    return shown("; ".join(parts), 200)


# --- the operation ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PushResult:
    """What was pushed where, its verified digest, and how much work it took."""

    ref: str
    digest: str
    blobs_uploaded: int
    blobs_present: int
    bytes_uploaded: int
    retries: int
    seconds: float

    @property
    def pinned(self) -> str:
        """The reference pinned by digest (``registry/repo@sha256:...``): what a job should pull."""
        return f"{self.ref.rsplit(':', 1)[0] if _has_tag(self.ref) else self.ref}@{self.digest}"


def _has_tag(ref: str) -> bool:
    return ":" in ref.rsplit("/", 1)[-1]


def push_layout(
    layout: Path,
    destination: str,
    *,
    insecure: bool = False,
    credentials: Credentials | None = None,
    attempts: int = 4,
    backoff_seconds: float = 0.5,
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
) -> PushResult:
    """Push the image in an OCI layout directory to ``destination`` and verify it by reading the manifest back.

    Credentials default to :func:`find_credentials`. Raises :class:`RegistryError` with one line on failure.
    """
    started = time.monotonic()
    ref = ImageRef.parse(destination)
    if ref.digest and not ref.tag:
        raise RegistryError(f"{destination}: push to a tag (registry/repo:tag), not a digest")
    image = read_layout(layout)
    creds = credentials if credentials is not None else find_credentials(ref, env)
    client = RegistryClient(ref, insecure=insecure, credentials=creds, attempts=attempts,
                            backoff_seconds=backoff_seconds, progress=progress, env=env)
    say = progress or (lambda _line: None)
    client.ping()
    uploaded = present = sent_bytes = 0
    for blob in image.blobs:
        if client.upload_blob(blob):
            uploaded += 1
            sent_bytes += blob.size
            say(f"pushed blob {blob.digest[:19]} ({_human_bytes(blob.size)})")
        else:
            present += 1
            say(f"blob {blob.digest[:19]} already present")
    for digest, media_type, data in image.children:
        client.put_manifest(digest, media_type, data)
    reported = client.put_manifest(ref.reference, image.media_type, image.manifest)
    _verify(client, ref, image, reported)
    say(f"pushed {ref} digest {image.digest}")
    return PushResult(str(ref), image.digest, uploaded, present, sent_bytes, client.retries,
                      time.monotonic() - started)


def _verify(client: RegistryClient, ref: ImageRef, image: LayoutImage, reported: str) -> None:
    """Read the manifest back by tag: its bytes must hash to the local digest, and the registry must agree."""
    if reported != image.digest:
        raise RegistryError(f"{ref}: registry reported digest {reported}, the local manifest is {image.digest}")
    data, _media_type, header_digest = client.get_manifest(ref.reference)
    fetched = "sha256:" + hashlib.sha256(data).hexdigest()
    if fetched != image.digest or (header_digest and header_digest != image.digest):
        raise RegistryError(f"{ref}: manifest read back has digest {fetched} (header {header_digest or 'none'}), "
                            f"pushed {image.digest}")
    for blob in image.blobs:
        if not client.blob_exists(blob.digest):
            raise RegistryError(f"{ref}: blob {blob.digest} is missing after the push")


def _human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
