"""Multi-platform images: one OCI image index over the builds of a plan for several platforms.

Every ``appopt build`` also records its build under ``OUT/builds/<os>-<arch>[-<variant>].json`` (by image ID,
since the builds for different platforms may share one tag). When a plan holds builds for more than one
platform, ``appopt push`` exports each, writes one OCI layout whose top manifest is an index of them (with the
platform each image's config declares), pushes that, and verifies the index and every platform's manifest by
reading them back from the registry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform as host_platform
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from builders.engines import EngineError, LineSink, get_engine
from builders.registry import (
    OCI_INDEX,
    OCI_MANIFEST,
    ImageRef,
    PushResult,
    RegistryClient,
    RegistryError,
    find_credentials,
    push_layout,
)

BUILDS_SUBDIR = "builds"
_HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le"}


def host_platform_name() -> str:
    """``linux/amd64`` on an x86-64 Linux host: what a build without ``--platform`` makes."""
    return f"linux/{_HOST_ARCH.get(host_platform.machine(), host_platform.machine())}"


def record_platform_build(out_dir: Path, record: Any) -> Path:
    """Keep ``record`` (a ``BuildRecord``) as the build of its platform (the host's when it names none)."""
    name = (record.platform or host_platform_name()).replace("/", "-")
    path = out_dir / BUILDS_SUBDIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(record), indent=2) + "\n", encoding="utf-8")
    return path


def platform_builds(out_dir: Path) -> list[dict[str, Any]]:
    """The per-platform build records of ``out_dir``, one per platform, sorted by file name."""
    records = []
    for path in sorted((out_dir / BUILDS_SUBDIR).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EngineError(f"{path}: unreadable build record ({exc}); build again") from None
        if not isinstance(data, dict) or not data.get("image_id") or not data.get("engine"):
            raise EngineError(f"{path}: build record without image_id/engine; build again")
        records.append(data)
    return records


def _blob(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    return layout / "blobs" / algorithm / hexdigest


def _single_manifest(layout: Path) -> dict[str, Any]:
    index = json.loads((layout / "index.json").read_text(encoding="utf-8"))
    manifests = index.get("manifests") or []
    if len(manifests) != 1:
        raise RegistryError(f"{layout}: expected one image, found {len(manifests)}")
    top: dict[str, Any] = manifests[0]
    return top


def index_layout(layouts: Sequence[Path], dest: Path) -> Path:
    """One OCI layout at ``dest`` whose image is an index of the single images in ``layouts``; each entry's
    platform is read from that image's config."""
    (dest / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (dest / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}\n')
    entries = []
    for layout in layouts:
        top = _single_manifest(layout)
        manifest = json.loads(_blob(layout, top["digest"]).read_bytes())
        config = json.loads(_blob(layout, manifest["config"]["digest"]).read_bytes())
        plat = {"architecture": config["architecture"], "os": config["os"]}
        if config.get("variant"):
            plat["variant"] = config["variant"]
        for source in (layout / "blobs").rglob("*"):
            if source.is_file():
                target = dest / source.relative_to(layout)
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists():
                    shutil.copyfile(source, target)
        entries.append({"mediaType": top.get("mediaType") or manifest.get("mediaType") or OCI_MANIFEST,
                        "digest": top["digest"], "size": top["size"], "platform": plat})  # fmt: skip
    seen = [json.dumps(e["platform"], sort_keys=True) for e in entries]
    if len(set(seen)) != len(seen):
        raise EngineError(f"two builds for the same platform: {', '.join(seen)}")
    data = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}, indent=2).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    _blob(dest, digest).write_bytes(data)
    top_entry = {"mediaType": OCI_INDEX, "digest": digest, "size": len(data)}
    (dest / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top_entry]}) + "\n")
    return dest


def index_children(layout: Path) -> list[tuple[str, str]]:
    """``(platform, digest)`` of each image under the index in ``layout``."""
    top = _single_manifest(layout)
    index = json.loads(_blob(layout, top["digest"]).read_bytes())
    return [("/".join(v for v in (m["platform"]["os"], m["platform"]["architecture"], m["platform"].get("variant"))
                      if v), m["digest"]) for m in index["manifests"]]  # fmt: skip


def verify_children(
    destination: str, children: Sequence[tuple[str, str]], *, insecure: bool, env: Mapping[str, str] | None
) -> None:
    """Read every platform's manifest back by digest; its bytes must hash to that digest."""
    ref = ImageRef.parse(destination)
    client = RegistryClient(ref, insecure=insecure, credentials=find_credentials(ref, env), env=env)
    client.ping()
    for plat, digest in children:
        data, _media_type, _header = client.get_manifest(digest)
        fetched = "sha256:" + hashlib.sha256(data).hexdigest()
        if fetched != digest:
            raise RegistryError(f"{ref}: the {plat} manifest read back has digest {fetched}, pushed {digest}")


def push_platforms(
    records: Sequence[Mapping[str, Any]],
    target: str,
    *,
    insecure: bool = False,
    attempts: int = 4,
    backoff_seconds: float = 0.5,
    on_line: LineSink | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[PushResult, list[tuple[str, str]]]:
    """Push the builds of several platforms as one image index at ``target``; verify the index and each image."""
    say = on_line or (lambda _line: None)
    with tempfile.TemporaryDirectory(prefix="appopt-push-index-") as tmp:
        layouts = []
        for n, record in enumerate(records):
            engine = get_engine(str(record["engine"]), env)
            layouts.append(engine.export_oci(str(record["image_id"]), Path(tmp) / str(n)))
        layout = index_layout(layouts, Path(tmp) / "index")
        children = index_children(layout)
        result = push_layout(layout, target, insecure=insecure, attempts=attempts, backoff_seconds=backoff_seconds,
                             progress=on_line, env=env)  # fmt: skip
    verify_children(target, children, insecure=insecure, env=env)
    for plat, digest in children:
        say(f"verified {plat} manifest {digest}")
    return result, children


__all__ = [
    "BUILDS_SUBDIR",
    "host_platform_name",
    "index_children",
    "index_layout",
    "platform_builds",
    "push_platforms",
    "record_platform_build",
    "verify_children",
]
