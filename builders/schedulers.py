"""The schedulers' registry: every :class:`~builders.batch.SchedulerModule` that a module of the ``builders``
package exports as ``SCHEDULERS``, found by scanning the package; and submitting a plan's job with its scheduler
and following it to its exit code.

The spec's check, the plan (default launcher, notes), the job renderer, ``appopt validate --strict`` and
``appopt submit``/``status`` all read the registry, so a new scheduler is its own module (``builders/<name>.py``
ending in ``SCHEDULERS = (MINE,)``) and its test; a scheduler from outside the package is a :func:`register` call.
The registry lists schedulers by their ``order`` (Slurm, PBS, Torque, Kubernetes, none), which is also the order
``auto`` tries their clients in. Where the client commands are missing the error says so in one line: submission
happens on the cluster's login node.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import builders
from builders.batch import JobStatus, Scheduler, SchedulerModule
from builders.errors import RenderError, SchedulerError
from builders.pbs import PBSScheduler
from builders.slurm import SlurmScheduler, parse_slurm_exit

__all__ = ["JobScript", "JobStatus", "PBSScheduler", "Scheduler", "SchedulerError", "SchedulerModule",
           "SlurmScheduler", "built_in", "find_job_script", "get_scheduler", "job_files", "not_a_scheduler",
           "parse_slurm_exit", "register", "rescan", "scheduler_module", "scheduler_names", "submit_plan_job",
           "unregister"]


@functools.cache
def built_in() -> tuple[SchedulerModule, ...]:
    """The schedulers the ``builders`` modules export as ``SCHEDULERS``, by ``order`` then name (scanned once).

    Only modules whose source names ``SCHEDULERS`` are imported: the scan costs no import of the image, registry
    and wheelhouse code that ``appopt submit`` never needs."""
    found: dict[str, SchedulerModule] = {}
    for folder in builders.__path__:
        for path in sorted(Path(folder).glob("*.py")):
            if "SCHEDULERS" not in path.read_text(encoding="utf-8") or path.stem in ("__init__", "schedulers"):
                continue
            for module in getattr(importlib.import_module(f"builders.{path.stem}"), "SCHEDULERS", ()):
                if not isinstance(module, SchedulerModule):
                    raise TypeError(f"builders.{path.stem}.SCHEDULERS holds {module!r}, not a SchedulerModule")
                if module.name in found:
                    raise ValueError(f"scheduler {module.name!r} is exported twice (again by builders.{path.stem})")
                found[module.name] = module
    return tuple(sorted(found.values(), key=lambda module: (module.order, module.name)))


#: Schedulers added with :func:`register` (from outside the package).
_ADDED: dict[str, SchedulerModule] = {}


def _registry() -> dict[str, SchedulerModule]:
    return {module.name: module for module in built_in()} | _ADDED


def rescan() -> None:
    """Scan the package again on next use (after a scheduler module was added while running, e.g. in a test)."""
    built_in.cache_clear()


def register(module: SchedulerModule) -> None:
    """Add a scheduler (a name not yet taken); the spec, the plan and the renderer accept it from now on."""
    if module.name in _registry():
        raise ValueError(f"scheduler {module.name!r} is already registered")
    _ADDED[module.name] = module


def unregister(name: str) -> None:
    """Remove a scheduler added with :func:`register`."""
    if any(module.name == name for module in built_in()):
        raise ValueError(f"scheduler {name!r} is built in")
    _ADDED.pop(name, None)


def scheduler_names() -> tuple[str, ...]:
    """Every ``target.scheduler`` value the spec accepts."""
    return tuple(_registry())


def scheduler_module(name: str) -> SchedulerModule:
    """The scheduler called ``name``; RenderError naming ``scheduler`` when there is none."""
    try:
        return _registry()[name]
    except KeyError:
        raise RenderError(f"scheduler: {not_a_scheduler(name)}") from None


def not_a_scheduler(name: str) -> str:
    """The message for a scheduler name the registry does not hold (the caller names the field)."""
    return f"{name!r} is not one of {', '.join(_registry())}"


def job_files() -> dict[str, str]:
    """The job file each scheduler's plan writes, by scheduler."""
    return {name: module.job_file for name, module in _registry().items()}


def _clients() -> dict[str, type[Scheduler]]:
    return {name: module.client for name, module in _registry().items() if module.client is not None}


def get_scheduler(name: str = "auto", env: Mapping[str, str] | None = None) -> Scheduler:
    """A scheduler with a client (``slurm``, ``pbs``/``torque``...), or ``auto``: the first whose client is on PATH
    (Slurm's ``sbatch``, then PBS's ``qsub``)."""
    env = dict(os.environ if env is None else env)
    clients = _clients()
    if name == "auto":
        for client in dict.fromkeys(clients.values()):
            if shutil.which(client.client, path=env.get("PATH")):
                return client(env)
        commands = " nor ".join(dict.fromkeys(client.client for client in clients.values()))
        raise SchedulerError(f"no batch scheduler client found (neither {commands} on PATH); "
                             "run this on the cluster's login node")
    if name in _registry() and name not in clients:  # kubernetes, none
        raise SchedulerError(f"scheduler {name}: appopt submits nothing to it")
    if name not in clients:
        raise SchedulerError(f"--scheduler {name!r}: expected auto, {', '.join(clients)}")
    return clients[name](env)


@dataclass(frozen=True)
class JobScript:
    scheduler: str
    path: Path


def find_job_script(out_dir: Path) -> JobScript:
    """The job script ``appopt plan`` rendered in ``out_dir`` and the scheduler it is for (from ``plan.json``)."""
    plan_file = out_dir / "plan.json"
    scheduler = None
    if plan_file.is_file():
        try:
            scheduler = json.loads(plan_file.read_text(encoding="utf-8"))["target"]["scheduler"]
        except (ValueError, KeyError, TypeError):
            scheduler = None
    if not isinstance(scheduler, str):
        found = [name for name, job_file in job_files().items() if (out_dir / job_file).is_file()]
        if not found:
            raise SchedulerError(f"{out_dir}: no plan output here (no plan.json or job script); run `appopt plan`")
        scheduler = found[0]
    registry = _registry()
    if scheduler not in registry:
        raise SchedulerError(f"{plan_file}: target.scheduler {not_a_scheduler(scheduler)}")
    module = registry[scheduler]
    path = out_dir / module.job_file
    if module.client is None:
        raise SchedulerError(f"{out_dir}: {module.run_hint.format(path=path)}")
    if not path.is_file():
        raise SchedulerError(f"{path}: job script missing; run `appopt plan` again")
    return JobScript(scheduler, path)


def submit_plan_job(out_dir: Path, env: Mapping[str, str] | None = None) -> tuple[Scheduler, str]:
    """Submit the plan's job script with its scheduler; returns (scheduler, job id) and records it in jobs.json."""
    job = find_job_script(out_dir)
    scheduler = get_scheduler(job.scheduler, env)
    job_id = scheduler.submit(job.path)
    record = out_dir / "jobs.json"
    try:
        history = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else []
    except ValueError:
        history = []
    history.append({"job_id": job_id, "scheduler": scheduler.name, "script": job.path.name,
                    "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    record.write_text(json.dumps(history, indent=2) + "\n", encoding="utf-8")
    return scheduler, job_id
