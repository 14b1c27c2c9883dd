"""Charliecloud: build the plan's Dockerfile with ``ch-image``, flatten it to SquashFS, run it with ``ch-run``.

Charliecloud is an unprivileged HPC container runtime: no daemon, no setuid, images are directories or SquashFS
files on a shared file system. ``ch-image`` (0.31) ignores ``LABEL`` and ``ENTRYPOINT``, so the command to run is
read back from the Dockerfile's last ``ENTRYPOINT``/``CMD``; ``ENV`` is kept and applied with ``ch-run --set-env``.

The ``ch-*`` tools are Python scripts that expect the distribution's ``python3``: :func:`charliecloud_env` puts
``/usr/bin`` first on PATH and sets ``USER`` (which they need) when it is missing.

ch-image 0.31 (Debian 12) also lacks ``${VAR:+word}``/``${VAR:-word}`` (its issue #774) and runs ``RUN`` with the
host's ``/tmp`` bound over the image's, so a file ``COPY``'d to ``/tmp`` is invisible to the next ``RUN`` (and an
``rm -rf /tmp/...`` there would act on the host). :func:`charliecloud_dockerfile` resolves the modifiers from the
stage's known ``ENV`` (a base image's own variables count as unset) and moves ``COPY`` destinations under ``/tmp``
to ``/var/tmp``, rewriting that path in the rest of the stage.

>>> image_command('FROM x\\nENTRYPOINT ["python3", "-m", "runtime"]\\nCMD ["--help"]\\n')
['python3', '-m', 'runtime', '--help']
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from builders.engines import EngineError, LineSink, stream_command
from builders.errors import BuildError, RenderError
from builders.names import checked_image_reference

TOOLS = ("ch-image", "ch-convert", "ch-run")


class CharliecloudError(BuildError):
    """A missing tool or a failed ch-image/ch-convert/ch-run step; one line per problem."""

    default_line = "charliecloud error"


def charliecloud_env(env: Mapping[str, str] | None = None, storage: Path | None = None) -> dict[str, str]:
    """The environment the ``ch-*`` tools need: system python3 first, USER set, optional image storage."""
    result = dict(os.environ if env is None else env)
    path = result.get("PATH", "")
    result["PATH"] = "/usr/bin:/bin" + (f":{path}" if path else "")
    result.setdefault("USER", _user())
    if storage is not None:
        result["CH_IMAGE_STORAGE"] = str(storage)
    return result


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def unavailable_reason(env: Mapping[str, str] | None = None) -> str | None:
    """None when ch-image, ch-convert and ch-run are installed, else which are missing and the package names."""
    path = charliecloud_env(env)["PATH"]
    missing = [tool for tool in TOOLS if shutil.which(tool, path=path) is None]
    if missing:
        return (f"Charliecloud not installed ({', '.join(missing)} missing): "
                "apt-get install charliecloud-builders charliecloud-runtime squashfuse")
    return None


def image_command(dockerfile_text: str) -> list[str]:
    """The final stage's ``ENTRYPOINT`` + ``CMD`` (JSON exec form) as an argv."""
    entrypoint: list[str] = []
    cmd: list[str] = []
    for line in dockerfile_text.splitlines():
        match = re.match(r"^\s*(ENTRYPOINT|CMD|FROM)\s+(.*)$", line, re.IGNORECASE)
        if not match:
            continue
        keyword, rest = match.group(1).upper(), match.group(2).strip()
        if keyword == "FROM":
            entrypoint, cmd = [], []
            continue
        try:
            words = json.loads(rest)
        except ValueError:
            words = ["/bin/sh", "-c", rest]  # the shell form
        if keyword == "ENTRYPOINT":
            entrypoint, cmd = list(words), []
        else:
            cmd = list(words)
    return [*entrypoint, *cmd]


_MODIFIER = re.compile(r"\$\{(\w+):([+-])([^}]*)\}")
_ENV_KEYS = re.compile(r"(?:^|\s)([A-Za-z_]\w*)=")


def _resolve_modifier(match: re.Match[str], known: frozenset[str]) -> str:
    """``${NAME:+word}`` is word when NAME is set; ``${NAME:-word}`` is NAME's value, or word when unset."""
    name, op, word = match.groups()
    if op == "+":
        return word if name in known else ""
    return f"${{{name}}}" if name in known else word


def charliecloud_dockerfile(dockerfile_text: str) -> str:
    """``dockerfile_text`` in the dialect ch-image 0.31 builds (see the module docstring).

    >>> print(charliecloud_dockerfile('FROM b\\nENV P="/a${P:+:$P}"\\nENV P="/b${P:+:$P}"\\n'), end="")
    FROM b
    ENV P="/a"
    ENV P="/b:$P"
    >>> print(charliecloud_dockerfile("FROM b\\nCOPY w /tmp/w\\nRUN pip -f /tmp/w && rm -r /tmp/w\\n"), end="")
    FROM b
    COPY w /var/tmp/w
    RUN pip -f /var/tmp/w && rm -r /var/tmp/w
    """
    known: set[str] = set()
    moved: dict[str, str] = {}
    lines = []
    in_env = continued = False
    for line in dockerfile_text.splitlines():
        if not continued:
            keyword = line.split(maxsplit=1)[0].upper() if line.strip() else ""
            in_env = keyword == "ENV"
            if keyword == "FROM":
                known, moved = set(), {}
            copy_to_tmp = re.match(r"^(\s*COPY\s.*\s)(/tmp/\S+)\s*$", line, re.IGNORECASE)
            if copy_to_tmp:
                moved[copy_to_tmp.group(2)] = "/var/tmp/" + copy_to_tmp.group(2)[len("/tmp/"):]
        for old, new in moved.items():
            line = re.sub(re.escape(old) + r"(?=[/\s\"']|$)", new, line)
        line = _MODIFIER.sub(functools.partial(_resolve_modifier, known=frozenset(known)), line)
        if in_env:
            known.update(_ENV_KEYS.findall(line))
        continued = line.rstrip().endswith("\\")
        lines.append(line)
    return "\n".join(lines) + ("\n" if dockerfile_text.endswith("\n") else "")


@dataclass(frozen=True)
class CharliecloudImage:
    """An image in ch-image's storage and, once converted, its SquashFS file."""

    name: str
    storage: Path | None
    squashfs: Path | None
    command: tuple[str, ...]
    seconds: float


def _checked_name(name: str, field: str) -> str:
    """``name`` when it is one image reference: it is a positional argument of ``ch-image import``/``ch-convert``, where
    ``-x`` would be read as an option."""
    try:
        return checked_image_reference(name, field)
    except RenderError as exc:
        raise CharliecloudError(*exc.lines) from None


def _run(argv: list[str], env: Mapping[str, str], what: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(env), check=False)
    if proc.returncode != 0:
        lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise CharliecloudError(f"{argv[0]}: {what} failed: {lines[-1] if lines else f'exit {proc.returncode}'}")
    return proc.stdout


def import_image(source: Path, name: str, *, storage: Path | None = None,
                 env: Mapping[str, str] | None = None) -> None:
    """``ch-image import``: a root file system directory or tarball becomes image ``name`` (offline bases)."""
    _checked_name(name, "image name")
    _run(["ch-image", "import", str(source), name], charliecloud_env(env, storage), f"import of {source}")


def build(
    context: Path,
    dockerfile: Path,
    name: str,
    *,
    storage: Path | None = None,
    force: bool = True,
    log_path: Path | None = None,
    on_line: LineSink | None = None,
    env: Mapping[str, str] | None = None,
) -> CharliecloudImage:
    """``ch-image build`` of ``dockerfile`` (adapted by :func:`charliecloud_dockerfile`) in ``context``.

    ``force`` passes ``--force``: ch-image's workarounds that let ``apt-get``/``dnf`` run unprivileged. The adapted
    Dockerfile is written next to the original as ``Dockerfile.charliecloud``.
    """
    _checked_name(name, "--tag")
    reason = unavailable_reason(env)
    if reason:
        raise CharliecloudError(reason)
    started = time.monotonic()
    adapted = dockerfile.with_name("Dockerfile.charliecloud")
    adapted.write_text(charliecloud_dockerfile(dockerfile.read_text(encoding="utf-8")), encoding="utf-8")
    argv = ["ch-image", "build", *(["--force"] if force else []), "-t", name, "-f", str(adapted), str(context)]
    try:
        stream_command(argv, charliecloud_env(env, storage), log_path, on_line)
    except EngineError as exc:
        raise CharliecloudError(*exc.lines) from None
    command = tuple(image_command(adapted.read_text(encoding="utf-8")))
    return CharliecloudImage(name, storage, None, command, time.monotonic() - started)


def to_squashfs(image: CharliecloudImage, dest: Path, *, env: Mapping[str, str] | None = None) -> CharliecloudImage:
    """``ch-convert -i ch-image -o squash``: one file to copy to a cluster's shared file system."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    _run(["ch-convert", "-i", "ch-image", "-o", "squash", image.name, str(dest)],
         charliecloud_env(env, image.storage), f"conversion of {image.name} to SquashFS")
    return CharliecloudImage(image.name, image.storage, dest, image.command, image.seconds)


def run(
    image: Path,
    argv: Sequence[str],
    *,
    workdir: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_seconds: float = 600,
) -> subprocess.CompletedProcess[str]:
    """``ch-run`` ``argv`` in ``image`` (a SquashFS file or directory) with the image's own environment.

    The host's environment is dropped (``--unset-env='*'``) and the image's applied (``--set-env``), so a host
    PYTHONPATH or virtualenv cannot leak in; ``workdir`` is bound and made the working directory. A SquashFS file is
    mounted on a private temporary directory (not ch-run's shared default under /var/tmp).
    """
    full = ["ch-run", "--unset-env=*", "--set-env"]
    if workdir is not None:
        full += ["-b", f"{workdir}:{workdir}", "-c", str(workdir)]
    with tempfile.TemporaryDirectory(prefix="ch-mount-") as mount:
        if image.is_file():
            full += ["--mount", mount]
        full += [str(image), "--", *argv]
        try:
            return subprocess.run(full, capture_output=True, text=True, env=charliecloud_env(env), check=False,
                                  timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            raise CharliecloudError(f"ch-run {image}: still running after {timeout_seconds:g} s") from None
