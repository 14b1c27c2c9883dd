"""Benchmark campaigns at cluster scale: one YAML spec, a Slurm job array, one result shard per array task.

The array script is rendered and submitted by the Slurm scheduler module (:mod:`builders.slurm`, through the registry
:mod:`builders.schedulers`), as plans' jobs are; nothing here writes ``#SBATCH`` lines or calls ``sbatch``.

The campaign's jobs (model × backend × threads × precision, see ``benchmarks.runner.plan_jobs``) are dealt round-robin
into ``tasks`` slices; array task *i* runs slice *i* (``appopt bench run-slice SPEC --slice i``) — inside the built
image when the spec names one — and appends to its own shard, so nodes never share a file. ``appopt bench merge``
combines the shards afterwards.

Example spec::

    name: cpu-sweep
    suite: core                  # or: models: [resnet50, mlp]
    backends: [appopt-runtime, onnxruntime]
    scenarios: [SingleStream]
    threads: [1, 2]
    batches: [1, 8]
    settings: {min_duration_s: 2.0, min_queries: 20}
    driver: auto                 # LoadGen where installed (its logs stay next to each shard), else the harness
    shard_dir: shards
    slurm: {tasks: 4, partition: debug, time: "00:30:00", cpus_per_task: 2, image: appopt.sif}
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from apperrors import AppoptError
from benchmarks.backends import all_backends
from benchmarks.harness import SCENARIOS, ScenarioSettings
from benchmarks.models import suite
from benchmarks.runner import BenchRequest, Job, plan_jobs
from builders.quoting import shell_quote
from builders.schedulers import get_scheduler
from builders.slurm import ArrayJob, render_array_job

#: The scheduler whose job arrays a campaign runs as (its module renders and submits them).
SCHEDULER = "slurm"


class CampaignError(AppoptError):
    """A campaign spec problem; ``lines`` are ``field.path: message``."""


def _fp32_only() -> list[Literal["fp32", "fp16", "bf16", "int8"]]:
    return ["fp32"]


class SlurmOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: Array tasks (slices); None = one per job.
    tasks: int | None = Field(default=None, ge=1)
    partition: str | None = None
    account: str | None = None
    time: str = "01:00:00"
    cpus_per_task: int = Field(default=2, ge=1)
    mem: str | None = None
    #: Run every task inside this Singularity/Apptainer image (the image built from the plan).
    image: str | None = None
    #: Extra ``#SBATCH`` options, e.g. ``["--exclusive"]``.
    extra: list[str] = Field(default_factory=list)


class CampaignSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    suite: str | None = None
    models: list[str] | None = None
    backends: list[str] = Field(default_factory=lambda: ["appopt-runtime", "onnxruntime"])
    scenarios: list[str] = Field(default_factory=lambda: ["SingleStream"])
    threads: list[int] = Field(default_factory=lambda: [1])
    batches: list[int] = Field(default_factory=lambda: [1])
    precisions: list[Literal["fp32", "fp16", "bf16", "int8"]] = Field(default_factory=_fp32_only)
    settings: dict[str, float | int] = Field(default_factory=dict)
    #: Scenario driver of every slice: LoadGen where installed (``auto``), or named; logs go to ``<shard>.logs/``.
    driver: Literal["auto", "loadgen", "harness"] = "auto"
    #: Where tasks write their shards (relative paths are relative to the spec file).
    shard_dir: str = "shards"
    #: How tasks invoke appopt (e.g. ``python -m cli`` where the console script is not on PATH).
    appopt_command: str = "appopt"
    slurm: SlurmOptions = Field(default_factory=SlurmOptions)

    @field_validator("backends")
    @classmethod
    def _known_backends(cls, value: list[str]) -> list[str]:
        known = all_backends()
        for name in value:
            if name not in known:
                raise ValueError(f"unknown backend {name!r}; known: {', '.join(known)}")
        return value

    @field_validator("scenarios")
    @classmethod
    def _known_scenarios(cls, value: list[str]) -> list[str]:
        for name in value:
            if name not in (*SCENARIOS, "accuracy"):
                raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}, accuracy")
        return value

    @field_validator("settings")
    @classmethod
    def _known_settings(cls, value: dict[str, float | int]) -> dict[str, float | int]:
        fields = ScenarioSettings.__dataclass_fields__
        for key in value:
            if key not in fields:
                raise ValueError(f"unknown setting {key!r}; known: {', '.join(fields)}")
        return value

    def request(self) -> BenchRequest:
        try:
            models = suite(",".join(self.models)) if self.models else suite(self.suite or "core")
        except KeyError as error:
            raise CampaignError(f"{'models' if self.models else 'suite'}: {error.args[0]}") from None
        settings = ScenarioSettings(**self.settings)  # type: ignore[arg-type]
        return BenchRequest(
            models,
            tuple(self.backends),
            tuple(self.scenarios),  # type: ignore[arg-type]
            tuple(self.threads),
            tuple(self.batches),
            tuple(self.precisions),
            settings,
            driver=self.driver,
        )

    def jobs(self) -> list[Job]:
        return plan_jobs(self.request())

    def task_count(self) -> int:
        jobs = len(self.jobs())
        return max(1, min(self.slurm.tasks or jobs, jobs))


def load_campaign(path: str | Path) -> CampaignSpec:
    """Read and validate a campaign spec; CampaignError with one ``field: message`` line per problem."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CampaignError(f"{path}: no such campaign spec") from None
    except yaml.YAMLError as error:
        raise CampaignError(f"{path}: not valid YAML ({error})") from None
    try:
        spec = CampaignSpec.model_validate(data or {})
    except ValidationError as error:
        raise CampaignError(
            *(f"{'.'.join(str(p) for p in e['loc']) or '(spec)'}: {e['msg']}" for e in error.errors())
        ) from None
    spec.request()  # model names are checked here
    return spec


def slice_jobs(spec: CampaignSpec, index: int) -> list[Job]:
    """Jobs of array task ``index`` (round-robin, so slow models spread over tasks)."""
    tasks = spec.task_count()
    if not 0 <= index < tasks:
        raise CampaignError(f"--slice: {index} is outside 0..{tasks - 1}")
    return spec.jobs()[index::tasks]


def shard_dir(spec: CampaignSpec, spec_path: Path) -> Path:
    directory = Path(spec.shard_dir)
    return directory if directory.is_absolute() else (spec_path.parent / directory).resolve()


def render_slurm_array(spec: CampaignSpec, spec_path: str | Path) -> str:
    """The job-array script (``builders.slurm``): one task per slice, each writing ``shard-<job>-<task>.csv``."""
    spec_path = Path(spec_path).resolve()
    shards = shard_dir(spec, spec_path)
    tasks = spec.task_count()
    s = spec.slurm
    q = shell_quote
    return render_array_job(ArrayJob(
        name=f"appopt-bench-{spec.name}",
        tasks=tasks,
        cpus_per_task=s.cpus_per_task,
        time=s.time,
        output=str(shards / "logs" / "%x-%A_%a.out"),
        partition=s.partition,
        account=s.account,
        mem=s.mem,
        extra=tuple(s.extra),
        image=s.image,
        comments=(
            f"appopt benchmark campaign {spec.name!r}: {len(spec.jobs())} jobs in {tasks} slices.",
            f"After the array finishes: appopt bench merge {q(str(shards))} -o results.csv",
        ),
        setup=(
            f"mkdir -p {q(str(shards))}",
            'shard="' + str(shards).replace('"', '\\"') + '/shard-${SLURM_ARRAY_JOB_ID}-${SLURM_ARRAY_TASK_ID}.csv"',
        ),
        command=f"{spec.appopt_command} bench run-slice {q(str(spec_path))} "
        '--slice "${SLURM_ARRAY_TASK_ID}" --shard "${shard}"',
    ))


def write_campaign(spec: CampaignSpec, spec_path: str | Path, out_dir: str | Path) -> Path:
    """Write the array script to ``out_dir/<name>.slurm.sh`` (and create the shard directory)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (shard_dir(spec, Path(spec_path).resolve()) / "logs").mkdir(parents=True, exist_ok=True)
    script = out / f"{spec.name}.slurm.sh"
    script.write_text(render_slurm_array(spec, spec_path), encoding="utf-8")
    script.chmod(0o755)
    return script


def submit_campaign(script: Path) -> str:
    """Submit the array script with the Slurm module's client (``sbatch``); returns the job id."""
    return get_scheduler(SCHEDULER).submit(script)
