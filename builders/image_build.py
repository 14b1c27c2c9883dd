"""From a plan's output directory to a built, pushed image: what ``appopt build`` and ``appopt push`` do.

``appopt plan -o OUT`` leaves the build context in OUT (Dockerfile, model, runtime sources) and ``deployment.json``
(the :class:`~builders.deployment.Deployment` it rendered from). A build may change two things without planning
again, by re-rendering the Dockerfile from that deployment into ``OUT/build/Dockerfile``:

- ``base_image``: build on another base (a site mirror, a local image on an offline machine);
- ``wheelhouse``: install the Python requirements from a directory of wheels (``pip download`` on the host, made
  here when the directory is empty) instead of an index: air-gapped sites.

The build log goes to ``OUT/logs/build-<engine>.log`` and what was built to ``OUT/build.json``, which ``push`` reads.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from builders.deployment import Deployment
from builders.engines import BuildRequest, Engine, EngineError, LineSink, get_engine, validate_platform
from builders.names import checked_image_reference, dns_label, image_name
from builders.registry import PushResult, push_layout
from builders.wheelhouse import copy_into_context, download_wheelhouse, list_wheels, python_version_of

DEPLOYMENT_FILE = "deployment.json"
BUILD_RECORD = "build.json"
PUSH_RECORD = "push.json"
#: The image label that carries the plan's spec digest.
SPEC_LABEL = "io.appopt.spec-sha256"
BUILD_SUBDIR = "build"
WHEELHOUSE_SUBDIR = "wheelhouse"
_PLATFORM_ARCH = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64le"}


# --- deployment.json ---------------------------------------------------------------------------------------------


def save_deployment(dep: Deployment, out_dir: Path) -> Path:
    """Write ``dep`` as ``OUT/deployment.json`` (so a later build can re-render with overrides)."""
    path = out_dir / DEPLOYMENT_FILE
    path.write_text(json.dumps(dataclasses.asdict(dep), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def load_deployment(out_dir: Path) -> Deployment | None:
    """The deployment ``appopt plan`` wrote to ``OUT/deployment.json``, or None when there is none."""
    path = out_dir / DEPLOYMENT_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise EngineError(f"{path}: not valid JSON ({exc})") from None
    names = {f.name for f in dataclasses.fields(Deployment)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise EngineError(f"{path}: unknown field {unknown[0]!r} (written by another appopt version? plan again)")
    values = {key: (value if key == "extra" else _tuples(value)) for key, value in data.items()}
    try:
        return Deployment(**values)
    except TypeError as exc:
        raise EngineError(f"{path}: {exc}") from None


# --- the Dockerfile a build uses ------------------------------------------------------------------------------------


_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE)


def rebase_dockerfile(text: str, base_image: str) -> str:
    """``text`` with every ``FROM`` of an image (not of an earlier stage) replaced by ``base_image``.

    ``base_image`` must be one image reference (a RenderError otherwise): it is written into the Dockerfile as is.
    """
    checked_image_reference(base_image, "--base-image")
    stages: set[str] = set()
    lines = []
    for line in text.splitlines(keepends=True):
        match = _FROM.match(line)
        if match:
            image, rest = match.group(3), match.group(4)
            alias = re.search(r"\bAS\s+(\S+)", rest, re.IGNORECASE)
            if image.lower() not in stages:
                line = f"{match.group(1)}{match.group(2)}{base_image}{rest}" + ("\n" if line.endswith("\n") else "")
            if alias:
                stages.add(alias.group(1).lower())
        lines.append(line)
    return "".join(lines)


@dataclasses.dataclass(frozen=True)
class PreparedBuild:
    """The Dockerfile to build (inside OUT), the deployment it came from, and the wheels put into the context."""

    dockerfile: Path
    deployment: Deployment | None
    wheels: tuple[str, ...] = ()


def prepare_build(
    out_dir: Path,
    *,
    base_image: str | None = None,
    wheelhouse: Path | None = None,
    platform: str | None = None,
    on_line: LineSink | None = None,
) -> PreparedBuild:
    """Pick or render the Dockerfile for a build of ``out_dir`` with the given overrides."""
    if base_image is not None:
        checked_image_reference(base_image, "--base-image")
    original = out_dir / "Dockerfile"
    if not original.is_file():
        raise EngineError(f"{out_dir}: no Dockerfile (run `appopt plan SPEC -o {out_dir}` with container.formats "
                          "including docker)")
    dep = load_deployment(out_dir)
    if base_image is None and wheelhouse is None:
        return PreparedBuild(original, dep)
    if dep is None:
        if wheelhouse is not None:
            raise EngineError(f"{out_dir}: no {DEPLOYMENT_FILE}, so --wheelhouse cannot re-render the Dockerfile; "
                              "run `appopt plan` again")
        assert base_image is not None
        text = rebase_dockerfile(original.read_text(encoding="utf-8"), base_image)
        return PreparedBuild(_write_build_dockerfile(out_dir, text), None)

    wheels: tuple[str, ...] = ()
    if base_image is not None:
        dep = dataclasses.replace(dep, base_image=base_image, runtime_image=None)
    if wheelhouse is not None:
        arch = _PLATFORM_ARCH.get(platform.split("/")[1], dep.arch) if platform else dep.arch
        if not list_wheels(wheelhouse):
            if on_line:
                on_line(f"wheelhouse {wheelhouse} is empty: pip download {' '.join(dep.pip_packages)}")
            download_wheelhouse(dep.pip_packages, wheelhouse, python_version=python_version_of(dep.base_image),
                                arch=arch, on_line=on_line, index_urls=dep.pip_index_urls)
        copy_into_context(wheelhouse, out_dir, WHEELHOUSE_SUBDIR)
        wheels = list_wheels(out_dir / WHEELHOUSE_SUBDIR)
        dep = dataclasses.replace(dep, wheelhouse=WHEELHOUSE_SUBDIR)
    from builders.containers import render_dockerfile

    return PreparedBuild(_write_build_dockerfile(out_dir, render_dockerfile(dep)), dep, wheels)


def _write_build_dockerfile(out_dir: Path, text: str) -> Path:
    path = out_dir / BUILD_SUBDIR / "Dockerfile"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def default_tag(out_dir: Path, dep: Deployment | None) -> str:
    """The spec's ``container.registry:tag`` when set, else a local ``<app-name>:latest``."""
    if dep is not None:
        return image_name(dep)
    try:
        name = json.loads((out_dir / "plan.json").read_text(encoding="utf-8"))["name"]
    except (OSError, ValueError, KeyError, TypeError):
        name = out_dir.resolve().name
    return f"{dns_label(str(name))}:latest"


# --- build ------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BuildRecord:
    """``OUT/build.json``: what was built, by which engine, from which Dockerfile."""

    engine: str
    engine_detail: str
    image: str
    image_id: str
    seconds: float
    dockerfile: str
    log: str
    platform: str | None
    base_image: str | None
    wheels: tuple[str, ...]
    built_at: str
    #: The plan's spec digest (its image label ``io.appopt.spec-sha256``): push and submit check it against plan.json.
    spec_sha256: str | None = None

    @classmethod
    def load(cls, out_dir: Path) -> BuildRecord:
        path = out_dir / BUILD_RECORD
        if not path.is_file():
            raise EngineError(f"{out_dir}: nothing built yet (no {BUILD_RECORD}); run `appopt build {out_dir}` first")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            data["wheels"] = tuple(data.get("wheels", ()))
            return cls(**data)
        except (ValueError, TypeError) as exc:
            raise EngineError(f"{path}: unreadable build record ({exc}); build again") from None


def build_plan_image(
    out_dir: Path,
    *,
    engine: str | Engine = "auto",
    tag: str | None = None,
    platform: str | None = None,
    base_image: str | None = None,
    wheelhouse: Path | None = None,
    on_line: LineSink | None = None,
    env: Mapping[str, str] | None = None,
) -> BuildRecord:
    """Build the plan's image in ``out_dir`` and record it in ``OUT/build.json``.

    Example: ``build_plan_image(Path("out"), engine="buildah", base_image="localhost/base:py311")``.
    """
    if platform is not None:
        validate_platform(platform)
    from builders import foreign_arch, multiarch

    assemble = foreign_arch.needs_assembly(platform, out_dir)
    if assemble:
        assert platform is not None
        foreign_arch.refuse_build_flags(platform, base_image, wheelhouse)
    chosen = get_engine(engine, env) if isinstance(engine, str) else engine
    say = on_line or (lambda _line: None)
    say(f"engine: {chosen.describe()}")
    if assemble:  # no RUN possible: assembled from a root prepared on this host
        assert platform is not None
        prepared, platform = foreign_arch.prepared_foreign_build(out_dir, platform, base_image=base_image,
                                                                 wheelhouse=wheelhouse, on_line=say)
    else:
        prepared = prepare_build(out_dir, base_image=base_image, wheelhouse=wheelhouse, platform=platform,
                                 on_line=say)
    image = tag or default_tag(out_dir, prepared.deployment)
    log_path = out_dir / "logs" / f"build-{chosen.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    request = BuildRequest(context=out_dir, dockerfile=prepared.dockerfile, tag=image, platform=platform,
                           log_path=log_path)
    try:
        result = chosen.build(request, on_line)
    except EngineError as exc:
        raise with_base_image_hint(exc, prepared.dockerfile, base_image) from None
    record = BuildRecord(
        engine=chosen.name, engine_detail=chosen.describe(), image=result.image, image_id=result.image_id,
        seconds=round(result.seconds, 3), dockerfile=str(prepared.dockerfile.relative_to(out_dir)),
        log=str(log_path.relative_to(out_dir)), platform=platform, base_image=base_image, wheels=prepared.wheels,
        built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        spec_sha256=dict(prepared.deployment.labels).get(SPEC_LABEL) if prepared.deployment else None,
    )
    (out_dir / BUILD_RECORD).write_text(json.dumps(dataclasses.asdict(record), indent=2) + "\n", encoding="utf-8")
    multiarch.record_platform_build(out_dir, record)  # builds for several platforms push as one index
    return record


#: What engines print when the base image cannot be fetched (buildah/podman, the Docker API).
_PULL_FAILED = re.compile(
    r"creating build container|initializing source|pinging container registry|pull access denied|manifest unknown|"
    r"error pulling|failed to resolve|short-name|no such host|dial tcp|name unknown|not found: manifest",
    re.IGNORECASE,
)


def base_images_of(dockerfile: Path) -> list[str]:
    """The images (not earlier stages) a Dockerfile's ``FROM`` lines name, in order, each once."""
    stages: set[str] = set()
    images: list[str] = []
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        match = _FROM.match(line)
        if not match:
            continue
        image, alias = match.group(3), re.search(r"\bAS\s+(\S+)", match.group(4), re.IGNORECASE)
        if image.lower() not in stages and image not in images:
            images.append(image)
        if alias:
            stages.add(alias.group(1).lower())
    return images


def with_base_image_hint(exc: EngineError, dockerfile: Path, base_image: str | None) -> EngineError:
    """``exc`` with a line saying what to do when its cause is a base image that could not be pulled."""
    if not any(_PULL_FAILED.search(line) for line in exc.lines):
        return exc
    images = ", ".join(base_images_of(dockerfile)) or "the base image"
    if base_image is None:
        hint = (f"the base image ({images}) could not be pulled (offline, or no registry reachable): build on one "
                "this engine already has with --base-image IMAGE (one with the same Python, e.g. a Debian 12 "
                "rootfs imported with `podman import`; README, \"Build\"), or pull it while online")
    else:
        hint = (f"--base-image {base_image}: not in this engine's local storage and it could not be pulled: check "
                "the name (`podman images`, `buildah images`)")
    return EngineError(*exc.lines, hint)


def push_built_image(
    out_dir: Path,
    destination: str | None = None,
    *,
    insecure: bool = False,
    attempts: int = 4,
    backoff_seconds: float = 0.5,
    on_line: Callable[[str], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> PushResult:
    """Export the image ``appopt build`` made for ``out_dir`` and push it to ``destination`` (default: its tag)."""
    record = BuildRecord.load(out_dir)
    target = destination or record.image
    from builders import multiarch

    builds = multiarch.platform_builds(out_dir)
    if len(builds) > 1:  # built for several platforms: one image index over them
        result, children = multiarch.push_platforms(builds, target, insecure=insecure, attempts=attempts,
                                                    backoff_seconds=backoff_seconds, on_line=on_line, env=env)
        data = {**dataclasses.asdict(result), "pinned": result.pinned, "image": record.image,
                "platforms": dict(children)}
        (out_dir / PUSH_RECORD).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        return result
    engine = get_engine(record.engine, env)
    with tempfile.TemporaryDirectory(prefix="appopt-push-") as tmp:
        layout = engine.export_oci(record.image, Path(tmp) / "oci")
        result = push_layout(layout, target, insecure=insecure, attempts=attempts, backoff_seconds=backoff_seconds,
                             progress=on_line, env=env)
    data = {**dataclasses.asdict(result), "pinned": result.pinned, "image": record.image}
    (out_dir / PUSH_RECORD).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return result


__all__ = [
    "BuildRecord", "PreparedBuild", "build_plan_image", "default_tag", "load_deployment", "prepare_build",
    "push_built_image", "rebase_dockerfile", "save_deployment",
]
