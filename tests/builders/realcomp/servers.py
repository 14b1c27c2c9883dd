"""Start and stop the real servers the slow tests use: each on 127.0.0.1, each stopped by its PID.

Kept apart from conftest.py so the fixtures read as a list of what runs, and the mechanics live here.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.builders.fake_registry import QuietHandler, send_reply


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A process we started; ``stop`` ends exactly it (SIGTERM, then SIGKILL) and reaps it."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout)


def start(name: str, argv: list[str], log: Path, env: Mapping[str, str] | None = None,
          cwd: Path | None = None) -> Server:
    """Start ``argv`` in the background with output to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(os.environ if env is None else env), cwd=cwd)
    return Server(name, proc, log)


def run_container(client: Any, image: str, timeout: float = 120.0) -> bytes:
    """Run ``image`` through a Docker Engine API to its exit and return its output; fail after ``timeout`` s.

    Not ``client.containers.run(image)``: that follows the container's log stream, which the SDK reads with no
    timeout, and podman 4.3's service sometimes never ends that stream for a container that has already exited
    (about one run in ten here; CI waited on one until its 90 minutes ran out). Waiting is a plain request, which
    the SDK's timeout bounds, and the logs are read once the container has exited.
    """
    container = client.containers.run(image, detach=True)
    try:
        status = container.wait(timeout=timeout)
        output = bytes(container.logs())
    finally:
        container.remove(force=True)
    if status.get("StatusCode") != 0:
        raise RuntimeError(f"{image} exited with {status}: {output[-2000:]!r}")
    return output


def wait_until(check: Callable[[], bool], server: Server, what: str, timeout: float = 30.0) -> None:
    """Poll ``check`` until true; fail with the server's log when it dies or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"{server.name} exited ({server.proc.returncode}) before {what}:\n{server.log_tail()}")
        with contextlib.suppress(OSError):
            if check():
                return
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"{server.name}: no {what} within {timeout:g} s:\n{server.log_tail()}")


def http_status(url: str, context: object | None = None) -> int:
    """The HTTP status of GET ``url`` (raises OSError when nothing answers)."""
    import ssl
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        ctx = context if isinstance(context, ssl.SSLContext) else ssl._create_unverified_context()
        conn = http.client.HTTPSConnection(parts.netloc, timeout=2, context=ctx)
    else:
        conn = http.client.HTTPConnection(parts.netloc, timeout=2)
    try:
        conn.request("GET", parts.path or "/")
        return conn.getresponse().status
    finally:
        conn.close()


def bcrypt_htpasswd(user: str, password: str) -> str:
    """One htpasswd line with a bcrypt hash (the only kind the registry accepts)."""
    if shutil.which("htpasswd"):
        out = subprocess.run(["htpasswd", "-nbB", user, password], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # libxcrypt on Debian 12 does bcrypt; the module is gone in Python 3.13

        return f"{user}:{crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))}"


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """(cert, key) for 127.0.0.1, valid one day."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


# --- a fault-injecting proxy in front of the real registry ----------------------------------------------------------


@dataclass
class Fault:
    """Answer the first ``times`` requests matching ``method`` and ``path_part`` with ``status`` (or drop them)."""

    method: str
    path_part: str
    status: int | None  # None: close the connection without an answer
    times: int = 1
    hits: int = 0


@dataclass
class FaultProxy:
    """A tiny HTTP server on 127.0.0.1 that forwards to ``upstream`` except where a :class:`Fault` fires."""

    upstream: str
    faults: list[Fault] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    port: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.method == method and fault.path_part in path and fault.hits < fault.times:
                fault.hits += 1
                return fault
        return None

    @contextlib.contextmanager
    def running(self) -> Iterator[FaultProxy]:
        proxy = self

        class Handler(QuietHandler):
            def _handle(self) -> None:
                body = self.read_body()
                proxy.seen.append(f"{self.command} {self.path}")
                fault = proxy._take_fault(self.command, self.path)
                if fault is not None and fault.status is None:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault is not None:
                    payload = b'{"errors":[{"code":"UNAVAILABLE","message":"injected fault"}]}'
                    send_reply(self, fault.status or 500, [("Content-Type", "application/json")], payload)
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                kept = [(key, value) for key, value in resp.getheaders()
                        if key.lower() not in ("connection", "transfer-encoding", "content-length")]
                send_reply(self, resp.status, kept, data)
                conn.close()

            do_GET = do_PUT = do_POST = do_PATCH = do_HEAD = do_DELETE = _handle

        with serving(Handler) as server:
            self.port = int(server.server_address[1])
            self._server = server
            yield self


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler], port: int = 0,
            tls: ssl.SSLContext | None = None) -> Iterator[ThreadingHTTPServer]:
    """``handler`` served on 127.0.0.1 (``port`` 0: any free one; over TLS with ``tls``) by a background thread while
    the block runs."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# --- a token server for the registry's Bearer authentication ---------------------------------------------------------


def _b64url(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenServer:
    """The token service of Docker's token authentication, as Harbor, GitLab or GHCR run it, on 127.0.0.1.

    ``GET /token?service=…&scope=repository:NAME:pull,push`` with HTTP Basic credentials answers a JWT (RS256,
    signed with ``openssl`` by ``key``; ``cert`` in the ``x5c`` header, which the registry checks against its
    ``rootcertbundle``) granting the scope's actions; wrong or missing credentials get 401. ``seen`` records each
    request's (user, scope). It speaks https with ``cert`` (for 127.0.0.1): clients send credentials to a token
    realm only over TLS, so a client must trust ``cert`` (``SSL_CERT_FILE``).
    """

    cert: Path
    key: Path
    user: str
    password: str
    service: str = "appopt-test-registry"
    issuer: str = "appopt-test-token-issuer"
    seen: list[tuple[str, str]] = field(default_factory=list)
    port: int = 0

    @property
    def realm(self) -> str:
        return f"https://127.0.0.1:{self.port}/token"

    def registry_config(self) -> list[str]:
        """The ``auth:`` section of the registry's config.yml that trusts this server."""
        return ["auth:", "  token:", f"    realm: {self.realm}", f"    service: {self.service}",
                f"    issuer: {self.issuer}", f"    rootcertbundle: {self.cert}"]

    def token(self, scope: str) -> str:
        import base64
        import json

        der = subprocess.run(["openssl", "x509", "-in", str(self.cert), "-outform", "DER"], capture_output=True,
                             check=True).stdout
        header = {"alg": "RS256", "typ": "JWT", "x5c": [base64.b64encode(der).decode()]}
        now = int(time.time())
        access = []
        if scope.startswith("repository:"):
            _, name, actions = scope.split(":", 2)
            access.append({"type": "repository", "name": name, "actions": actions.split(",")})
        claims = {"iss": self.issuer, "sub": self.user, "aud": self.service, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": os.urandom(8).hex(), "access": access}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)],
                                   input=signing_input.encode(), capture_output=True, check=True).stdout
        return f"{signing_input}.{_b64url(signature)}"

    @contextlib.contextmanager
    def running(self) -> Iterator[TokenServer]:
        import base64
        import json
        import urllib.parse

        tokens = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
                scope = query.get("scope", [""])[0]
                given = self.headers.get("Authorization", "")
                user = password = ""
                if given.startswith("Basic "):
                    user, _, password = base64.b64decode(given[6:]).decode().partition(":")
                tokens.seen.append((user, scope))
                if (user, password) != (tokens.user, tokens.password):
                    self._answer(401, {"details": "incorrect username or password"})
                    return
                token = tokens.token(scope)
                self._answer(200, {"token": token, "access_token": token, "expires_in": 300})

            def _answer(self, status: int, payload: dict[str, object]) -> None:
                send_reply(self, status, [("Content-Type", "application/json")], json.dumps(payload).encode())

        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(str(self.cert), str(self.key))
        with serving(Handler, self.port, tls) as server:
            self.port = int(server.server_address[1])
            yield self
