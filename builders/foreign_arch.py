"""Images for a platform this host cannot execute (arm64 on x86 without binfmt): assembled, not built with RUN.

A plan's Dockerfile installs its requirements with ``RUN pip install``, which needs the target's CPU. Here the
same image is assembled from parts prepared on the host (:mod:`builders.foreign_root`): the target's Debian root
with the wheels unpacked, the application files and model from the plan, the model also compiled on the host
(``python -m runtime compile`` is architecture-independent ONNX work) and the runtime's kernels cross-built for
the plan's CPU (``APPOPT_NATIVE_LIB`` names them, so nothing needs a compiler at run time). The Dockerfile this
writes (``OUT/build/<arch>/Dockerfile``) holds only ``FROM scratch``, ``COPY``, ``ENV``, ``LABEL`` and the
entry point, taken from the plan's own Dockerfile (rendered from ``deployment.json`` for a Singularity-only plan),
so the image carries the same labels; the engine builds it with ``--platform``, which sets the architecture and
variant of the image. The Python requirements go in as the target's wheels (PyTorch's aarch64 CPU wheel for the
A64FX example), unpacked on the host.

Where the host can run the target's code (natively or through binfmt), the ordinary build applies instead.

>>> kernel_cpu("a64fx"), kernel_cpu("graviton2"), kernel_cpu("unknown-arm")
(('a64fx', ''), ('neoverse-n1', ''), ('', 'armv8-a'))
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

from builders.blocks.model_compile import ModelCompile
from builders.containers import render_dockerfile
from builders.deployment import Deployment
from builders.engines import EngineError, LineSink
from builders.foreign_root import ForeignRootError, debian_arch, host_can_run, prepare_root
from builders.image_build import PreparedBuild, load_deployment
from builders.wheelhouse import list_wheels, python_version_of

#: ``-mcpu`` for the CPU models the catalog names; anything else gets the baseline ISA of its architecture.
KERNEL_CPUS = {
    "a64fx": "a64fx",
    "graviton2": "neoverse-n1",
    "neoverse-n1": "neoverse-n1",
    "graviton3": "neoverse-v1",
    "neoverse-v1": "neoverse-v1",
    "grace": "neoverse-v2",
    "neoverse-v2": "neoverse-v2",
}
_VARIANT = {"arm64": "v8"}
#: Final-stage instructions carried over verbatim from the plan's Dockerfile.
_CARRIED = ("ENV", "LABEL", "ENTRYPOINT", "CMD", "WORKDIR", "EXPOSE", "USER")
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KERNELS_DIR = "/opt/appopt/kernels"


def needs_assembly(platform: str | None, out_dir: Path | None = None) -> bool:
    """True when ``platform`` (``linux/arm64``) names code this host cannot run, so RUN steps are impossible, and
    ``out_dir`` (when given) holds a plan to assemble from; a hand-written Dockerfile goes to the engine as is."""
    if platform is None or (out_dir is not None and not (out_dir / "deployment.json").is_file()):
        return False
    try:
        return not host_can_run(platform.split("/")[1])
    except ForeignRootError:
        return False  # an architecture we do not assemble: the engine's own build reports it


def kernel_cpu(model: str) -> tuple[str, str]:
    """``(cpu, march)`` for ``runtime.native.cross_build``: a chosen CPU, never the build host's."""
    cpu = KERNEL_CPUS.get(model.lower())
    return (cpu, "") if cpu else ("", "armv8-a")


def full_platform(platform: str) -> str:
    """``linux/arm64/v8`` for ``linux/arm64``: the variant goes into the image config."""
    parts = platform.split("/")
    variant = _VARIANT.get(parts[1])
    return f"{platform}/{variant}" if len(parts) == 2 and variant else platform


def final_stage_instructions(dockerfile: str) -> list[str]:
    """The :data:`_CARRIED` instructions of the last stage, continuation lines joined back as written."""
    logical: list[str] = []
    pending = ""
    for line in dockerfile.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line + "\n"
        if not line.endswith("\\"):
            logical.append(pending.rstrip("\n"))
            pending = ""
    stages = [i for i, text in enumerate(logical) if text.split(None, 1)[0].upper() == "FROM"]
    last = logical[stages[-1] + 1 :] if stages else logical
    carried = [text for text in last if text.split(None, 1)[0].upper() in _CARRIED]
    # A venv that only the RUN build makes: PATH falls back to the root's own directories.
    return [text for text in carried if not re.match(r"ENV\s+PATH=", text)]


def plan_final_stage(out_dir: Path, dep: Deployment) -> list[str]:
    """What the assembled image keeps of the plan's final stage (:func:`final_stage_instructions`).

    A Singularity-only plan (the A64FX example) has no Dockerfile: its final stage is rendered from the same
    deployment, so the image gets the labels, environment and entry point its ``Singularity.def`` has.
    """
    original = out_dir / "Dockerfile"
    text = original.read_text(encoding="utf-8") if original.is_file() else render_dockerfile(dep)
    return final_stage_instructions(text)


def _plan_cpu(out_dir: Path) -> str:
    import json

    try:
        target = json.loads((out_dir / "plan.json").read_text(encoding="utf-8")).get("target") or {}
    except (OSError, ValueError):
        return ""
    return str(target.get("hardware") or "")


def _special_files(directory: str, names: list[str]) -> set[str]:
    """Entries of ``directory`` that are neither directories, regular files nor symlinks (device nodes, fifos,
    sockets): a plain copy would read ``dev/full`` or ``dev/zero`` without end, and the container runtime makes
    its own ``/dev`` anyway."""
    special = set()
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            special.add(name)
    return special


def _link_tree(source: Path, dest: Path) -> None:
    """``dest`` as a copy of ``source`` made of hard links (a plain copy across file systems), without the root's
    device nodes, fifos and sockets."""
    if dest.exists():
        shutil.rmtree(dest)
    try:
        shutil.copytree(source, dest, symlinks=True, copy_function=os.link, ignore=_special_files)
    except OSError:
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(source, dest, symlinks=True, ignore=_special_files)


def refuse_build_flags(platform: str, base_image: str | None, wheelhouse: Path | None) -> None:
    """An assembled image has no build stage: ``--base-image`` and ``--wheelhouse`` are refused in one line (before
    the engine is even looked for)."""
    if base_image is not None or wheelhouse is not None:
        arch = debian_arch(platform.split("/")[1])
        raise EngineError(f"--platform {platform}: this host cannot run {arch} code, so the image is assembled "
                          "from a Debian root prepared here; --base-image and --wheelhouse do not apply")  # fmt: skip


def prepare_foreign_build(
    out_dir: Path,
    dep: Deployment | None,
    platform: str,
    *,
    cache: Path | None = None,
    base_image: str | None = None,
    wheelhouse: Path | None = None,
    on_line: LineSink | None = None,
) -> tuple[Path, tuple[str, ...]]:
    """Write ``OUT/build/<arch>/`` (root, kernels, compiled model, Dockerfile); the Dockerfile and the wheels."""
    say = on_line or (lambda _line: None)
    arch = debian_arch(platform.split("/")[1])
    if dep is None:
        raise EngineError(f"{out_dir}: no deployment.json, so the {arch} image cannot be assembled; "
                          "run `appopt plan` again")  # fmt: skip
    refuse_build_flags(platform, base_image, wheelhouse)
    carried = plan_final_stage(out_dir, dep)
    python = python_version_of(dep.base_image)
    if python != "3.11":
        raise EngineError(f"base image {dep.base_image}: Python {python}, but the {arch} root is Debian bookworm "
                          "with Python 3.11; plan with a Python 3.11 base to build for another platform")  # fmt: skip
    from runtime import native, tools

    cache_root = cache or native.cache_dir() / "foreign"
    say(f"{platform}: this host cannot run {arch} code; assembling the image without RUN")
    try:
        root = prepare_root(cache_root, arch, python_version=python, requirements=dep.pip_packages,
                            packages=dep.apt_packages)  # fmt: skip
    except ForeignRootError as exc:
        raise EngineError(str(exc)) from None
    say(f"root: {root.path} (Debian bookworm {arch}, wheels: {' '.join(dep.pip_packages)})")
    work = out_dir / "build" / arch
    work.mkdir(parents=True, exist_ok=True)
    _link_tree(root.path, work / "rootfs")

    cpu, march = kernel_cpu(_plan_cpu(out_dir))
    kernels = work / "kernels" / f"appopt_kernels_{arch}-{cpu or march}.so"
    try:
        native.cross_build("aarch64" if arch == "arm64" else "x86_64", kernels, cpu=cpu, march=march)
    except RuntimeError as exc:
        raise EngineError(f"kernels for {arch}: {exc}") from None
    say(f"kernels: cross-built with {'-mcpu=' + cpu if cpu else '-march=' + march} -> {kernels.name}")

    rel = work.relative_to(out_dir)
    lines = [
        f"# Assembled by appopt for {platform} on a host that cannot run {arch} code: COPY only, no RUN.",
        "# Edit the spec and plan again rather than this file.",
        "FROM scratch",
        f"COPY {rel}/rootfs/ /",
    ]
    for source, destination in ModelCompile(dep.app_dir, dep.model_file, dep.app_files).copies():
        lines.append(f"COPY {source} {destination}")
    argv = list(dep.compile_argv or ())
    if dep.model_file and "-o" in argv[:-1]:  # the RUN that compiles the model, done here instead
        destination = argv[argv.index("-o") + 1]
        compiled = work / "compiled"
        shutil.rmtree(compiled, ignore_errors=True)
        tools.compile_to_dir(str(out_dir / dep.model_file), str(compiled))
        lines.append(f"COPY {rel}/compiled {destination}")
        say(f"model: compiled on the host -> {destination}")
    lines.append(f"COPY {rel}/kernels {KERNELS_DIR}")
    lines.append(f'ENV PATH="{_DEFAULT_PATH}" \\\n    APPOPT_NATIVE_LIB="{KERNELS_DIR}/{kernels.name}"')
    lines.extend(carried)
    dockerfile = work / "Dockerfile"
    dockerfile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    say(f"wrote {dockerfile}")
    return dockerfile, list_wheels(root.path.parent / "wheels")


def prepared_foreign_build(
    out_dir: Path,
    platform: str,
    *,
    base_image: str | None = None,
    wheelhouse: Path | None = None,
    on_line: LineSink | None = None,
) -> tuple[PreparedBuild, str]:
    """What ``build_plan_image`` builds for a platform this host cannot run, and the platform with its variant."""
    dep = load_deployment(out_dir)
    dockerfile, wheels = prepare_foreign_build(
        out_dir, dep, platform, base_image=base_image, wheelhouse=wheelhouse, on_line=on_line
    )
    return PreparedBuild(dockerfile, dep, wheels), full_platform(platform)
