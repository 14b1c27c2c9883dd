"""What every scheduler shares: the :class:`SchedulerModule` each one declares, a job's status, and the client
interface (``submit``, ``status``, ``wait``).

Each scheduler is one module that holds its job file, directives, template, launchers and client commands, and
exports them as ``SCHEDULERS``, a tuple of :class:`SchedulerModule`: :mod:`builders.slurm`, :mod:`builders.pbs` (PBS
Pro and Torque), :mod:`builders.kubernetes` (rendered only: ``kubectl apply``), :mod:`builders.local` (``none``: a
plain ``run.sh``). :mod:`builders.schedulers` finds them by scanning the package; the spec, the plan, the renderer and
``appopt submit`` read everything from it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from builders.deployment import ContainerFormat, Deployment
from builders.errors import SchedulerError


@dataclass(frozen=True)
class JobStatus:
    """Where a job stands; ``exit_code``/``signal`` are known once it has finished."""

    job_id: str
    state: str
    finished: bool
    exit_code: int | None = None
    signal: int | None = None
    stdout_path: str | None = None
    reason: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.finished and self.state in ("COMPLETED", "F", "C") and self.exit_code == 0

    @property
    def shell_exit_code(self) -> int:
        """What a shell would report: the exit code, 128+signal when killed, 1 when it ended without either."""
        if self.signal:
            return 128 + self.signal
        if self.exit_code:
            return self.exit_code
        return 0 if self.succeeded else 1

    def summary(self) -> str:
        text = f"job {self.job_id}: {self.state}"
        if self.finished:
            text += f" exit code {self.exit_code if self.exit_code is not None else '?'}"
            if self.signal:
                text += f" (signal {self.signal})"
        if self.reason and self.reason not in ("None", ""):
            text += f" reason {self.reason}"
        return text


def run_client(argv: list[str], env: Mapping[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=dict(env), cwd=cwd, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"{argv[0]}: no answer within 60 s (is the controller up?)") from None


def problem_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The line that says what went wrong: the last one naming an error, else the last one (quotes trimmed).

    The Torque wrappers over Slurm print several lines ending in a lone quote, the sbatch error inside them.
    """
    lines = [line.strip().strip("'\"").strip() for line in (proc.stderr.strip() or proc.stdout.strip()).splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [f"exit {proc.returncode}"])[-1]


class Scheduler(ABC):
    """Submit a script, ask about a job, wait for it."""

    name: ClassVar[str]
    #: The client command that must exist on PATH.
    client: ClassVar[str]

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        if shutil.which(self.client, path=self.env.get("PATH")) is None:
            raise SchedulerError(self.missing_client_message())

    @classmethod
    def missing_client_message(cls) -> str:
        return (f"{cls.name}: `{cls.client}` not found on this machine; submit from the cluster's login node "
                f"(where the {cls.name} client commands are installed)")

    @abstractmethod
    def submit(self, script: Path) -> str:
        """Submit ``script`` from its own directory; returns the job id."""

    @abstractmethod
    def status(self, job_id: str) -> JobStatus:
        """The job's current state (and exit code once finished)."""

    def wait(
        self, job_id: str, *, poll_seconds: float = 2.0, timeout_seconds: float | None = None,
        on_change: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Poll until the job finishes; ``on_change`` hears each new state. Raises SchedulerError on timeout."""
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        last_state = ""
        while True:
            current = self.status(job_id)
            if current.state != last_state and on_change:
                on_change(current)
            last_state = current.state
            if current.finished:
                return current
            if deadline is not None and time.monotonic() > deadline:
                raise SchedulerError(f"job {job_id}: still {current.state} after {timeout_seconds:g} s")
            time.sleep(poll_seconds)


def hms(seconds: int) -> str:
    """``HH:MM:SS`` (hours past 99 keep their digits), the walltime both PBS and Slurm read."""
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


#: A launcher's prefix (with a trailing space) for a deployment's job line, e.g. ``srun --nodes=2 ... ``.
Launcher = Callable[[Deployment], str]


def _no_notes(dep: Deployment) -> list[str]:
    return []


@dataclass(frozen=True)
class SchedulerModule:
    """What one scheduler's module declares: everything the spec check, the plan, the renderer and ``appopt
    submit``/``status`` need to know about it. A module under ``builders`` exports its own as ``SCHEDULERS``.
    """

    #: The ``target.scheduler`` value.
    name: str
    #: The job file the plan writes (``job.slurm``, ``run.sh``...).
    job_file: str
    #: The job file's text for a checked deployment (the module's template and directives).
    render: Callable[[Deployment], str]
    #: Launchers a job may use (``dep.launcher``), by name; ``default_launcher`` is the one a multi-task job gets.
    launchers: Mapping[str, Launcher] = field(default_factory=dict)
    default_launcher: str | None = None
    #: The Jinja2 template under ``templates/`` the job is rendered from (None: written another way).
    template: str | None = None
    #: The client that submits the job file and follows the job; None when appopt submits nothing itself.
    client: type[Scheduler] | None = None
    #: Without a client, what the user does instead (``{path}`` is the job file), for ``appopt submit``.
    run_hint: str = "run {path}"
    #: A container format the job needs, and why (e.g. a Kubernetes Job runs an OCI image: docker).
    needs_format: ContainerFormat | None = None
    needs_format_reason: str = ""
    #: Notes for the plan about the job (a pod's size...); may raise RenderError for a job that cannot fit.
    notes: Callable[[Deployment], list[str]] = _no_notes
    #: ``appopt validate --strict``: a deeper check of the rendered text, returning a one-line summary.
    check_rendered: Callable[[str], str] | None = None
    #: Whether the job file is a script to make executable.
    executable: bool = True
    #: Where messages list it and where ``auto`` tries its client: lower first (Slurm 10, PBS 20...), then by name.
    order: int = 100

    def format_problem(self, formats: Sequence[str]) -> str | None:
        """``container.formats``'s problem for this scheduler, or None when ``formats`` serve it."""
        if self.needs_format is None or self.needs_format in formats:
            return None
        return f"{self.needs_format_reason}, so formats must include {self.needs_format}"
