"""Pushes to the real distribution registry: plain and TLS+htpasswd, digests checked by an independent client.

Faults a real registry cannot be made to produce on demand (a 500 then success, a dropped connection) come from a
tiny proxy on 127.0.0.1 in front of the real registry.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from builders.engines import get_engine
from builders.registry import RegistryError, push_layout
from tests.builders.realcomp.conftest import Registry, TokenRegistry
from tests.builders.realcomp.servers import Fault, FaultProxy, free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def busybox_layout(busybox_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The busybox image as an OCI layout (what every push sends)."""
    return get_engine("buildah").export_oci(busybox_image, tmp_path_factory.mktemp("layout") / "oci")


@pytest.fixture
def built_out(busybox_image: str, tmp_path: Path, appopt: Callable[..., Result]) -> Path:
    """An output directory whose image `appopt build` has built (the input of `appopt push`)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "Dockerfile").write_text(f'FROM {busybox_image}\nLABEL io.appopt.route="push-test"\n'
                                    'ENTRYPOINT ["echo", "pushed and pulled"]\n')
    result = appopt("build", out, "--engine", "buildah", "--tag", "localhost/appopt-test/pushme:1", "--quiet")
    assert result.exit_code == 0, result.output
    return out


def skopeo_digest(ref: str, *extra: str) -> str:
    proc = subprocess.run(["skopeo", "inspect", *extra, f"docker://{ref}"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["Digest"])


def test_push_to_plain_registry_and_pull_back(built_out: Path, registry: Registry,
                                              appopt: Callable[..., Result]) -> None:
    target = f"{registry.address}/team/pushme:v1"
    result = appopt("push", built_out, "--to", target, "--insecure")
    assert result.exit_code == 0, result.output
    record = json.loads((built_out / "push.json").read_text())
    assert f"digest {record['digest']}" in result.output
    assert skopeo_digest(target, "--tls-verify=false") == record["digest"]
    # The registry serves what was pushed: pull it back and run it.
    pulled = subprocess.run(["podman", "pull", "--tls-verify=false", target], capture_output=True, text=True,
                            timeout=120, check=False)
    assert pulled.returncode == 0, pulled.stderr
    run = subprocess.run(["podman", "run", "--rm", target], capture_output=True, text=True, timeout=60, check=False)
    assert run.stdout == "pushed and pulled\n", run.stderr


def test_second_push_skips_blobs_already_there(busybox_layout: Path, registry: Registry) -> None:
    first = push_layout(busybox_layout, f"{registry.address}/team/again:1", insecure=True)
    second = push_layout(busybox_layout, f"{registry.address}/team/again:2", insecure=True)
    assert first.blobs_uploaded >= 2
    assert second.blobs_uploaded == 0 and second.blobs_present == first.blobs_uploaded
    assert second.digest == first.digest


def test_plain_http_registry_without_insecure_is_one_line(busybox_layout: Path, registry: Registry) -> None:
    with pytest.raises(RegistryError) as err:
        push_layout(busybox_layout, f"{registry.address}/team/x:1")
    assert len(err.value.lines) == 1 and "--insecure" in err.value.lines[0]


def _docker_config(tmp_path: Path, registry: Registry, password: str) -> Path:
    auth = base64.b64encode(f"{registry.user}:{password}".encode()).decode()
    config = tmp_path / "docker-config"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"auths": {registry.address: {"auth": auth}}}))
    return config


def test_push_with_htpasswd_auth_and_verified_tls(built_out: Path, auth_registry: Registry, tmp_path: Path,
                                                  appopt: Callable[..., Result],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert auth_registry.password is not None and auth_registry.cert is not None
    monkeypatch.setenv("DOCKER_CONFIG", str(_docker_config(tmp_path, auth_registry, auth_registry.password)))
    monkeypatch.setenv("SSL_CERT_FILE", str(auth_registry.cert))  # trust the self-signed cert: no --insecure
    target = f"{auth_registry.address}/team/secure:v1"
    result = appopt("push", built_out, "--to", target)
    assert result.exit_code == 0, result.output
    digest = json.loads((built_out / "push.json").read_text())["digest"]
    creds = f"--creds={auth_registry.user}:{auth_registry.password}"
    assert skopeo_digest(target, creds, "--tls-verify=false") == digest


def test_push_with_token_authentication(built_out: Path, token_registry: TokenRegistry, tmp_path: Path,
                                        appopt: Callable[..., Result], monkeypatch: pytest.MonkeyPatch) -> None:
    registry, tokens = token_registry.registry, token_registry.tokens
    assert registry.password is not None
    monkeypatch.setenv("DOCKER_CONFIG", str(_docker_config(tmp_path, registry, registry.password)))
    monkeypatch.setenv("SSL_CERT_FILE", str(tokens.cert))  # --insecure is for the registry, not its token server
    target = f"{registry.address}/team/tokened:v1"
    result = appopt("push", built_out, "--to", target, "--insecure")
    assert result.exit_code == 0, result.output
    # the registry sent us to the token server, which was asked for this repository with our credentials
    assert (registry.user, "repository:team/tokened:pull,push") in tokens.seen
    digest = json.loads((built_out / "push.json").read_text())["digest"]
    creds = f"--creds={registry.user}:{registry.password}"
    assert skopeo_digest(target, creds, "--tls-verify=false") == digest  # skopeo does its own token dance


def test_token_server_refusing_the_password_is_one_line(built_out: Path, token_registry: TokenRegistry,
                                                        tmp_path: Path, appopt: Callable[..., Result],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    registry = token_registry.registry
    monkeypatch.setenv("DOCKER_CONFIG", str(_docker_config(tmp_path, registry, "wrong")))
    monkeypatch.setenv("SSL_CERT_FILE", str(token_registry.tokens.cert))
    result = appopt("push", built_out, "--to", f"{registry.address}/team/tokened:v2", "--insecure")
    assert result.exit_code == 5
    assert result.output.count("error:") == 1
    assert "were refused (HTTP 401)" in result.output


def test_insecure_does_not_cover_the_token_server(busybox_layout: Path, token_registry: TokenRegistry,
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the registry is plain HTTP (--insecure); its token server's self-signed certificate is not trusted here
    registry, tokens = token_registry.registry, token_registry.tokens
    assert registry.password is not None
    monkeypatch.setenv("DOCKER_CONFIG", str(_docker_config(tmp_path, registry, registry.password)))
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    before = len(tokens.seen)
    with pytest.raises(RegistryError) as err:
        push_layout(busybox_layout, f"{registry.address}/team/untrusted-token:1", insecure=True)
    assert len(err.value.lines) == 1 and "TLS certificate not trusted" in err.value.lines[0]
    assert len(tokens.seen) == before  # no request, so no credentials, reached the token server


def test_podman_auth_file_is_used(busybox_layout: Path, auth_registry: Registry, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    auth = base64.b64encode(f"{auth_registry.user}:{auth_registry.password}".encode()).decode()
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(json.dumps({"auths": {f"{auth_registry.address}/team": {"auth": auth}}}))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth_file))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
    result = push_layout(busybox_layout, f"{auth_registry.address}/team/podman-auth:1", insecure=True)
    assert result.digest.startswith("sha256:")


def test_wrong_password_is_one_line(built_out: Path, auth_registry: Registry, tmp_path: Path,
                                    appopt: Callable[..., Result], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(_docker_config(tmp_path, auth_registry, "wrong")))
    result = appopt("push", built_out, "--to", f"{auth_registry.address}/team/secure:v2", "--insecure")
    assert result.exit_code == 5
    assert result.output.count("error:") == 1
    assert "were refused (HTTP 401)" in result.output and "docker-config/config.json" in result.output


def test_missing_credentials_say_how_to_log_in(busybox_layout: Path, auth_registry: Registry, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "none.json"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    with pytest.raises(RegistryError) as err:
        push_layout(busybox_layout, f"{auth_registry.address}/team/anon:1", insecure=True)
    assert len(err.value.lines) == 1
    assert "authentication required" in err.value.lines[0] and "podman login" in err.value.lines[0]


def test_untrusted_certificate_without_insecure_is_one_line(busybox_layout: Path, auth_registry: Registry,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with pytest.raises(RegistryError) as err:
        push_layout(busybox_layout, f"{auth_registry.address}/team/x:1")
    assert "TLS certificate not trusted" in err.value.lines[0] and "--insecure" in err.value.lines[0]


def test_server_errors_and_dropped_connections_are_retried(busybox_layout: Path, registry: Registry) -> None:
    faults = [Fault("PUT", "/blobs/uploads/", 500), Fault("PUT", "/manifests/", 503),
              Fault("HEAD", "/blobs/", None), Fault("GET", "/manifests/", 502)]
    events: list[str] = []
    with FaultProxy(registry.address, faults).running() as proxy:
        result = push_layout(busybox_layout, f"{proxy.address}/team/flaky:1", insecure=True, backoff_seconds=0.05,
                             progress=events.append)
    assert all(f.hits == 1 for f in faults), proxy.seen
    assert result.retries == 4
    assert sum("retry" in e for e in events) == 4
    # The image reached the real registry intact.
    assert skopeo_digest(f"{registry.address}/team/flaky:1", "--tls-verify=false") == result.digest


def test_persistent_server_errors_give_up_with_one_line(busybox_layout: Path, registry: Registry) -> None:
    proxy = FaultProxy(registry.address, [Fault("PUT", "/manifests/", 500, times=99)])
    with proxy.running(), pytest.raises(RegistryError) as err:
        push_layout(busybox_layout, f"{proxy.address}/team/down:1", insecure=True, attempts=3, backoff_seconds=0.01)
    assert len(err.value.lines) == 1
    assert "failed after 3 attempts: HTTP 500" in err.value.lines[0]


def test_connection_refused_is_one_line_and_fast(built_out: Path, appopt: Callable[..., Result]) -> None:
    started = time.monotonic()
    result = appopt("push", built_out, "--to", f"127.0.0.1:{free_port()}/team/x:1", "--insecure")
    assert result.exit_code == 5
    assert result.output.count("error:") == 1 and "connection refused" in result.output
    assert time.monotonic() - started < 30


def test_build_with_push_in_one_command(busybox_image: str, registry: Registry, tmp_path: Path,
                                        appopt: Callable[..., Result]) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM {busybox_image}\nRUN echo built > /built.txt\n")
    target = f"{registry.address}/team/built-and-pushed:1"
    result = appopt("build", tmp_path, "--engine", "buildah", "--tag", target, "--push", "--insecure", "--quiet")
    assert result.exit_code == 0, result.output
    digest = json.loads((tmp_path / "push.json").read_text())["digest"]
    assert f"pushed {target} digest {digest}" in result.output
    assert skopeo_digest(target, "--tls-verify=false") == digest
