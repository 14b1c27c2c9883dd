"""A scripted Distribution (v2) registry and token server on 127.0.0.1 that record where every credential arrives.

The real registry cannot be made to answer with a hostile ``Location`` or ``realm``; this one can. Each listener
speaks TLS and plain HTTP on the same port (it peeks at the first byte: 0x16 opens a TLS handshake), so a TLS
registry can send an upload to ``http://<its own host and port>/`` and the test sees whether ``Authorization``
followed it in clear.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Seen:
    """One request as it arrived: over which scheme, at which port, and the Authorization header it carried."""

    scheme: str
    port: int
    method: str
    path: str
    authorization: str


class QuietHandler(BaseHTTPRequestHandler):
    """A keep-alive request handler that logs nothing and reads a request's body whole."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""


def send_reply(handler: BaseHTTPRequestHandler, status: int, headers: Iterable[tuple[str, str]], body: bytes) -> None:
    """Answer ``handler``'s request: status, ``headers``, the body's length and (but to HEAD) the body."""
    handler.send_response(status)
    for key, value in headers:
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


class _DualServer(ThreadingHTTPServer):
    """Serves TLS and plain HTTP on one port: a connection whose first byte is 0x16 is wrapped in TLS."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.tls = tls

    def finish_request(self, request: Any, client_address: Any) -> None:
        sock: socket.socket = request
        sock.settimeout(10)
        try:
            first = sock.recv(1, socket.MSG_PEEK)
            if first == b"\x16" and self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_side=True)
        except (OSError, ssl.SSLError):
            return  # a refused handshake (untrusted certificate): nothing reached the handler
        try:
            super().finish_request(sock, client_address)
        finally:
            if sock is not request:
                sock.close()


@dataclass
class Listener:
    """One port of the fake: answers with ``respond`` and records every request in the shared ``seen`` list."""

    respond: Callable[[BaseHTTPRequestHandler, str, bytes], tuple[int, dict[str, str], bytes]]
    seen: list[Seen]
    tls: ssl.SSLContext | None = None
    port: int = 0

    @contextlib.contextmanager
    def running(self) -> Iterator[Listener]:
        listener = self

        class Handler(QuietHandler):
            def _handle(self) -> None:
                body = self.read_body()
                scheme = "https" if isinstance(self.connection, ssl.SSLSocket) else "http"
                listener.seen.append(Seen(scheme, listener.port, self.command, self.path,
                                          self.headers.get("Authorization", "")))
                status, headers, payload = listener.respond(self, scheme, body)
                send_reply(self, status, headers.items(), payload)

            do_GET = do_PUT = do_POST = do_PATCH = do_HEAD = _handle

        server = _DualServer(Handler, self.tls)
        self.port = int(server.server_address[1])
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass
class FakeRegistry:
    """A registry that wants ``accepted`` in Authorization (after a ``challenge``) and stores what is pushed.

    ``location`` makes the upload ``Location`` header: called with the registry's port, it returns a path or URL.
    """

    challenge: str
    accepted: str
    location: Callable[[int], str] = lambda _port: "/v2/team/app/blobs/uploads/u1"
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, bytes] = field(default_factory=dict)

    def respond(self, req: BaseHTTPRequestHandler, _scheme: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        path = req.path.split("?", 1)[0]
        if req.headers.get("Authorization", "") != self.accepted:
            return 401, {"WWW-Authenticate": self.challenge}, b'{"errors":[{"code":"UNAUTHORIZED"}]}'
        if path == "/v2/":
            return 200, {}, b"{}"
        if "/blobs/uploads/" in path and req.command == "POST":
            return 202, {"Location": self.location(req.server.server_address[1])}, b""
        if "/blobs/uploads/" in path and req.command == "PUT":
            digest = req.path.split("digest=", 1)[1].replace("%3A", ":")
            self.blobs[digest] = body
            return 201, {"Docker-Content-Digest": digest}, b""
        if "/blobs/" in path:
            digest = path.rsplit("/", 1)[1]
            return (200 if digest in self.blobs else 404), {}, b""
        if "/manifests/" in path:
            reference = path.rsplit("/", 1)[1]
            if req.command == "PUT":
                self.manifests[reference] = body
                return 201, {"Docker-Content-Digest": "sha256:" + hashlib.sha256(body).hexdigest()}, b""
            data = self.manifests.get(reference)
            if data is None:
                return 404, {}, b""
            return 200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json",
                         "Docker-Content-Digest": "sha256:" + hashlib.sha256(data).hexdigest()}, data
        return 404, {}, b""


@dataclass
class FakeTokenServer:
    """Answers any request with a token (whatever credentials came): the test checks what arrived, not access."""

    token: str = "t0ken"

    def respond(self, _req: BaseHTTPRequestHandler, _scheme: str, _body: bytes) -> tuple[int, dict[str, str], bytes]:
        return 200, {"Content-Type": "application/json"}, json.dumps({"token": self.token}).encode()


def oci_layout(directory: Path) -> Path:
    """A one-layer OCI image layout in ``directory`` (what a push sends)."""

    def blob(data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (directory / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (directory / "blobs" / "sha256" / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    config = blob(b'{"architecture":"amd64","os":"linux"}')
    layer = blob(b"layer bytes")
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": config, "layers": [layer]}).encode()
    top = blob(manifest)
    (directory / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {**top, "mediaType": "application/vnd.oci.image.manifest.v1+json"}]}))
    return directory
