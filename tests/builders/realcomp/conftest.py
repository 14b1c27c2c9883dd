"""Fixtures that start real components for the slow builder tests, and stop them again.

What runs (all on 127.0.0.1, all stopped by PID at the end of the session):
podman/buildah with their own config and a private image store (``CONTAINERS_*`` point at temp files; /etc is not
touched), ``podman system service`` on a temp unix socket (the Docker Engine API for the ``docker`` SDK), Debian's
``docker-registry`` plain and with TLS + htpasswd, and a one-node Slurm (munged + slurmctld + slurmd) whose config
``SLURM_CONF`` names.

Base images are made locally, since no image registry is reachable: busybox-static for the plumbing tests, and a
Debian 12 minbase with python3 (debootstrap, cached per day under ``~/.cache/appopt-realcomp/DATE``) for the tests
that run the model inside an image. Install the packages first: ``bash scripts/ci-setup``.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from tests.builders.realcomp import servers

REPO = Path(__file__).resolve().parents[3]
DEBIAN_MIRROR = os.environ.get("APPOPT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BUSYBOX_REF = "localhost/appopt-test/busybox:latest"
DEBIAN_REF = "localhost/appopt-test/debian-python:bookworm"


def require(*tools: str) -> None:
    """Skip (naming the fix) when a tool is missing or we are not root; CI installs them with scripts/ci-setup."""
    if os.geteuid() != 0:
        pytest.skip("real-component tests run as root (as CI does)")
    path = f"/usr/sbin:/usr/bin:/sbin:/bin:{os.environ.get('PATH', '')}"
    missing = [tool for tool in tools if shutil.which(tool, path=path) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: run `bash scripts/ci-setup`")


@pytest.fixture(scope="session")
def session_env() -> Iterator[pytest.MonkeyPatch]:
    """Environment changes that last the session (undone at its end)."""
    patch = pytest.MonkeyPatch()
    yield patch
    patch.undo()


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    """``~/.cache/appopt-realcomp/<today>``: slow-to-make inputs (Debian rootfs, wheels) live a day."""
    base = Path(os.environ.get("APPOPT_REALCOMP_CACHE") or Path.home() / ".cache" / "appopt-realcomp")
    today = base / datetime.date.today().isoformat()
    if base.is_dir():
        for old in base.iterdir():
            if old.is_dir() and old.name != today.name and old.name[:2] == "20":
                shutil.rmtree(old, ignore_errors=True)
    today.mkdir(parents=True, exist_ok=True)
    return today


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock, so two test runs do not build the same cached file at once."""
    with path.with_suffix(path.suffix + ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# --- podman / buildah ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Containers:
    root: Path
    env: dict[str, str]


def _podman(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, timeout=timeout)


STORE_PREFIX = "appopt-realcomp-"
STORE_PARENT = Path("/var/tmp")


def _unmount_under(root: Path) -> None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            mount_point = line.split()[1]
            if mount_point.startswith(str(root)):
                subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False)


def _reclaim_stale_stores(parent: Path, keep: Path) -> None:
    """Private stores that no live session holds (a run killed before its teardown) are unmounted and removed.

    A session holds ``<store>/session.lock`` (flock) while it runs; a store without one predates the lock and is
    reclaimed once it is three hours old (a full test run takes under one). Left behind, each held gigabytes.
    """
    for store in parent.glob(STORE_PREFIX + "*"):
        if store == keep or not store.is_dir():
            continue
        lock_path = store / "session.lock"
        if lock_path.exists():
            with lock_path.open("a") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a live session's store
        else:
            with contextlib.suppress(OSError):
                if time.time() - store.stat().st_mtime < 3 * 3600:
                    continue
        _unmount_under(store)
        shutil.rmtree(store, ignore_errors=True)


@pytest.fixture(scope="session")
def containers(session_env: pytest.MonkeyPatch) -> Iterator[Containers]:
    """containers.conf (runc, explicit ulimits, no network namespace), registries.conf and a private store."""
    require("podman", "buildah", "runc", "skopeo")
    root = Path(tempfile.mkdtemp(prefix=STORE_PREFIX, dir=STORE_PARENT))
    session_lock = (root / "session.lock").open("w")
    fcntl.flock(session_lock, fcntl.LOCK_EX)
    _reclaim_stale_stores(STORE_PARENT, keep=root)
    (root / "containers.conf").write_text(
        '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\nnetns = "none"\n'
        '[engine]\nruntime = "runc"\n'
    )
    (root / "registries.conf").write_text("unqualified-search-registries = []\n")
    (root / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{root}/graph"\nrunroot = "{root}/run"\n'
    )
    env = {"CONTAINERS_CONF": str(root / "containers.conf"),
           "CONTAINERS_REGISTRIES_CONF": str(root / "registries.conf"),
           "CONTAINERS_STORAGE_CONF": str(root / "storage.conf")}
    for key, value in env.items():
        session_env.setenv(key, value)
    session_env.delenv("DOCKER_HOST", raising=False)
    yield Containers(root, env)
    subprocess.run(["buildah", "rm", "--all"], capture_output=True, check=False, timeout=120)
    _podman("rm", "--all", "--force", check=False, timeout=120)
    _podman("rmi", "--all", "--force", check=False, timeout=300)
    _unmount_under(root)
    shutil.rmtree(root, ignore_errors=True)
    session_lock.close()


def _image_ids() -> set[str]:
    listed = _podman("images", "--all", "--quiet", "--no-trunc", check=False, timeout=120)
    return set(listed.stdout.split()) if listed.returncode == 0 else set()


@pytest.fixture(autouse=True)
def _images_a_test_made_are_removed(request: pytest.FixtureRequest) -> Iterator[None]:
    """Images (and cached layers) a test built are removed after it; shared ones, made by wider fixtures, stay.

    Wider-scoped fixtures are set up before this one, so the snapshot holds them. Each compiler or PyTorch image is
    1-3 GB; kept to the session's end they filled CI's disk (a commit failed in the PyTorch image test).
    """
    if "containers" not in request.fixturenames:
        yield
        return
    before = _image_ids()
    yield
    subprocess.run(["buildah", "rm", "--all"], capture_output=True, check=False, timeout=120)
    made = sorted(_image_ids() - before)
    if made:
        _podman("rmi", "--force", *made, check=False, timeout=300)
    _podman("image", "prune", "--force", check=False, timeout=300)


def _busybox_rootfs(directory: Path) -> Path:
    """A root file system of busybox-static and its applets, tarred (2 MB)."""
    busybox = shutil.which("busybox", path="/bin:/usr/bin") or "/bin/busybox"
    rootfs = directory / "busybox-rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "etc").mkdir()
    (rootfs / "tmp").mkdir()
    shutil.copy2(busybox, rootfs / "bin" / "busybox")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        link = rootfs / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\n")
    tar = directory / "busybox-rootfs.tar"
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tar), "."], check=True)
    return tar


@pytest.fixture(scope="session")
def busybox_image(containers: Containers) -> str:
    """``localhost/appopt-test/busybox:latest`` imported into the private store."""
    require("busybox")
    tar = _busybox_rootfs(containers.root)
    _podman("import", "--quiet", str(tar), BUSYBOX_REF)
    return BUSYBOX_REF


@pytest.fixture(scope="session")
def debian_rootfs(cache_dir: Path) -> Path:
    """A tarred Debian 12 minbase with python3 and pip (debootstrap, ~1 min, once a day).

    Device nodes are left out: importers copy files by reading them, and /dev/zero never ends.
    """
    require("debootstrap", "tar")
    tar = cache_dir / "debian-bookworm-python3.tar"
    with _locked(tar):
        if tar.is_file():
            return tar
        work = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=cache_dir))
        try:
            proc = subprocess.run(
                ["debootstrap", "--variant=minbase", "--include=python3,python3-pip", "bookworm", str(work),
                 DEBIAN_MIRROR], capture_output=True, text=True, timeout=900, check=False,
            )
            if proc.returncode != 0:
                pytest.fail(f"debootstrap failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
            for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for item in (work / leftover).glob("*"):
                    if item.is_file():
                        item.unlink()
            partial = tar.with_suffix(".part")
            subprocess.run(["tar", "-C", str(work), "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*",
                            "-cf", str(partial), "."], check=True)
            partial.rename(tar)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return tar


@pytest.fixture(scope="session")
def debian_image(containers: Containers, debian_rootfs: Path) -> str:
    """``localhost/appopt-test/debian-python:bookworm``: stands in for ``python:3.11-slim`` (same Python 3.11)."""
    _podman("import", "--quiet", str(debian_rootfs), DEBIAN_REF)
    return DEBIAN_REF


@pytest.fixture(scope="session")
def podman_service(containers: Containers) -> Iterator[str]:
    """``podman system service`` on a temp unix socket; yields the DOCKER_HOST URL for the docker SDK."""
    socket_path = containers.root / "podman.sock"
    server = servers.start("podman system service",
                           ["podman", "system", "service", "--time=0", f"unix://{socket_path}"],
                           containers.root / "podman-service.log")
    url = f"unix://{socket_path}"
    try:
        import docker

        def answers() -> bool:
            if not socket_path.exists():
                return False
            client = docker.DockerClient(base_url=url, timeout=5)
            try:
                return bool(client.ping())
            finally:
                client.close()

        servers.wait_until(answers, server, "answer on the Docker API socket")
        yield url
    finally:
        server.stop()


# --- registries ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Registry:
    address: str
    data: Path
    cert: Path | None = None
    user: str | None = None
    password: str | None = None


def _start_registry(directory: Path, *, tls: bool, auth: bool,
                    auth_config: Sequence[str] = ()) -> tuple[servers.Server, Registry]:
    require("docker-registry", "openssl")
    directory.mkdir(parents=True, exist_ok=True)
    port = servers.free_port()
    config = [
        "version: 0.1",
        "log:",
        "  level: warn",
        "storage:",
        "  filesystem:",
        f"    rootdirectory: {directory / 'data'}",
        "  delete:",
        "    enabled: true",
        "http:",
        f"  addr: 127.0.0.1:{port}",
    ]
    cert = user = password = None
    if tls:
        cert, key = servers.self_signed_cert(directory)
        config += ["  tls:", f"    certificate: {cert}", f"    key: {key}"]
    if auth:
        user, password = "appopt", "s3cret-pass"
        (directory / "htpasswd").write_text(servers.bcrypt_htpasswd(user, password) + "\n")
        config += ["auth:", "  htpasswd:", "    realm: appopt-test", f"    path: {directory / 'htpasswd'}"]
    config += list(auth_config)
    (directory / "config.yml").write_text("\n".join(config) + "\n")
    server = servers.start("docker-registry", ["docker-registry", "serve", str(directory / "config.yml")],
                           directory / "registry.log")
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/v2/"
    servers.wait_until(lambda: servers.http_status(url) in (200, 401), server, "answer on /v2/")
    return server, Registry(f"127.0.0.1:{port}", directory / "data", cert, user, password)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """The distribution registry over plain HTTP, no auth."""
    server, info = _start_registry(tmp_path_factory.mktemp("registry"), tls=False, auth=False)
    yield info
    server.stop()


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """The distribution registry over TLS (self-signed for 127.0.0.1) with htpasswd (bcrypt) auth."""
    server, info = _start_registry(tmp_path_factory.mktemp("auth-registry"), tls=True, auth=True)
    yield info
    server.stop()


@dataclass(frozen=True)
class TokenRegistry:
    registry: Registry
    tokens: servers.TokenServer


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenRegistry]:
    """The distribution registry with token (Bearer) authentication against a token server on 127.0.0.1."""
    require("docker-registry", "openssl")
    directory = tmp_path_factory.mktemp("token-registry")
    cert, key = servers.self_signed_cert(directory)
    tokens = servers.TokenServer(cert, key, user="appopt", password="t0ken-pass")
    with tokens.running():
        server, info = _start_registry(directory / "registry", tls=False, auth=False,
                                       auth_config=tokens.registry_config())
        yield TokenRegistry(Registry(info.address, info.data, None, tokens.user, tokens.password), tokens)
        server.stop()


# --- Slurm --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slurm:
    conf: Path
    directory: Path


def _slurm_conf(directory: Path, munge_socket: Path) -> str:
    return "\n".join([
        "ClusterName=appopt-test",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={servers.free_port()}",
        f"SlurmdPort={servers.free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={munge_socket}",
        "CredType=cred/munge",
        # Bind to the node's address (127.0.0.1), not to every interface.
        "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny",
        "MpiDefault=none",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "ReturnToService=2",
        f"SlurmctldPidFile={directory}/slurmctld.pid",
        f"SlurmdPidFile={directory}/slurmd.pid",
        f"StateSaveLocation={directory}/state",
        f"SlurmdSpoolDir={directory}/spool",
        f"SlurmctldLogFile={directory}/slurmctld.log",
        f"SlurmdLogFile={directory}/slurmd.log",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        "NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]) + "\n"


@pytest.fixture(scope="session")
def slurm(session_env: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    """munged, slurmctld and slurmd for one node "localhost" with 2 CPUs; SLURM_CONF points the clients at it."""
    require("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo")
    directory = tmp_path_factory.mktemp("slurm")
    directory.chmod(0o711)
    for sub in ("state", "spool", "munge"):
        (directory / sub).mkdir()
    (directory / "munge").chmod(0o711)
    key, munge_socket = directory / "munge" / "munge.key", directory / "munge" / "munge.sock"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
    started: list[servers.Server] = []
    try:
        munged = servers.start("munged", [
            "munged", "--foreground", "--force", f"--socket={munge_socket}", f"--key-file={key}",
            f"--pid-file={directory / 'munge' / 'munged.pid'}", f"--seed-file={directory / 'munge' / 'seed'}",
            f"--log-file={directory / 'munge' / 'munged.log'}",
        ], directory / "munged.out")
        started.append(munged)
        servers.wait_until(munge_socket.exists, munged, "its socket")
        conf = directory / "slurm.conf"
        conf.write_text(_slurm_conf(directory, munge_socket))
        session_env.setenv("SLURM_CONF", str(conf))
        ctld = servers.start("slurmctld", ["slurmctld", "-D", "-f", str(conf)], directory / "slurmctld.out")
        started.append(ctld)
        servers.wait_until(lambda: _sinfo(conf) != "", ctld, "an answer to sinfo")
        slurmd = servers.start("slurmd", ["slurmd", "-D", "-N", "localhost", "-f", str(conf)],
                               directory / "slurmd.out")
        started.append(slurmd)
        servers.wait_until(lambda: _sinfo(conf).startswith("idle"), slurmd, "the node idle in sinfo")
        yield Slurm(conf, directory)
    finally:
        for server in reversed(started):
            server.stop()


def _sinfo(conf: Path) -> str:
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, check=False,
                          env={**os.environ, "SLURM_CONF": str(conf)}, timeout=10)
    return proc.stdout.strip() if proc.returncode == 0 else ""


# --- the plan under test ------------------------------------------------------------------------------------------


def appopt_app() -> typer.Typer:
    """The ``appopt`` typer app, with build/push/submit/status (wired by cli.py, else registered on a copy)."""
    from cli import build_cmds
    from cli.main import app

    if any(command.name == "build" for command in app.registered_commands):
        return app
    own = typer.Typer(pretty_exceptions_enable=False)
    own.callback()(lambda: None)
    build_cmds.register(own)
    return own


@pytest.fixture
def appopt() -> Callable[..., Result]:
    """Run ``appopt ARGS`` in-process (CliRunner); returns the result with exit code and output."""
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(appopt_app(), [str(a) for a in args])

    return invoke


SPEC = """\
# digits MLP on our runtime, on this machine's CPU, through Slurm.
name: digits-mlp
application:
  type: inference
  model:
    onnx: digits_mlp.onnx
  batch_size: 1
  framework: appopt-runtime
  code: [classify.py]
target:
  platform: hpc
  cpu: {arch: x86_64, model: local}
  scheduler: slurm
container:
  formats: [docker, singularity]
"""


#: The application's own code shipped with ``application.code``: it uses the runtime the image carries.
CLASSIFY = """\
import numpy as np
from runtime import compile_model

exe = compile_model("/opt/app/compiled", threads=1)
probabilities = exe.run({"input": np.linspace(0, 1, 64, dtype=np.float32).reshape(1, 64)})["probabilities"]
print(f"classify.py: class {int(probabilities.argmax())} of {probabilities.shape[1]}")
"""


@pytest.fixture(scope="session")
def runtime_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``appopt plan`` output for the digits MLP on ``appopt-runtime`` with a Slurm job (the real CLI)."""
    spec_dir = tmp_path_factory.mktemp("spec")
    shutil.copy2(REPO / "examples" / "digits_mlp.onnx", spec_dir / "digits_mlp.onnx")
    (spec_dir / "app.yaml").write_text(SPEC)
    (spec_dir / "classify.py").write_text(CLASSIFY)
    out = spec_dir / "out"
    from cli.main import app

    result = CliRunner().invoke(app, ["plan", str(spec_dir / "app.yaml"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def plan_for(spec_text: str, directory: Path) -> Path:
    """``appopt plan`` output (the real CLI) for a spec next to a copy of the digits MLP."""
    shutil.copy2(REPO / "examples" / "digits_mlp.onnx", directory / "digits_mlp.onnx")
    (directory / "app.yaml").write_text(spec_text)
    from cli.main import app

    result = CliRunner().invoke(app, ["plan", str(directory / "app.yaml"), "-o", str(directory / "out")])
    assert result.exit_code == 0, result.output
    return directory / "out"


def wheelhouse_for(plan_out: Path, cache_dir: Path) -> Path:
    """Wheels of a plan's Python requirements for the image (CPython 3.11, manylinux x86_64), cached a day."""
    from builders.image_build import load_deployment
    from builders.wheelhouse import download_wheelhouse, list_wheels

    dep = load_deployment(plan_out)
    assert dep is not None, "appopt plan did not write deployment.json"
    key = hashlib.sha256(" ".join(sorted(dep.pip_packages)).encode()).hexdigest()[:12]
    target = cache_dir / f"wheelhouse-py311-x86_64-{key}"
    with _locked(target):
        if not list_wheels(target):
            download_wheelhouse(dep.pip_packages, target, python_version="3.11", arch="x86_64")
    return target


@pytest.fixture
def plan_out(runtime_plan: Path, tmp_path: Path) -> Path:
    """A private copy of the plan output (builds write logs and records into it)."""
    return Path(shutil.copytree(runtime_plan, tmp_path / "out"))


@pytest.fixture(scope="session")
def wheelhouse(cache_dir: Path, runtime_plan: Path) -> Path:
    """Wheels of the runtime plan's Python requirements (see ``wheelhouse_for``)."""
    return wheelhouse_for(runtime_plan, cache_dir)


@dataclass(frozen=True)
class BuiltImage:
    out: Path
    ref: str


@pytest.fixture(scope="session")
def runtime_image(runtime_plan: Path, debian_image: str, wheelhouse: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> BuiltImage:
    """The plan's image built once with buildah on the Debian base from the wheelhouse (``appopt build``)."""
    out = Path(shutil.copytree(runtime_plan, tmp_path_factory.mktemp("runtime-image") / "out"))
    result = CliRunner().invoke(appopt_app(), ["build", str(out), "--engine", "buildah", "--base-image",
                                               debian_image, "--wheelhouse", str(wheelhouse),
                                               "--tag", "localhost/appopt-test/digits-mlp:ci"])
    assert result.exit_code == 0, result.output[-3000:]
    return BuiltImage(out, "localhost/appopt-test/digits-mlp:ci")
