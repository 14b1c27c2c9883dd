"""From a plan to files: ``plan.json``, ``plan.md`` and the builders' Dockerfile, Singularity.def and job script."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from builders import RenderError
from builders.deployment import Deployment
from builders.image_build import save_deployment
from builders.render import render_artifacts
from optimiser.catalog import load_catalog
from optimiser.catalog.models import Catalog, Install
from optimiser.errors import AppoptError
from optimiser.planner import Plan
from optimiser.report import appopt_version, plan_to_dict, render_markdown, spec_digest
from optimiser.spec import AppSpec

#: Where the model lives inside images.
IMAGE_APP_DIR = "/opt/app"
#: Where the application's own code (``application.code``) is copied in the plan output (the build context).
CODE_DIR = "code"
#: Our runtime's id in the catalog: the route whose image runs the model with ``python -m runtime``.
OUR_RUNTIME = "appopt-runtime"
#: Frameworks whose plans for an ONNX model run it with ``python -m runtime run --engine ENGINE`` when the spec gives
#: no command of its own (the runtime's sources ship in the image as the runner, with the packages it imports).
RUNNER_ENGINES = {"onnxruntime": "onnxruntime"}
_LAUNCHERS = {"slurm": "srun", "pbs": "mpirun", "torque": "mpirun"}


def deployment_from_plan(plan: Plan, catalog: Catalog | None = None) -> Deployment:
    """Everything the builders need to render the chosen route, with all spec text passed as data."""
    catalog = catalog or load_catalog()
    spec, choice, target = plan.spec, plan.choice, plan.target
    route = choice.route
    key = target.image_key
    installs: list[Install] = [catalog.frameworks[route.framework].install.for_key(key)]
    if route.compiler in catalog.compilers:
        compiler = catalog.compilers[route.compiler]
        installs.append(compiler.install.for_key(key))
        if route.framework in compiler.install_with:
            installs.append(compiler.install_with[route.framework].for_key(key))
    installs += [catalog.libraries[lib].install.for_key(key) for lib in route.libraries]
    model_file = "model.onnx" if spec.application.model.onnx is not None else None
    ships_runtime = ships_runtime_runner(plan, model_file)
    if ships_runtime and route.framework != OUR_RUNTIME:
        installs.append(_runner_requirements(catalog, key, installs))
    gpu = spec.target.gpu
    gpus = gpu.count if gpu else 0
    cores = spec.target.cpu.cores or target.hardware.cores or 1
    tasks = max(gpus, 1)
    env = {k: v for inst in installs for k, v in inst.env.items()}
    env.setdefault("OMP_NUM_THREADS", str(max(cores // tasks, 1)))
    env["APPOPT_PRECISION"] = route.precision
    env["APPOPT_LAYOUT"] = route.layout
    compile_argv, run_argv = _commands(plan, model_file)
    return Deployment(
        app_name=spec.name,
        base_image=choice.base_image,
        arch=target.arch,
        accelerator=target.device_key if gpu else None,
        gpus_per_node=gpus,
        apt_packages=tuple(dict.fromkeys(p for inst in installs for p in inst.apt)),
        pip_packages=tuple(dict.fromkeys(p for inst in installs for p in inst.pip)),
        run_steps=tuple(step for inst in installs for step in inst.run),
        env=tuple(sorted(env.items())),
        labels=tuple(_labels(plan).items()),
        model_file=model_file,
        app_files=(*(("runtime",) if ships_runtime else ()), *(f"{CODE_DIR}/{p.name}" for p in spec.application.code)),
        app_dir=IMAGE_APP_DIR,
        compile_argv=compile_argv,
        run_argv=run_argv,
        formats=tuple(spec.container.formats),
        image_ref=f"{spec.container.registry}:{spec.container.tag}" if spec.container.registry else None,
        scheduler=spec.target.scheduler,
        nodes=spec.target.nodes,
        tasks_per_node=tasks,
        cpus_per_task=max(cores // tasks, 1),
        walltime=spec.target.walltime,
        partition=spec.target.partition,
        account=spec.target.account,
        launcher=_LAUNCHERS.get(spec.target.scheduler) if spec.target.nodes * tasks > 1 else None,
    )


def _in_app_dir(argv: list[str], shipped: set[str]) -> tuple[str, ...]:
    """``argv`` with every word that names a shipped code file or directory (``train.py``, ``src/main.py``) made an
    absolute path in the image's app directory: jobs run in the submission directory, not in the app directory."""
    return tuple(f"{IMAGE_APP_DIR}/{word}" if word.split("/")[0] in shipped else word for word in argv)


def _commands(plan: Plan, model_file: str | None) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """(build-stage compile argv, entrypoint argv) for the chosen route."""
    command = plan.spec.application.command
    user = _in_app_dir(command, {p.name for p in plan.spec.application.code}) if command else None
    framework = plan.choice.route.framework
    if framework == OUR_RUNTIME and model_file is not None and plan.spec.application.type == "training":
        return None, tuple(user) if user else _training_argv(plan, f"{IMAGE_APP_DIR}/{model_file}")
    if framework == OUR_RUNTIME and model_file is not None:
        compiled = f"{IMAGE_APP_DIR}/compiled"
        compile_argv = ("python3", "-m", "runtime", "compile", f"{IMAGE_APP_DIR}/{model_file}", "-o", compiled)
        run_argv = tuple(user) if user else ("python3", "-m", "runtime", "run", compiled, "--random", "--repeat", "20")
        return compile_argv, run_argv
    if user:
        return None, tuple(user)
    if framework in RUNNER_ENGINES and model_file is not None:
        model = f"{IMAGE_APP_DIR}/{model_file}"
        engine = RUNNER_ENGINES[framework]
        return None, ("python3", "-m", "runtime", "run", model, "--engine", engine, "--random", "--repeat", "20")
    return None, ("python3",)


#: Where a training job writes the trained model and its checkpoints: relative, so in the job's working directory.
TRAINED_MODEL = "trained.onnx"
CHECKPOINTS = "checkpoints"


def _training_argv(plan: Plan, model: str) -> tuple[str, ...]:
    """``python -m runtime train`` on the spec's data, resuming from the job directory's checkpoints when a
    previous (preempted) run left some."""
    app = plan.spec.application
    argv = ["python3", "-m", "runtime", "train", model]
    if app.data is not None and app.data.path:
        argv += ["--data", app.data.path]
    argv += ["-o", TRAINED_MODEL, "--batch-size", str(app.batch_size), "--precision", plan.choice.route.precision]
    if app.data is not None:
        argv += ["--epochs", str(max(1, math.ceil(app.data.epochs)))]
    return (*argv, "--checkpoint", CHECKPOINTS, "--resume")


def with_deployment_notes(plan: Plan, dep: Deployment | None = None, catalog: Catalog | None = None) -> Plan:
    """``plan`` with the notes about what its image will run (``_entrypoint_notes``) added once."""
    dep = dep or deployment_from_plan(plan, catalog)
    return dataclasses.replace(plan, notes=tuple(dict.fromkeys((*plan.notes, *_entrypoint_notes(plan, dep)))))


def _entrypoint_notes(plan: Plan, dep: Deployment) -> list[str]:
    """Say so when the image cannot run the application by itself: no command, and nothing of ours runs it, or our
    trainer has no data to read."""
    app = plan.spec.application
    if app.command:
        return []
    if dep.run_argv[3:4] == ("train",):
        path = app.data.path if app.data is not None else None
        if not path:
            return [
                "the image trains with `python -m runtime train`, which needs the data: set application.data.path "
                "to an .npz file on the target, or pass --data FILE.npz when submitting"
            ]
        if not path.endswith(".npz"):
            return [f"application.data.path {path!r}: appopt's runtime trains from .npz arrays (x_train/y_train, x/y)"]
        return []
    if dep.run_argv != ("python3",):
        return []
    return [
        f"the image starts a bare python3: the spec gives no application.command, and appopt runs only ONNX models "
        f"itself (with its runtime or onnxruntime), not {plan.choice.route.framework}; add a command (and ship its "
        f"script with application.code)"
    ]


def ships_runtime_runner(plan: Plan, model_file: str | None) -> bool:
    """Whether the image carries the runtime's sources: our runtime's route, or the runner of an ONNX model for a
    framework in ``RUNNER_ENGINES`` when the spec gives no command."""
    framework = plan.choice.route.framework
    if framework == OUR_RUNTIME:
        return True
    return framework in RUNNER_ENGINES and model_file is not None and not plan.spec.application.command


def _runner_requirements(catalog: Catalog, key: str, installs: list[Install]) -> Install:
    """The runtime's own packages (from the catalog's appopt-runtime entry) the route does not install already."""
    wanted = catalog.frameworks[OUR_RUNTIME].install.for_key(key)
    have = {_project(p) for inst in installs for p in inst.pip}
    return Install(pip=[p for p in wanted.pip if _project(p) not in have])


def _project(requirement: str) -> str:
    """``onnxruntime-gpu==1.19.2`` -> ``onnxruntime-gpu`` (normalised)."""
    name = requirement.split(";")[0]
    for mark in ("==", ">=", "<=", "~=", "!=", ">", "<", "["):
        name = name.split(mark)[0]
    return name.strip().lower().replace("_", "-")


def _labels(plan: Plan) -> dict[str, str]:
    p = plan.choice.prediction
    return {
        "org.opencontainers.image.title": plan.spec.name,
        "org.opencontainers.image.version": plan.spec.container.tag,
        "org.opencontainers.image.revision": git_revision(),
        "io.appopt.spec-sha256": spec_digest(plan),
        "io.appopt.route": plan.choice.route.key,
        "io.appopt.predicted-step-seconds": f"{p.step_seconds:.6g}",
        "io.appopt.predicted-samples-per-second": f"{p.samples_per_second:.6g}",
        "io.appopt.performance-model": p.basis,
        "io.appopt.version": appopt_version(),
    }


def git_revision() -> str:
    """The appopt source's git revision, or 'unknown' for an installed wheel outside a checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(Path(__file__).parent), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def write_plan_outputs(plan: Plan, out_dir: Path, catalog: Catalog | None = None) -> list[Path]:
    """Write plan.json, plan.md, the model, the runtime sources (when the route needs them) and the artifacts."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AppoptError(f"{out_dir}: cannot create output directory: {exc.strerror or exc}") from None
    dep = deployment_from_plan(plan, catalog)
    plan = with_deployment_notes(plan, dep)
    written = [
        _write_text(out_dir / "plan.json", _plan_json(plan)),
        _write_text(out_dir / "plan.md", render_markdown(plan)),
    ]
    model = plan.spec.model_path()
    if model is not None and dep.model_file is not None:
        shutil.copyfile(model, out_dir / dep.model_file)
        written.append(out_dir / dep.model_file)
    if "runtime" in dep.app_files:
        written.append(_copy_runtime_sources(out_dir))
    written += _copy_code(plan.spec, out_dir)
    try:
        written += render_artifacts(dep, out_dir)
    except RenderError as exc:
        raise AppoptError(*exc.lines, exit_code=2) from None
    written.append(save_deployment(dep, out_dir))  # `appopt build` re-renders from it (--base-image, --wheelhouse)
    return written


def _copy_runtime_sources(out_dir: Path) -> Path:
    """The runtime ships alone inside images: copy its package (pure Python) into the build context."""
    import runtime

    src = Path(runtime.__file__).parent
    dest = out_dir / "runtime"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _copy_code(spec: AppSpec, out_dir: Path) -> list[Path]:
    """Copy ``application.code`` into ``out_dir/code`` (replacing an earlier copy) for the image build."""
    dest = out_dir / CODE_DIR
    if dest.exists():
        shutil.rmtree(dest)
    copied = []
    for given, path in zip(spec.application.code, spec.code_paths(), strict=True):
        target = dest / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
            else:
                shutil.copy2(path, target)
        except OSError as exc:
            raise AppoptError(f"application.code: cannot copy {str(given)!r}: {exc.strerror or exc}") from None
        copied.append(target)
    return copied


def _write_text(path: Path, text: str) -> Path:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return path


def _plan_json(plan: Plan) -> str:
    """plan.json's text: strict JSON (JSON has no Infinity or NaN). A figure in a ``detail`` mapping that could not
    be computed (the held-out regret where no route could be ranked is NaN) is written as null; a non-finite
    estimate anywhere else is an error, not a number."""
    try:
        return json.dumps(_undefined_details_as_null(plan_to_dict(plan)), indent=2, allow_nan=False) + "\n"
    except ValueError:
        raise AppoptError("plan.json: an estimate is not a finite number (it overflowed); not written") from None


def _undefined_details_as_null(value: object, in_detail: bool = False) -> object:
    if isinstance(value, float) and in_detail and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _undefined_details_as_null(v, in_detail or k == "detail") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_undefined_details_as_null(v, in_detail) for v in value]
    return value
