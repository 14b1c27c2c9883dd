"""The registry client against no server (references, credential files, OCI layouts) and against a scripted one on
127.0.0.1 (tests/builders/fake_registry.py) that records where every credential arrives."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

import builders.registry as registry_module
from builders.registry import (
    Credentials,
    ImageRef,
    PushResult,
    RegistryError,
    credential_files,
    find_credentials,
    push_layout,
    read_layout,
)
from tests.builders.fake_registry import FakeRegistry, FakeTokenServer, Listener, Seen, basic, oci_layout, server_tls
from tests.builders.realcomp.servers import self_signed_cert


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag"),
    [
        ("ubuntu", "docker.io", "library/ubuntu", None),
        ("team/app:1.0", "docker.io", "team/app", "1.0"),
        ("localhost/app", "localhost", "app", None),
        ("127.0.0.1:5000/a/b/c:v2", "127.0.0.1:5000", "a/b/c", "v2"),
        ("registry.example.org/team/app:latest", "registry.example.org", "team/app", "latest"),
    ],
)
def test_image_refs_follow_docker_rules(text: str, registry: str, repository: str, tag: str | None) -> None:
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.tag) == (registry, repository, tag)


@pytest.mark.parametrize("bad", ["Team/App", "host:5000/app:bad tag", "app@sha256:123", "host:5000/"])
def test_bad_refs_are_one_line(bad: str) -> None:
    with pytest.raises(RegistryError) as err:
        ImageRef.parse(bad)
    assert len(err.value.lines) == 1 and bad in err.value.lines[0]


def _auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def test_podman_auth_file_wins_over_docker_config(tmp_path: Path) -> None:
    podman = tmp_path / "auth.json"
    podman.write_text(json.dumps({"auths": {"reg.example:5000": {"auth": _auth("pod", "pw1")}}}))
    docker_dir = tmp_path / "docker"
    docker_dir.mkdir()
    (docker_dir / "config.json").write_text(json.dumps({"auths": {"reg.example:5000": {"auth": _auth("dock", "x")}}}))
    env = {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(podman), "DOCKER_CONFIG": str(docker_dir)}
    assert credential_files(env)[0] == podman
    found = find_credentials(ImageRef.parse("reg.example:5000/team/app:1"), env)
    assert found == Credentials("pod", "pw1", str(podman))


def test_most_specific_namespace_key_wins_and_hub_aliases_match(tmp_path: Path) -> None:
    config = tmp_path / ".docker" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"auths": {
        "reg.example": {"auth": _auth("host-wide", "a")},
        "https://reg.example/team": {"auth": _auth("team", "b")},
        "https://index.docker.io/v1/": {"username": "hub", "password": "c"},
    }}))
    env = {"HOME": str(tmp_path)}

    def user(ref: str) -> str | None:
        found = find_credentials(ImageRef.parse(ref), env)
        return found.username if found else None

    assert user("reg.example/team/app") == "team"
    assert user("reg.example/other/app") == "host-wide"
    assert user("library/python:3.11") == "hub"
    assert user("elsewhere.example/app") is None


def test_credential_helper_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    helper = tmp_path / "bin" / "docker-credential-fake"
    helper.parent.mkdir()
    helper.write_text('#!/bin/sh\nread server\necho "{\\"Username\\": \\"helped\\", \\"Secret\\": \\"$server\\"}"\n')
    helper.chmod(0o755)
    config = tmp_path / ".docker" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"credHelpers": {"reg.example": "fake"}}))
    monkeypatch.setenv("PATH", f"{helper.parent}:/usr/bin:/bin")  # helpers are looked up on the process PATH
    found = find_credentials(ImageRef.parse("reg.example/app"), {"HOME": str(tmp_path)})
    assert found is not None and (found.username, found.password) == ("helped", "reg.example")


def test_broken_credential_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "auth.json").write_text("{not json")
    with pytest.raises(RegistryError) as err:
        find_credentials(ImageRef.parse("reg.example/app"), {"HOME": str(tmp_path),
                                                             "REGISTRY_AUTH_FILE": str(tmp_path / "auth.json")})
    assert "unreadable credential file" in err.value.lines[0]


def _blob(layout: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def test_layout_reading_checks_sizes_and_digest(tmp_path: Path) -> None:
    config = _blob(tmp_path, b'{"architecture":"amd64","os":"linux"}')
    layer = _blob(tmp_path, b"layer bytes")
    manifest = json.dumps({"schemaVersion": 2, "config": config, "layers": [layer]}).encode()
    top = _blob(tmp_path, manifest)
    (tmp_path / "index.json").write_text(json.dumps({"manifests": [
        {**top, "mediaType": "application/vnd.oci.image.manifest.v1+json"}]}))
    image = read_layout(tmp_path)
    assert image.digest == top["digest"]
    assert {b.digest for b in image.blobs} == {config["digest"], layer["digest"]}

    (tmp_path / "blobs" / "sha256" / str(layer["digest"]).split(":")[1]).write_bytes(b"truncated")
    with pytest.raises(RegistryError, match="does not match the manifest"):
        read_layout(tmp_path)


# --- credential files are parsed strictly ---------------------------------------------------------------------------

_SECRET = "s3cret-pw"


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _entry(entry: dict[str, object]) -> str:
    return json.dumps({"auths": {"reg.example": entry}})


# (file text, a word the one-line error must contain); none of these may give a traceback or silent credentials
MALFORMED_CREDENTIAL_FILES = [
    ("[]", "a JSON object, not an array"),
    ("null", "a JSON object, not null"),
    ('"auths"', "a JSON object, not a string"),
    ('{"auths": []}', "auths must be an object"),
    ('{"auths": "reg.example"}', "auths must be an object"),
    ('{"auths": {"reg.example": "user:pw"}}', "auths.reg.example must be an object"),
    ('{"auths": {"reg.example": {"auth": 123}}}', "auths.reg.example.auth must be a string"),
    ('{"auths": {"reg.example": {"auth": "not base64 at all!"}}}', "auths.reg.example.auth is not base64"),
    ('{"auths": {"reg.example": {"auth": "!!"}}}', "auths.reg.example.auth is not base64"),  # was user "" pw ""
    (_entry({"auth": _b64(_SECRET.encode())}), "no user:password pair"),
    (_entry({"auth": _b64(f":{_SECRET}".encode())}), "no user:password pair"),
    (_entry({"auth": _b64(b"u:\xff\xfe")}), "auths.reg.example.auth is not base64"),
    (_entry({"username": 5, "password": _SECRET}), "username must be a string"),
    (_entry({"password": _SECRET}), "a password without a username"),
    ('{"auths": {"other.example": {"auth": "!!"}, "reg.example": {}}}', "auths.other.example.auth is not base64"),
    ('{"credHelpers": ["pass"]}', "credHelpers must be an object"),
    ('{"credHelpers": {"reg.example": 7}}', "credHelpers.reg.example must be a helper name"),
    ('{"credHelpers": {"reg.example": "../../../bin/sh"}}', "credHelpers.reg.example must be a helper name"),
    ('{"credsStore": 5}', "credsStore must be a helper name"),
    ('{"credsStore": "/usr/bin/env"}', "credsStore must be a helper name"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"auths": {"reg.example\\n": {"auth": 1}}}', "auths.'reg.example\\n'.auth must be a string"),
]


@pytest.mark.parametrize(("text", "expected"), MALFORMED_CREDENTIAL_FILES,
                         ids=[f"shape{i}" for i in range(len(MALFORMED_CREDENTIAL_FILES))])
def test_malformed_credential_files_are_one_line_errors(tmp_path: Path, text: str, expected: str) -> None:
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(text)
    with pytest.raises(RegistryError) as err:
        find_credentials(ImageRef.parse("reg.example/team/app"), {"HOME": str(tmp_path),
                                                                  "REGISTRY_AUTH_FILE": str(auth_file)})
    assert len(err.value.lines) == 1 and "\n" not in err.value.lines[0], err.value.lines
    line = err.value.lines[0]
    assert line.startswith(f"{auth_file}: ") and expected in line
    assert _SECRET not in line and len(line) < 300


def test_non_utf8_credential_file_is_one_line(tmp_path: Path) -> None:
    auth_file = tmp_path / "auth.json"
    auth_file.write_bytes(b'{"auths": {"reg.example": {"username": "\xff"}}}')
    with pytest.raises(RegistryError, match="not UTF-8"):
        find_credentials(ImageRef.parse("reg.example/app"), {"HOME": str(tmp_path),
                                                             "REGISTRY_AUTH_FILE": str(auth_file)})


def test_valid_shapes_still_parse(tmp_path: Path) -> None:
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(json.dumps({"auths": {
        "reg.example": {"auth": _auth("u", "pw:with:colons"), "email": "ignored@example.org"},
        "empty.example": {}, "null.example": None,
        "plain.example": {"username": "p", "password": "q"},
    }, "credsStore": "", "credHelpers": {}}))
    env = {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(auth_file)}
    assert find_credentials(ImageRef.parse("reg.example/app"), env) == Credentials("u", "pw:with:colons",
                                                                                   str(auth_file))
    assert find_credentials(ImageRef.parse("plain.example/app"), env) == Credentials("p", "q", str(auth_file))
    assert find_credentials(ImageRef.parse("empty.example/app"), env) is None


@pytest.mark.parametrize("answer", ["[]", '{"Username": 1, "Secret": "x"}', "not json", '{"Username": "u"}'])
def test_unreadable_helper_answer_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
    helper = tmp_path / "bin" / "docker-credential-odd"
    helper.parent.mkdir()
    helper.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{answer}'\n")
    helper.chmod(0o755)
    (tmp_path / "auth.json").write_text(json.dumps({"credHelpers": {"reg.example": "odd"}}))
    monkeypatch.setenv("PATH", f"{helper.parent}:/usr/bin:/bin")
    with pytest.raises(RegistryError) as err:
        find_credentials(ImageRef.parse("reg.example/app"), {"HOME": str(tmp_path),
                                                             "REGISTRY_AUTH_FILE": str(tmp_path / "auth.json")})
    assert len(err.value.lines) == 1 and "unreadable answer" in err.value.lines[0]


# --- passwords never appear in a message ----------------------------------------------------------------------------


@pytest.mark.parametrize("destination", [
    f"user:{_SECRET}@127.0.0.1:5000/team/app:1",
    f"user:{_SECRET}@registry.example.org/team/app",
    f"user:{_SECRET}@127.0.0.1:5000",
    f"user:{_SECRET}@registry.example.org",
    f"user:pa/{_SECRET}@registry.example.org/team/app",
    f"user:pa@{_SECRET}@registry.example.org/team/app",
    f"https://user:{_SECRET}@registry.example.org/team/app",
    f"user:{_SECRET}@registry.example.org/team/app@sha256:{'a' * 64}",
])
def test_credentials_in_the_reference_are_refused_and_masked(tmp_path: Path, destination: str) -> None:
    layout = oci_layout(tmp_path / "oci")
    with pytest.raises(RegistryError) as err:
        push_layout(layout, destination, credentials=Credentials("x", "y"))
    assert len(err.value.lines) == 1
    assert _SECRET not in err.value.lines[0] and "***" in err.value.lines[0]


@pytest.mark.parametrize("bad", ["host:5000/app:v1\n", "host:5000/app:v1\nRUN id", "ho\tst:5000/app", "",
                                 "host:5000/app\x00", "bad_host!:5000/app", "x" * 600])
def test_references_with_whitespace_or_control_characters_are_one_line(bad: str) -> None:
    with pytest.raises(RegistryError) as err:
        ImageRef.parse(bad)
    assert len(err.value.lines) == 1 and "\n" not in err.value.lines[0] and len(err.value.lines[0]) < 300


# --- credentials stay on the registry's origin: a scripted registry on 127.0.0.1 ------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (cert, key); a second call of self_signed_cert makes another CA."""
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def other_tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_cert(tmp_path_factory.mktemp("tls-other"))


USER = "pusher"
CREDS = Credentials(USER, _SECRET, "test")


def _push(tmp_path: Path, address: str, *, insecure: bool = False, cert: Path | None = None,
          events: list[str] | None = None) -> PushResult:
    env = {"HOME": str(tmp_path)} | ({"SSL_CERT_FILE": str(cert)} if cert else {})
    layout = tmp_path / "oci"
    if not layout.exists():
        oci_layout(layout)
    return push_layout(layout, f"{address}/team/app:1", insecure=insecure, credentials=CREDS, attempts=1,
                       backoff_seconds=0.01, progress=(events.append if events is not None else None), env=env)


def _credentials_seen(seen: list[Seen]) -> list[Seen]:
    return [s for s in seen if s.authorization]


def test_tls_registry_with_basic_auth_keeps_credentials_on_its_origin(tmp_path: Path,
                                                                      tls_files: tuple[Path, Path]) -> None:
    seen: list[Seen] = []
    registry = FakeRegistry('Basic realm="fake"', basic(USER, _SECRET))
    events: list[str] = []
    with Listener(registry.respond, seen, server_tls(*tls_files)).running() as server:
        result = _push(tmp_path, f"127.0.0.1:{server.port}", cert=tls_files[0], events=events)
    assert result.blobs_uploaded == 2
    assert _credentials_seen(seen) and all(s.scheme == "https" for s in seen)
    assert not any(_SECRET in e for e in events)


def test_tls_registry_sending_the_upload_to_plain_http_gets_no_credentials(tmp_path: Path,
                                                                           tls_files: tuple[Path, Path]) -> None:
    # Location: http://<the same host and port>/...: the listener answers plain HTTP there too
    seen: list[Seen] = []
    registry = FakeRegistry('Basic realm="fake"', basic(USER, _SECRET),
                            location=lambda port: f"http://127.0.0.1:{port}/v2/team/app/blobs/uploads/u1")
    with Listener(registry.respond, seen, server_tls(*tls_files)).running() as server, \
            pytest.raises(RegistryError) as err:
        _push(tmp_path, f"127.0.0.1:{server.port}", cert=tls_files[0])
    assert [s for s in seen if s.scheme == "http"] == []
    assert len(err.value.lines) == 1 and "plain HTTP" in err.value.lines[0] and _SECRET not in err.value.lines[0]


def test_upload_sent_to_another_https_origin_goes_without_credentials(tmp_path: Path,
                                                                      tls_files: tuple[Path, Path]) -> None:
    seen: list[Seen] = []
    storage_seen: list[Seen] = []
    storage = FakeRegistry("", "")  # a storage backend: the upload URL is its own authority
    with Listener(storage.respond, storage_seen, server_tls(*tls_files)).running() as backend:
        registry = FakeRegistry('Basic realm="fake"', basic(USER, _SECRET), blobs=storage.blobs,
                                location=lambda _port: f"https://127.0.0.1:{backend.port}/v2/team/app/blobs/uploads/u1?session=abc")
        with Listener(registry.respond, seen, server_tls(*tls_files)).running() as server:
            result = _push(tmp_path, f"127.0.0.1:{server.port}", cert=tls_files[0])
    assert result.blobs_uploaded == 2 and len(storage_seen) == 2
    assert _credentials_seen(storage_seen) == []


@pytest.mark.parametrize("tls_registry", [True, False], ids=["tls-registry", "insecure-http-registry"])
def test_bearer_realm_over_plain_http_elsewhere_gets_no_credentials(tmp_path: Path, tls_files: tuple[Path, Path],
                                                                    tls_registry: bool) -> None:
    seen: list[Seen] = []
    token_seen: list[Seen] = []
    with Listener(FakeTokenServer().respond, token_seen).running() as tokens:
        registry = FakeRegistry(f'Bearer realm="http://127.0.0.1:{tokens.port}/token",service="fake"',
                                "Bearer t0ken")
        listener = Listener(registry.respond, seen, server_tls(*tls_files) if tls_registry else None)
        with listener.running() as server, pytest.raises(RegistryError) as err:
            _push(tmp_path, f"127.0.0.1:{server.port}", insecure=not tls_registry, cert=tls_files[0])
    assert _credentials_seen(token_seen) == []
    assert len(err.value.lines) == 1 and "plain HTTP" in err.value.lines[0] and _SECRET not in err.value.lines[0]


def test_bearer_realm_on_the_insecure_registrys_own_origin_gets_credentials(tmp_path: Path) -> None:
    # --insecure names this registry: its own plain-HTTP address may take the credentials (Docker does the same)
    seen: list[Seen] = []
    registry = FakeRegistry("", "Bearer t0ken")
    token = FakeTokenServer()

    def respond(req: BaseHTTPRequestHandler, scheme: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        if req.path.startswith("/token"):
            return token.respond(req, scheme, body)
        return registry.respond(req, scheme, body)

    with Listener(respond, seen).running() as server:
        registry.challenge = f'Bearer realm="http://127.0.0.1:{server.port}/token"'
        result = _push(tmp_path, f"127.0.0.1:{server.port}", insecure=True)
    assert result.blobs_uploaded == 2
    assert basic(USER, _SECRET) in [s.authorization for s in seen if s.path.startswith("/token")]


def test_insecure_does_not_extend_to_the_token_server(tmp_path: Path, tls_files: tuple[Path, Path],
                                                      other_tls_files: tuple[Path, Path]) -> None:
    # the registry is the --insecure one; the token server's certificate is checked as always
    seen: list[Seen] = []
    token_seen: list[Seen] = []
    with Listener(FakeTokenServer().respond, token_seen, server_tls(*other_tls_files)).running() as tokens:
        registry = FakeRegistry(f'Bearer realm="https://127.0.0.1:{tokens.port}/token"', "Bearer t0ken")
        with Listener(registry.respond, seen).running() as server:
            with pytest.raises(RegistryError) as err:
                _push(tmp_path, f"127.0.0.1:{server.port}", insecure=True, cert=tls_files[0])  # not its CA
            assert token_seen == []
            assert len(err.value.lines) == 1 and "TLS certificate not trusted" in err.value.lines[0]
            # trusted, the same token server gets the credentials (over https) and the push goes through
            result = _push(tmp_path, f"127.0.0.1:{server.port}", insecure=True, cert=other_tls_files[0])
    assert result.blobs_uploaded == 2
    assert [(s.scheme, s.authorization) for s in token_seen] == [("https", basic(USER, _SECRET))]


def test_insecure_registry_over_tls_still_checks_other_hosts_certificates(tmp_path: Path,
                                                                          tls_files: tuple[Path, Path],
                                                                          other_tls_files: tuple[Path, Path]) -> None:
    # --insecure skips verification for the named registry (untrusted cert here) but not for its storage backend
    storage = FakeRegistry("", "")
    storage_seen: list[Seen] = []
    with Listener(storage.respond, storage_seen, server_tls(*other_tls_files)).running() as backend:
        registry = FakeRegistry('Basic realm="fake"', basic(USER, _SECRET), blobs=storage.blobs,
                                location=lambda _port: f"https://127.0.0.1:{backend.port}/v2/team/app/blobs/uploads/u2")
        with Listener(registry.respond, [], server_tls(*tls_files)).running() as server, \
                pytest.raises(RegistryError) as err:
            _push(tmp_path, f"127.0.0.1:{server.port}", insecure=True)
    assert storage_seen == [] and "TLS certificate not trusted" in err.value.lines[0]


# --- hostile answers and layouts are one-line errors ----------------------------------------------------------------


def _own_origin_token_registry(token_body: bytes) -> tuple[FakeRegistry, Callable[..., tuple[int, dict[str, str],
                                                                                            bytes]]]:
    registry = FakeRegistry("", "Bearer t0ken")

    def respond(req: BaseHTTPRequestHandler, scheme: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        if req.path.startswith("/token"):
            return 200, {"Content-Type": "application/json"}, token_body
        return registry.respond(req, scheme, body)

    return registry, respond


@pytest.mark.parametrize("token_body", [b"[]", b'{"token": 5}', b'{"token": "a\\nInjected: 1"}', b'{"token": "x y"}',
                                        b"not json", b'{"token": ""}', b"[" * 50_000])
def test_hostile_token_answers_are_one_line(tmp_path: Path, token_body: bytes) -> None:
    registry, respond = _own_origin_token_registry(token_body)
    with Listener(respond, []).running() as server, pytest.raises(RegistryError) as err:
        registry.challenge = f'Bearer realm="http://127.0.0.1:{server.port}/token"'
        _push(tmp_path, f"127.0.0.1:{server.port}", insecure=True)
    assert len(err.value.lines) == 1 and "token answer without a usable token" in err.value.lines[0]


@pytest.mark.parametrize("error_body", [b'{"errors": "x"}', b'{"errors": [1, "a"]}', b'{"errors": {"code": 1}}',
                                        b'{"errors": [{"code": "DENIED", "message": "one\\ntwo"}]}', b"[" * 50_000])
def test_hostile_error_bodies_are_one_line(tmp_path: Path, error_body: bytes) -> None:
    registry = FakeRegistry('Basic realm="fake"', basic(USER, _SECRET))

    def respond(req: BaseHTTPRequestHandler, scheme: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        if req.command == "PUT" and "/manifests/" in req.path and req.headers.get("Authorization"):
            return 400, {"Content-Type": "application/json"}, error_body
        return registry.respond(req, scheme, body)

    with Listener(respond, []).running() as server, pytest.raises(RegistryError) as err:
        _push(tmp_path, f"127.0.0.1:{server.port}", insecure=True)
    assert len(err.value.lines) == 1 and "\n" not in err.value.lines[0] and "HTTP 400" in err.value.lines[0]


def test_oversized_answer_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "_MAX_ANSWER_BYTES", 1000)
    registry = FakeRegistry('Basic realm="fake"', basic(USER, _SECRET))

    def respond(req: BaseHTTPRequestHandler, scheme: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        status, headers, payload = registry.respond(req, scheme, body)
        return (status, headers, payload + b" " * 5000) if status == 401 else (status, headers, payload)

    with Listener(respond, []).running() as server, pytest.raises(RegistryError, match="larger than"):
        _push(tmp_path, f"127.0.0.1:{server.port}", insecure=True)


@pytest.mark.parametrize("index", [
    {"manifests": [{"digest": "sha256:../../../../etc/passwd", "size": 1}]},
    {"manifests": [{"digest": "sha256:" + "0" * 64 + "/../x", "size": 1}]},
    {"manifests": [{"size": 1}]},
    {"manifests": [{"digest": 7}]},
    {"manifests": "x"},
    [],
])
def test_malformed_layouts_are_one_line(tmp_path: Path, index: object) -> None:
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(RegistryError) as err:
        read_layout(tmp_path)
    assert len(err.value.lines) == 1 and str(tmp_path) in err.value.lines[0]
