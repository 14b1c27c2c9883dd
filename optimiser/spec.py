"""The application spec: one YAML file describing a DL application and the machine it must run on.

``load_spec(path)`` parses and validates it. Every problem becomes one line ``path.to.field: message (line N)`` in a
:class:`~optimiser.errors.SpecError`; unknown keys are errors with a "did you mean" when a known key is close.

Example::

    >>> spec = load_spec("examples/resnet50-gpu-slurm.yaml")  # doctest: +SKIP
    >>> spec.application.batch_size
    64
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from builders.deployment import FORMATS, Arch, ContainerFormat
from builders.schedulers import scheduler_module, scheduler_names
from builders.validate import IMAGE_REF, SCHEDULER_TOKEN
from optimiser.errors import SpecError
from optimiser.spec_yaml import MAX_SPEC_CHARS, load_yaml

Precision = Literal["auto", "fp32", "fp16", "bf16", "int8"]
Goal = Literal["latency", "throughput", "time_to_solution"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
#: A shipped code file's or directory's name: what it is called in the image's app directory.
_CODE_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+@-]*$")
#: Names the app directory already uses (the model, its compiled form, the runtime's sources).
RESERVED_CODE_NAMES = frozenset({"model.onnx", "compiled", "runtime"})


#: Upper bounds of the spec's numbers, far above any real job, so that every product of them stays a finite float.
MAX_SAMPLES = 10**15
MAX_EPOCHS = 1e6
MAX_DIM = 2**31 - 1
MAX_CORES = 1_000_000
MAX_GBPS = 1e6
MAX_MEMORY_GIB = 1e9
#: Lengths of a spec's file paths (relative to the spec), in UTF-8 bytes: a name over NAME_MAX makes stat() fail.
MAX_PATH_BYTES = 1024
MAX_NAME_BYTES = 255


def _code_name(path: Path) -> Path:
    if not _CODE_NAME_RE.fullmatch(path.name) or path.name in RESERVED_CODE_NAMES:
        raise ValueError(
            f"{_shown(str(path))}: its name must use letters, digits and ._+@- and not be one of "
            f"{', '.join(sorted(RESERVED_CODE_NAMES))}"
        )
    return path


def _file_path(path: Path) -> Path:
    """A path no file system refuses by its length alone (the kernel's NAME_MAX and a margin under PATH_MAX)."""
    if len(str(path).encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise ValueError(f"{_shown(str(path))}: longer than {MAX_PATH_BYTES} bytes")
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for part in path.parts):
        raise ValueError(f"{_shown(str(path))}: a file or directory name is longer than {MAX_NAME_BYTES} bytes")
    return path


FilePath = Annotated[Path, AfterValidator(_file_path)]
CodePath = Annotated[Path, AfterValidator(_file_path), AfterValidator(_code_name)]
_REPO_RE = re.compile(r"[a-z0-9]([a-z0-9._:-]*[a-z0-9])?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*")


class _Strict(BaseModel):
    # Numbers are finite (no .inf/.nan) and every numeric field has an upper bound: arithmetic on them cannot overflow.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelRef(_Strict):
    """Either a catalog architecture or an ONNX file (relative to the spec file)."""

    architecture: str | None = Field(None, description="A catalog architecture id, e.g. resnet50 or bert_base.")
    onnx: FilePath | None = Field(None, description="Path to an ONNX model, relative to the spec file.")

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelRef:
        if (self.architecture is None) == (self.onnx is None):
            raise ValueError("give exactly one of 'architecture' or 'onnx'")
        return self


class Data(_Strict):
    """The data the application reads; sizes drive time-to-solution."""

    path: str | None = Field(None, description="Where the data lives on the target (mounted into the job).")
    samples: Annotated[int, Field(gt=0, le=MAX_SAMPLES)] | None = Field(None, description="Samples per epoch.")
    epochs: Annotated[float, Field(gt=0, le=MAX_EPOCHS)] = Field(
        1, description="Epochs to run (training) or passes (inference)."
    )
    input_shape: list[Annotated[int, Field(gt=0, le=MAX_DIM)]] | None = Field(
        None, max_length=8, description="Per-sample input shape when the model does not fix it, e.g. [3, 224, 224]."
    )


class Application(_Strict):
    type: Literal["training", "inference"] = Field(description="training | inference")
    model: ModelRef
    batch_size: Annotated[int, Field(gt=0, le=1_000_000)] = Field(
        1, description="Global batch size (split across all devices of all nodes)."
    )
    precision: Precision = Field("auto", description="auto | fp32 | fp16 | bf16 | int8")
    framework: str = Field("auto", description="auto, or pin a framework id from the catalog.")
    data: Data | None = None
    command: list[str] | None = Field(
        None, description="The application's own entry command (argv) run in the container; default: appopt runs it."
    )
    code: list[CodePath] = Field(
        default_factory=list,
        description="The application's own files or directories (relative to the spec file), copied into the "
        "image's app directory (/opt/app, on PYTHONPATH); words of `command` that name them (train.py, src/main.py) "
        "are run from there.",
    )

    @field_validator("code")
    @classmethod
    def _distinct_code_names(cls, paths: list[Path]) -> list[Path]:
        seen: dict[str, Path] = {}
        for path in paths:
            if path.name in seen:
                raise ValueError(
                    f"{_shown(str(seen[path.name]))} and {_shown(str(path))} would both be /opt/app/{path.name}"
                )
            seen[path.name] = path
        return paths


class CPU(_Strict):
    arch: Arch = "x86_64"
    model: str | None = Field(None, description="A catalog hardware preset id, or 'local' for this machine.")
    cores: Annotated[int, Field(gt=0, le=MAX_CORES)] | None = Field(None, description="Cores per node the job may use.")
    memory_gib: Annotated[float, Field(gt=0, le=MAX_MEMORY_GIB)] | None = Field(
        None, description="Memory per node in GiB (default: the CPU preset's, if it states one); sizes Kubernetes pods."
    )


class Accelerator(_Strict):
    vendor: Literal["nvidia", "amd", "intel", "none"] = "none"
    model: str | None = Field(None, description="A catalog hardware preset id, e.g. a100.")
    count: Annotated[int, Field(ge=0, le=64)] = Field(1, description="Accelerators per node.")

    @property
    def present(self) -> bool:
        return self.vendor != "none" and self.count > 0


class KubernetesPod(_Strict):
    """Overrides of the Kubernetes Job's pod (target.scheduler: kubernetes)."""

    cpu: Annotated[float, Field(gt=0, le=MAX_CORES)] | None = Field(
        None, description="CPU request and limit per pod (default: the node's cores less the system reservation)."
    )
    memory_gib: Annotated[float, Field(gt=0, le=MAX_MEMORY_GIB)] | None = Field(
        None, description="Memory request and limit per pod in GiB (default: the node's memory less the reservation)."
    )
    image_pull_secret: str | None = Field(
        None, pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$",
        description="Name of the Secret holding the registry credentials (referenced, never inlined).",
    )
    data_claim: str | None = Field(
        None, pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$",
        description="PersistentVolumeClaim holding application.data.path, mounted there read-only.",
    )


class Target(_Strict):
    platform: Literal["hpc", "cloud"] = "hpc"
    cpu: CPU = Field(default_factory=CPU)
    accelerator: Accelerator | None = None
    scheduler: str = Field(
        "none", description="The batch scheduler the job is for, or none for a plain run.sh.",
        json_schema_extra=lambda schema: schema.update(enum=list(scheduler_names())),
    )
    nodes: Annotated[int, Field(gt=0, le=100_000)] = 1
    partition: str | None = Field(
        None, max_length=1024, description="Slurm partition or PBS queue (comma-separated for several)."
    )
    account: str | None = Field(None, max_length=1024)
    #: ``[D-]HH:MM:SS``: a stricter form of the job renderers' grammar (at most 99,999 days).
    walltime: str = Field("01:00:00", pattern=r"^(\d{1,5}-)?\d{1,3}:[0-5]\d:[0-5]\d$")
    interconnect_gbps: Annotated[float, Field(gt=0, le=MAX_GBPS)] | None = Field(
        None, description="Node-to-node bandwidth in Gbit/s (default: 100 on hpc, 25 on cloud)."
    )
    kubernetes: KubernetesPod = Field(default_factory=KubernetesPod)

    @field_validator("scheduler")
    @classmethod
    def _known_scheduler(cls, value: str) -> str:
        # The registry of scheduler modules is the one list of names.
        if value not in scheduler_names():
            raise ValueError(f"{_shown(value)} is not one of {', '.join(scheduler_names())}")
        return value

    @field_validator("partition", "account")
    @classmethod
    def _scheduler_token(cls, value: str | None) -> str | None:
        # They land on #SBATCH / #PBS lines, which no shell quotes: the job renderer's own grammar decides.
        if value is not None and not SCHEDULER_TOKEN.match(value):
            raise ValueError(f"{_shown(value)} may only use letters, digits and _.+@- (comma-separated)")
        return value

    @property
    def gpu(self) -> Accelerator | None:
        return self.accelerator if self.accelerator is not None and self.accelerator.present else None


class Container(_Strict):
    formats: list[ContainerFormat] = Field(default_factory=lambda: list(FORMATS), min_length=1)
    registry: str | None = Field(
        None, max_length=255, description="Image repository to push to, e.g. registry.example.org/team/app."
    )
    tag: str = Field("latest", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

    @field_validator("registry")
    @classmethod
    def _registry_ref(cls, value: str | None) -> str | None:
        if value is not None and not _REPO_RE.fullmatch(value):
            raise ValueError("must be a lower-case image repository like host:port/team/app (no tag)")
        return value

    @model_validator(mode="after")
    def _image_ref(self) -> Container:
        # The plan writes registry:tag into FROM lines and job files: check it with the renderer's own grammar.
        if self.registry is not None and not IMAGE_REF.match(f"{self.registry}:{self.tag}"):
            raise ValueError(
                f"registry: {_shown(self.registry)} with tag {_shown(self.tag)} is not an image reference "
                "like registry.example.org/team/app:tag"
            )
        return self


class Selection(_Strict):
    """Allow or deny lists per catalog category (ids)."""

    frameworks: list[str] | None = None
    compilers: list[str] | None = None
    libraries: list[str] | None = None
    precisions: list[str] | None = None
    layouts: list[str] | None = None


class Optimisation(_Strict):
    goal: Goal = "time_to_solution"
    allow: Selection = Field(default_factory=Selection)
    deny: Selection = Field(default_factory=Selection)
    top: Annotated[int, Field(gt=0, le=100)] = Field(5, description="How many ranked candidates the report lists.")
    tuning_trials: Annotated[int, Field(gt=0, le=100_000)] | None = Field(
        None, description="Trial budget of a tuned compiler's search (tvm-tuned), run in the image's build stage and "
        "counted in the time to solution; default: the catalog's.")


class AppSpec(_Strict):
    """The whole application description."""

    name: str = Field(description="Application name: letters, digits, '.', '_' or '-' (max 63).")
    application: Application
    target: Target = Field(default_factory=Target)
    container: Container = Field(default_factory=Container)
    optimisation: Optimisation = Field(default_factory=Optimisation)
    #: Directory of the spec file (resolves relative model paths); not part of the YAML.
    base_dir: Path = Field(default=Path("."), exclude=True)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError("use letters, digits, '.', '_' or '-' (start with a letter or digit, at most 63)")
        return value

    @model_validator(mode="after")
    def _formats_serve_the_scheduler(self) -> AppSpec:
        problem = scheduler_module(self.target.scheduler).format_problem(self.container.formats)
        if problem:
            raise ValueError(f"container.formats: {problem}")
        return self

    def model_path(self) -> Path | None:
        """Absolute path of the ONNX model, if the spec names one."""
        onnx = self.application.model.onnx
        return None if onnx is None else (self.base_dir / onnx).resolve()

    def code_paths(self) -> list[Path]:
        """Absolute paths of the application's code files and directories (``application.code``)."""
        return [(self.base_dir / path).resolve() for path in self.application.code]


def check_spec_files(spec: AppSpec) -> None:
    """Every file the spec ships must exist (one line per missing one)."""
    problems = [
        f"application.code.{i}: {str(given)!r} does not exist (looked for {path})"
        for i, (given, path) in enumerate(zip(spec.application.code, spec.code_paths(), strict=True))
        if not _exists(path)
    ]
    if problems:
        raise SpecError(*problems)


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # permission denied on a parent, a loop of links: not there for us
        return False


def json_schema() -> dict[str, Any]:
    """JSON Schema of the spec (for YAML editors)."""
    schema = AppSpec.model_json_schema()
    schema["properties"].pop("base_dir", None)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "appopt application spec"
    return schema


def load_spec(path: str | Path) -> AppSpec:
    """Read and validate a spec file; raises SpecError with one line per problem."""
    path = Path(path)
    try:
        with path.open("rb") as handle:  # bounded: /dev/zero or a 5 GB file is refused, not read
            raw = handle.read(4 * MAX_SPEC_CHARS + 1)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > 4 * MAX_SPEC_CHARS:
        raise SpecError(f"{path}: larger than {4 * MAX_SPEC_CHARS:,} bytes, the most a spec may be")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not UTF-8 text") from None
    return parse_spec(text, base_dir=path.resolve().parent, source=str(path))


def parse_spec(text: str, base_dir: Path = Path("."), source: str = "<spec>") -> AppSpec:
    """Validate spec text; ``source`` names it in messages."""
    data, lines = load_yaml(text, source)
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the spec must be a mapping with keys name, application, target, ...")
    try:
        return AppSpec.model_validate({**data, "base_dir": base_dir})
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        shown = errors[: SpecError.max_lines]  # 50,000 unknown keys: describe 20, count the rest
        raise SpecError(*_describe(shown, lines), more=len(errors) - len(shown)) from None


def _shown(value: str, limit: int = 60) -> str:
    """``repr(value)``, shortened with an ellipsis: error lines never echo a 100 KB value."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "…"


# --- error lines ---------------------------------------------------------------------------------------------------

_Path = tuple[str | int, ...]


def _describe(errors: list[ErrorDetails], lines: dict[_Path, int]) -> list[str]:
    messages = []
    for err in errors:
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in _UNION_TAGS))
        dotted = ".".join(str(p) for p in loc) or "spec"
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + _suggest(loc)
        elif err["type"] == "missing":
            msg = "required field is missing"
        else:
            msg = str(err["msg"]).removeprefix("Value error, ")
            loc, msg = _located(loc, msg)
            dotted = ".".join(str(p) for p in loc) or "spec"
        line = _nearest_line(loc, lines)
        messages.append(f"{dotted}: {msg}" + (f" (line {line})" if line else ""))
    return messages


# pydantic inserts these tags into error locations for constrained/union types; users never wrote them.
_UNION_TAGS = {"constrained-int", "constrained-float", "int", "float", "str", "list[constrained-int]"}


def _nearest_line(loc: _Path, lines: dict[_Path, int]) -> int | None:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


_FIELD_PREFIX = re.compile(r"^([a-z_]+(?:\.[a-z_]+)*): (.*)$", re.DOTALL)


def _located(loc: _Path, msg: str) -> tuple[_Path, str]:
    """A cross-field check of a model says which of its fields is wrong as ``field: message``: locate it there."""
    match = _FIELD_PREFIX.match(msg)
    model = _model_at(loc)
    if match is None or model is None or match.group(1).split(".")[0] not in model.model_fields:
        return loc, msg
    return (*loc, *match.group(1).split(".")), match.group(2)


def _model_at(loc: _Path) -> type[BaseModel] | None:
    """The spec model that ``loc`` names (None for a list item or a scalar field)."""
    model: type[BaseModel] | None = AppSpec
    for part in loc:
        if model is None or not isinstance(part, str):
            return None
        field = model.model_fields.get(part)
        model = _model_of(field.annotation) if field is not None else None
    return model


def _suggest(loc: _Path) -> str:
    """" (did you mean 'x'?)" for an unknown key close to a known one at the same place."""
    model = _model_at(loc[:-1])
    if model is None:
        return ""
    known = [k for k in model.model_fields if k != "base_dir"]
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(known)})"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None
