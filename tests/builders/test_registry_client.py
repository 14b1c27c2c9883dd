"""Registry client pieces that need no server: references, credential files, OCI layouts."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from builders.registry import (
    Credentials,
    ImageRef,
    RegistryError,
    credential_files,
    find_credentials,
    read_layout,
)


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
