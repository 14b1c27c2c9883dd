"""The image index over per-platform builds: platforms come from each image's config, blobs are merged, and two
images of one platform are refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from builders.engines import EngineError
from builders.multiarch import index_children, index_layout, platform_builds

MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _put(layout: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


def _layout(path: Path, arch: str, variant: str | None = None) -> Path:
    config = {"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
    if variant:
        config["variant"] = variant
    c_digest, c_size = _put(path, json.dumps(config).encode())
    layer_digest, layer_size = _put(path, arch.encode())
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c_digest,
                           "size": c_size},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                            "size": layer_size}]}  # fmt: skip
    m_digest, m_size = _put(path, json.dumps(manifest).encode())
    index = {"schemaVersion": 2, "manifests": [{"mediaType": MANIFEST, "digest": m_digest, "size": m_size}]}
    (path / "index.json").write_text(json.dumps(index))
    return path


def test_index_lists_each_image_with_the_platform_of_its_config(tmp_path: Path) -> None:
    amd = _layout(tmp_path / "amd", "amd64")
    arm = _layout(tmp_path / "arm", "arm64", "v8")
    merged = index_layout([amd, arm], tmp_path / "index")
    children = dict(index_children(merged))
    assert set(children) == {"linux/amd64", "linux/arm64/v8"}
    for digest in children.values():
        assert (merged / "blobs" / "sha256" / digest.split(":")[1]).is_file()
    top = json.loads((merged / "index.json").read_text())["manifests"][0]
    assert top["mediaType"] == "application/vnd.oci.image.index.v1+json"


def test_two_images_of_one_platform_are_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="two builds for the same platform"):
        index_layout([_layout(tmp_path / "a", "amd64"), _layout(tmp_path / "b", "amd64")], tmp_path / "index")


def test_an_unreadable_platform_record_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "builds").mkdir()
    (tmp_path / "builds" / "linux-arm64.json").write_text("{not json")
    with pytest.raises(EngineError, match=r"linux-arm64\.json: unreadable build record"):
        platform_builds(tmp_path)
