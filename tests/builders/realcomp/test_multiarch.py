"""Multi-arch push: an output directory built for linux/amd64 and linux/arm64 pushes one OCI image index, verified
by our client (index and both images read back by digest) and independently by skopeo."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import Result

pytestmark = pytest.mark.slow

INDEX = "application/vnd.oci.image.index.v1+json"


def _skopeo(*args: str) -> bytes:
    return subprocess.run(["skopeo", *args], capture_output=True, check=True, timeout=120).stdout


def _platform(entry: dict[str, Any]) -> str:
    plat = entry["platform"]
    return "/".join(v for v in (plat["os"], plat["architecture"], plat.get("variant")) if v)


def test_builds_for_two_platforms_push_as_one_index_that_skopeo_reads_back(
    containers: Any, registry: Any, appopt: Callable[..., Result], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    # FROM scratch + COPY: no base image to pull for either platform, no code of either to run. The file differs
    # per platform: buildah 1.28's layer cache does not key on --platform and would hand back the first image
    # (the index refuses two images of one platform, see the check below).
    (out / "Dockerfile").write_text('FROM scratch\nCOPY hello.txt /hello.txt\nLABEL io.appopt.route="multiarch-test"\n')
    for platform in ("linux/amd64", "linux/arm64/v8"):
        (out / "hello.txt").write_text(f"hello from {platform}\n")
        built = appopt("build", out, "--engine", "buildah", "--platform", platform,
                       "--tag", "localhost/appopt-test/multi:1", "--quiet")  # fmt: skip
        assert built.exit_code == 0, built.output
    target = f"{registry.address}/team/multi:v1"
    pushed = appopt("push", out, "--to", target, "--insecure")
    assert pushed.exit_code == 0, pushed.output
    record = json.loads((out / "push.json").read_text())
    assert set(record["platforms"]) == {"linux/amd64", "linux/arm64/v8"}

    raw = _skopeo("inspect", "--raw", "--tls-verify=false", f"docker://{target}")
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == record["digest"]
    index = json.loads(raw)
    assert index["mediaType"] == INDEX
    assert {_platform(m): m["digest"] for m in index["manifests"]} == record["platforms"]
    for platform, digest in record["platforms"].items():
        child = _skopeo("inspect", "--raw", "--tls-verify=false", f"docker://{registry.address}/team/multi@{digest}")
        assert "sha256:" + hashlib.sha256(child).hexdigest() == digest, platform
        config = json.loads(_skopeo("inspect", "--config", "--tls-verify=false",
                                    f"docker://{registry.address}/team/multi@{digest}"))  # fmt: skip
        assert config["architecture"] == platform.split("/")[1]
        assert config["config"]["Labels"]["io.appopt.route"] == "multiarch-test"


def test_one_platform_pushes_a_plain_manifest(
    busybox_image: str, registry: Any, appopt: Callable[..., Result], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "Dockerfile").write_text(f"FROM {busybox_image}\nLABEL io.appopt.route=single\n")
    assert appopt("build", out, "--engine", "buildah", "--tag", "localhost/appopt-test/single:1").exit_code == 0
    pushed = appopt("push", out, "--to", f"{registry.address}/team/single:v1", "--insecure")
    assert pushed.exit_code == 0, pushed.output
    raw = json.loads(_skopeo("inspect", "--raw", "--tls-verify=false", f"docker://{registry.address}/team/single:v1"))
    assert raw.get("mediaType") != INDEX and "platforms" not in json.loads((out / "push.json").read_text())
