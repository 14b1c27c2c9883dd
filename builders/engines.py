"""Container engines that build a Dockerfile: a Docker Engine API (``docker`` SDK), buildah, podman.

One small interface, three implementations:

- ``docker``: any Docker Engine API reached through the ``docker`` Python SDK and ``DOCKER_HOST`` (a Docker daemon, or
  ``podman system service``);
- ``buildah``: daemonless, the usual choice on HPC login nodes (``--isolation chroot`` unless ``BUILDAH_ISOLATION`` is
  set);
- ``podman``: daemonless too, through its CLI.

``get_engine("auto")`` picks the first one that is there (a reachable Docker API, then buildah, then podman) and says
which; with none there it raises an :class:`EngineError` naming what to install. Every build streams its output
line by line to a callback (progress) and to a log file.

>>> validate_platform("linux/arm64")
'linux/arm64'
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from builders.errors import BuildError

LineSink = Callable[[str], None]

ENGINE_NAMES = ("docker", "buildah", "podman")
_PLATFORM = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(?:/v[0-9]+)?$")
_INSTALL_HINT = (
    "install buildah (daemonless: apt-get install buildah, dnf install buildah) or podman, "
    "or set DOCKER_HOST to a Docker Engine API (a Docker daemon, or `podman system service`)"
)


class EngineError(BuildError):
    """An engine is missing or a build failed; ``lines`` are what the user needs (one problem per line)."""

    default_line = "container engine error"


def validate_platform(platform: str) -> str:
    """``os/arch[/variant]`` as engines take it (``linux/amd64``, ``linux/arm64``, ``linux/arm/v7``)."""
    if not _PLATFORM.match(platform):
        raise EngineError(f"--platform {platform!r}: expected os/arch such as linux/amd64 or linux/arm64")
    return platform


@dataclass(frozen=True)
class BuildRequest:
    """One build: a context directory, a Dockerfile inside it, the tag to give the image."""

    context: Path
    dockerfile: Path
    tag: str
    platform: str | None = None
    build_args: Mapping[str, str] = field(default_factory=dict)
    #: Where the full build output goes (created; overwritten).
    log_path: Path | None = None

    def dockerfile_in_context(self) -> str:
        """The Dockerfile's path relative to the context (the Docker API wants it so)."""
        try:
            return self.dockerfile.resolve().relative_to(self.context.resolve()).as_posix()
        except ValueError:
            raise EngineError(f"{self.dockerfile}: the Dockerfile must be inside the build context {self.context}") \
                from None


@dataclass(frozen=True)
class BuildResult:
    """What a build produced."""

    engine: str
    image: str
    image_id: str
    seconds: float
    log_path: Path | None


class Engine(ABC):
    """Builds images and hands them over as OCI layouts (for :mod:`builders.registry`) or labels (for checks)."""

    name: ClassVar[str]

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)

    @classmethod
    @abstractmethod
    def unavailable_reason(cls, env: Mapping[str, str]) -> str | None:
        """None when usable here, else one line saying why not."""

    @abstractmethod
    def build(self, request: BuildRequest, on_line: LineSink | None = None) -> BuildResult:
        """Build ``request``; raises EngineError (with the log's last lines) when the build fails."""

    @abstractmethod
    def labels(self, image: str) -> dict[str, str]:
        """The image's labels (OCI config ``Labels``)."""

    @abstractmethod
    def export_oci(self, image: str, layout_dir: Path) -> Path:
        """Write the image as an OCI image layout in the (new or empty) ``layout_dir``; returns it."""

    def describe(self) -> str:
        return self.name


# --- the subprocess engines -------------------------------------------------------------------------------------


def stream_command(
    argv: list[str], env: Mapping[str, str], log_path: Path | None, on_line: LineSink | None,
    cwd: Path | None = None,
) -> list[str]:
    """Run ``argv`` with stdout+stderr merged, copying each line to the log and the callback; returns the tail."""
    tail: list[str] = []
    if log_path:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("w", encoding="utf-8") if log_path else None
    try:
        if log:
            log.write("$ " + " ".join(argv) + "\n")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(env), text=True,
                                errors="replace", bufsize=1, cwd=cwd)
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail = [*tail[-19:], line]
            if log:
                log.write(line + "\n")
            if on_line:
                on_line(line)
        code = proc.wait()
    finally:
        if log:
            log.close()
    if code != 0:
        raise _failed(argv[0], code, tail, log_path)
    return tail


def _failed(engine: str, code: int | str, tail: list[str], log_path: Path | None) -> EngineError:
    errors = [ln.strip() for ln in tail if re.search(r"error|fail", ln, re.I)]
    problem = errors[-1] if errors else (tail[-1] if tail else "")
    where = f"; full log: {log_path}" if log_path else ""
    return EngineError(f"{engine} build failed ({code}): {_cause_kept(problem.strip())}{where}")


def _cause_kept(line: str, limit: int = 300) -> str:
    """The line shortened so its cause survives: buildah prints the failing step as a Go struct dump before it
    (``committing container for step {Env:[...] Command:copy ...}: <cause>``), so dumps become ``{…}`` and an
    over-long line keeps its end."""
    line = re.sub(r"\{[^{}]*\}", "{…}", line)
    return line if len(line) <= limit else "…" + line[-(limit - 1):]


def _run(argv: list[str], env: Mapping[str, str], what: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(env), check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise EngineError(f"{argv[0]}: {what} failed: {last}")
    return proc.stdout


class _CliEngine(Engine):
    """buildah and podman share storage and most flags."""

    binary: ClassVar[str]

    @classmethod
    def unavailable_reason(cls, env: Mapping[str, str]) -> str | None:
        if shutil.which(cls.binary, path=env.get("PATH")) is None:
            return f"{cls.binary} is not installed (apt-get install {cls.binary})"
        return None

    def _build_argv(self, request: BuildRequest, iidfile: Path) -> list[str]:
        argv = [self.binary, "build", "--layers", "-f", str(request.dockerfile), "-t", request.tag,
                "--iidfile", str(iidfile)]
        if request.platform:
            argv += ["--platform", validate_platform(request.platform)]
        for key, value in request.build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        return argv

    def build(self, request: BuildRequest, on_line: LineSink | None = None) -> BuildResult:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="appopt-build-") as tmp:
            iidfile = Path(tmp) / "iid"
            argv = [*self._build_argv(request, iidfile), str(request.context)]
            stream_command(argv, self.env, request.log_path, on_line)
            image_id = iidfile.read_text().strip() if iidfile.exists() else ""
        return BuildResult(self.name, request.tag, image_id, time.monotonic() - started, request.log_path)

    def export_oci(self, image: str, layout_dir: Path) -> Path:
        layout_dir.mkdir(parents=True, exist_ok=True)
        _run([self.binary, "push", "--quiet", image, f"oci:{layout_dir}:latest"], self.env, f"export of {image}")
        return layout_dir


class BuildahEngine(_CliEngine):
    name = "buildah"
    binary = "buildah"

    def _build_argv(self, request: BuildRequest, iidfile: Path) -> list[str]:
        argv = super()._build_argv(request, iidfile)
        if "BUILDAH_ISOLATION" not in self.env:
            argv[2:2] = ["--isolation", "chroot"]  # works without a daemon, user namespaces or cgroups
        return argv

    def labels(self, image: str) -> dict[str, str]:
        out = _run(["buildah", "inspect", "--type", "image", image], self.env, f"inspect of {image}")
        config = json.loads(out).get("OCIv1", {}).get("config") or {}  # buildah 1.28 has no "json" template
        return dict(config.get("Labels") or {})


class PodmanEngine(_CliEngine):
    name = "podman"
    binary = "podman"

    def labels(self, image: str) -> dict[str, str]:
        out = _run(["podman", "image", "inspect", "--format", "{{json .Labels}}", image], self.env,
                   f"inspect of {image}")
        return dict(json.loads(out or "null") or {})


# --- the Docker Engine API --------------------------------------------------------------------------------------


def _docker_module() -> Any:
    try:
        import docker
    except ImportError:
        return None
    return docker


class DockerEngine(Engine):
    """Any Docker Engine API through the ``docker`` SDK: ``DOCKER_HOST`` (or the default socket) names it."""

    name = "docker"

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        super().__init__(env)
        docker = _docker_module()
        if docker is None:
            raise EngineError("docker engine: the docker Python package is not installed (pip install docker)")
        try:
            self.client = docker.DockerClient(**docker.utils.kwargs_from_env(environment=self.env), timeout=600)
            self.client.ping()
        except Exception as exc:  # the SDK raises many types for "not there"
            raise EngineError(f"docker engine: cannot reach {self.host}: {_first_line(exc)}") from None

    @property
    def host(self) -> str:
        return self.env.get("DOCKER_HOST") or "unix:///var/run/docker.sock"

    def describe(self) -> str:
        return f"docker ({self.host})"

    @classmethod
    def unavailable_reason(cls, env: Mapping[str, str]) -> str | None:
        if _docker_module() is None:
            return "the docker Python package is not installed (pip install docker)"
        if not env.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
            return "no Docker Engine API: DOCKER_HOST is unset and /var/run/docker.sock does not exist"
        try:
            cls(env)
        except EngineError as exc:
            return exc.lines[0]
        return None

    def build(self, request: BuildRequest, on_line: LineSink | None = None) -> BuildResult:
        started = time.monotonic()
        kwargs: dict[str, Any] = {
            "path": str(request.context), "dockerfile": request.dockerfile_in_context(), "tag": request.tag,
            "rm": True, "forcerm": True, "decode": True, "buildargs": dict(request.build_args) or None,
        }
        if request.platform:
            kwargs["platform"] = validate_platform(request.platform)
        tail: list[str] = []
        image_id = ""
        if request.log_path:
            request.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = request.log_path.open("w", encoding="utf-8") if request.log_path else None
        try:
            if log:
                log.write(f"# docker build via {self.host}: {request.dockerfile} -t {request.tag}\n")
            for chunk in self.client.api.build(**kwargs):
                if "error" in chunk or "errorDetail" in chunk:
                    message = chunk.get("error") or chunk["errorDetail"].get("message", "")
                    if log:
                        log.write(f"ERROR: {message}\n")
                    raise _failed("docker", "error", [*tail, f"error: {message}"], request.log_path)
                if "aux" in chunk and isinstance(chunk["aux"], dict) and chunk["aux"].get("ID"):
                    image_id = chunk["aux"]["ID"]
                text = chunk.get("stream") or chunk.get("status") or ""
                for line in text.splitlines():
                    tail = [*tail[-19:], line]
                    if log:
                        log.write(line + "\n")
                    if on_line:
                        on_line(line)
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"docker build via {self.host} failed: {_first_line(exc)}") from None
        finally:
            if log:
                log.close()
        if not image_id:
            image_id = self.client.images.get(request.tag).id
        return BuildResult(self.name, request.tag, image_id, time.monotonic() - started, request.log_path)

    def labels(self, image: str) -> dict[str, str]:
        return dict(self.client.images.get(image).labels or {})

    def export_oci(self, image: str, layout_dir: Path) -> Path:
        """``docker save`` (a docker-archive, or an OCI layout from newer daemons), unpacked into an OCI layout."""
        with tempfile.TemporaryDirectory(prefix="appopt-save-") as tmp:
            tar_path = Path(tmp) / "image.tar"
            with tar_path.open("wb") as fh:
                for chunk in self.client.images.get(image).save(named=True):
                    fh.write(chunk)
            unpacked = Path(tmp) / "unpacked"
            with tarfile.open(tar_path) as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(unpacked, filter="data")
                else:  # Python < 3.11.4
                    tar.extractall(unpacked)  # our own daemon's export
            return archive_to_layout(unpacked, layout_dir)


def archive_to_layout(unpacked: Path, layout_dir: Path) -> Path:
    """Turn an unpacked ``docker save`` into an OCI image layout (layers stay uncompressed tars)."""
    import hashlib

    layout_dir.mkdir(parents=True, exist_ok=True)
    if (unpacked / "index.json").is_file() and (unpacked / "oci-layout").is_file():
        shutil.copytree(unpacked, layout_dir, dirs_exist_ok=True)
        return layout_dir
    entries = json.loads((unpacked / "manifest.json").read_text())
    if len(entries) != 1:
        raise EngineError(f"docker save gave {len(entries)} images, expected 1")
    entry = entries[0]
    blobs = layout_dir / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def add(path: Path) -> tuple[str, int]:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        target = blobs / digest.hexdigest()
        if not target.exists():
            shutil.copyfile(path, target)
        return "sha256:" + digest.hexdigest(), path.stat().st_size

    config_digest, config_size = add(unpacked / entry["Config"])
    layers = []
    for layer in entry["Layers"]:
        digest, size = add(unpacked / layer)
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest, "size": size})
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": config_size},
        "layers": layers,
    }, separators=(",", ":")).encode()
    manifest_digest = hashlib.sha256(manifest).hexdigest()
    (blobs / manifest_digest).write_bytes(manifest)
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": f"sha256:{manifest_digest}",
        "size": len(manifest)}]}
    (layout_dir / "index.json").write_text(json.dumps(index))
    (layout_dir / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return layout_dir


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


# --- choosing one -----------------------------------------------------------------------------------------------

ENGINES: dict[str, type[Engine]] = {"docker": DockerEngine, "buildah": BuildahEngine, "podman": PodmanEngine}


def get_engine(name: str = "auto", env: Mapping[str, str] | None = None) -> Engine:
    """The engine called ``name``, or with ``auto`` the first usable of docker (API reachable), buildah, podman.

    Raises EngineError naming what is missing and what to install.
    """
    env = dict(os.environ if env is None else env)
    if name == "auto":
        reasons = []
        for candidate in _auto_order(env):
            reason = ENGINES[candidate].unavailable_reason(env)
            if reason is None:
                return ENGINES[candidate](env)
            reasons.append(f"{candidate}: {reason}")
        raise EngineError(f"no container engine found ({'; '.join(reasons)}): {_INSTALL_HINT}")
    if name not in ENGINES:
        raise EngineError(f"--engine {name!r}: expected auto, {', '.join(ENGINE_NAMES)}")
    if name == "docker":
        return DockerEngine(env)  # its own error says why the API is not reachable
    reason = ENGINES[name].unavailable_reason(env)
    if reason is not None:
        raise EngineError(f"--engine {name}: {reason}")
    return ENGINES[name](env)


def _auto_order(env: Mapping[str, str]) -> Iterable[str]:
    # A Docker API counts only when one is configured or its default socket exists: no slow probing otherwise.
    if env.get("DOCKER_HOST") or Path("/var/run/docker.sock").exists():
        yield "docker"
    yield "buildah"
    yield "podman"
