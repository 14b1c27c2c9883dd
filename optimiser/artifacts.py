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
from typing import Any

from builders import RenderError
from builders.deployment import Deployment
from builders.image_build import SPEC_LABEL, save_deployment
from builders.kubernetes import GIB
from builders.render import render_artifacts
from builders.schedulers import scheduler_module
from optimiser.app_files import (
    CODE_DIR,
    DATA_DIR,
    ShippedFiles,
    check_app_files,
    copy_app_files,
    shipped_data,
)
from optimiser.catalog import load_catalog
from optimiser.catalog.models import Catalog, Install
from optimiser.errors import AppoptError, SpecError
from optimiser.output_dir import exclusive_output_dir
from optimiser.planner import runtime_architecture, trains_in_runtime
from optimiser.report import appopt_version, plan_to_dict, render_markdown, spec_digest
from optimiser.stages import Deployed, Plan
from runtime.engines import compiled_engines, image_engine

#: Where the model lives inside images.
IMAGE_APP_DIR = "/opt/app"
#: Our runtime's id in the catalog: the route whose image runs the model with ``python -m runtime``.
OUR_RUNTIME = "appopt-runtime"


def runner_engine(plan: Plan) -> str | None:
    """The ``python -m runtime run --engine`` value that runs the plan's ONNX model when the spec gives no command
    of its own (the runtime's sources then ship in the image as the runner, with the packages it imports): what the
    engine module of the route's framework and compiler declares (``runtime.engines``), None when none does."""
    route = plan.choice.route
    return image_engine(route.framework, route.compiler)


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
    trainer = _training_engine(plan, catalog)
    ships_runtime = ships_runtime_runner(plan, model_file, trainer)
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
    compile_argv, run_argv = _commands(plan, model_file, trainer, catalog)
    return Deployment(
        app_name=spec.name,
        base_image=choice.base_image,
        arch=target.arch,
        accelerator=target.device_key if gpu else None,
        gpus_per_node=gpus,
        apt_packages=tuple(dict.fromkeys(p for inst in installs for p in inst.apt)),
        pip_packages=tuple(dict.fromkeys(p for inst in installs for p in inst.pip)),
        pip_index_urls=tuple(dict.fromkeys(url for inst in installs for url in inst.pip_index)),
        run_steps=tuple(step for inst in installs for step in inst.run),
        env=tuple(sorted(env.items())),
        labels=tuple(_labels(plan).items()),
        model_file=model_file,
        app_files=(
            *(("runtime",) if ships_runtime else ()),
            *(f"{CODE_DIR}/{p.name}" for p in spec.application.code),
            *((DATA_DIR,) if shipped_data(spec) is not None else ()),
        ),
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
        launcher=scheduler_module(spec.target.scheduler).default_launcher if spec.target.nodes * tasks > 1 else None,
        **_pod_fields(plan),
    )


def _pod_fields(plan: Plan) -> dict[str, Any]:
    """The node's memory, the data path and the spec's Kubernetes pod settings (``builders.kubernetes`` uses them)."""
    target, pod = plan.spec.target, plan.spec.target.kubernetes
    memory = target.cpu.memory_gib * GIB if target.cpu.memory_gib else None
    if memory is None and plan.target.hardware.kind == "cpu":
        memory = plan.target.hardware.memory_bytes
    return {
        "node_memory_bytes": int(memory) if memory else None,
        "pod_cpu": pod.cpu,
        "pod_memory_bytes": int(pod.memory_gib * GIB) if pod.memory_gib else None,
        "image_pull_secret": pod.image_pull_secret,
        "data_path": plan.spec.application.data.path if plan.spec.application.data else None,
        "data_claim": pod.data_claim,
    }


def _in_app_dir(argv: list[str], shipped: set[str]) -> tuple[str, ...]:
    """``argv`` with every word that names a shipped code file or directory (``train.py``, ``src/main.py``) made an
    absolute path in the image's app directory: jobs run in the submission directory, not in the app directory."""
    return tuple(f"{IMAGE_APP_DIR}/{word}" if word.split("/")[0] in shipped else word for word in argv)


def _commands(
    plan: Plan, model_file: str | None, trainer: str | None = None, catalog: Catalog | None = None
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """(build-stage compile argv, entrypoint argv) for the chosen route; ``trainer`` is its ``_training_engine``."""
    command = plan.spec.application.command
    user = _in_app_dir(command, {p.name for p in plan.spec.application.code}) if command else None
    framework = plan.choice.route.framework
    built_in = _built_in_architecture(plan, catalog or load_catalog())
    source = (f"{IMAGE_APP_DIR}/{model_file}",) if model_file is not None else built_in
    if framework == OUR_RUNTIME and source is not None and plan.spec.application.type == "training":
        return None, tuple(user) if user else _training_argv(plan, source)
    if framework == OUR_RUNTIME and model_file is not None:
        compiled = f"{IMAGE_APP_DIR}/compiled"
        compile_argv = ("python3", "-m", "runtime", "compile", f"{IMAGE_APP_DIR}/{model_file}", "-o", compiled)
        run_argv = tuple(user) if user else ("python3", "-m", "runtime", "run", compiled, "--random", "--repeat", "20")
        return compile_argv, run_argv
    if user:
        return None, tuple(user)
    if trainer is not None and source is not None:
        return None, (*_training_argv(plan, source), "--engine", trainer, *_layout_argv(plan, trainer))
    engine = runner_engine(plan)
    if engine is not None and model_file is not None:
        model = f"{IMAGE_APP_DIR}/{model_file}"
        if engine in compiled_engines():  # the engine's own artefact, made once in the build stage
            out = f"{IMAGE_APP_DIR}/compiled"
            engine_compile: tuple[str, ...] = ("python3", "-m", "runtime", "compile", model, "-o", out, "--engine",
                                               engine)
            if plan.choice.route.tuning_trials:  # a tuned route searches there with the plan's budget and batch
                engine_compile += ("--trials", str(plan.choice.route.tuning_trials), "--batch",
                                   str(plan.spec.application.batch_size))
            return engine_compile, ("python3", "-m", "runtime", "run", out, "--engine", engine, "--random",
                                    "--repeat", "20")
        return None, ("python3", "-m", "runtime", "run", model, "--engine", engine, "--random", "--repeat", "20")
    return None, ("python3",)


#: Where a training job writes the trained model and its checkpoints: relative, so in the job's working directory.
TRAINED_MODEL = "trained.onnx"
CHECKPOINTS = "checkpoints"


#: Batches of seeded synthetic samples a built-in architecture trains on when the spec names no data file.
SYNTHETIC_BATCHES = 4


def _layout_argv(plan: Plan, trainer: str) -> tuple[str, ...]:
    """``--layout`` of the route, for a trainer that runs more than one (``runtime.training.config.LAYOUTS``:
    PyTorch's, NHWC as channels_last) and a model with convolutions (elsewhere the plan ranks no layout)."""
    from runtime.training.config import LAYOUTS

    layout, runs = plan.choice.route.layout, LAYOUTS.get(trainer, ())
    return ("--layout", layout) if plan.layout_applies and len(runs) > 1 and layout in runs else ()


def _training_argv(plan: Plan, source: tuple[str, ...]) -> tuple[str, ...]:
    """``python -m runtime train`` of ``source`` (the model file, or ``--arch`` words) on the spec's data (seeded
    synthetic samples for a built-in architecture without a data file), resuming from the job directory's
    checkpoints when a previous (preempted) run left some."""
    app = plan.spec.application
    argv = ["python3", "-m", "runtime", "train", *source]
    shipped = shipped_data(plan.spec)
    if shipped is not None:  # shipped with the plan (optimiser.app_files)
        argv += ["--data", f"{IMAGE_APP_DIR}/{shipped}"]
    elif app.data is not None and app.data.path:
        argv += ["--data", app.data.path]
    elif source[0] == "--arch":
        argv += ["--synthetic", str(SYNTHETIC_BATCHES * app.batch_size)]
    argv += ["-o", TRAINED_MODEL, "--batch-size", str(app.batch_size), "--precision", plan.choice.route.precision]
    if app.data is not None:
        if not math.isfinite(app.data.epochs):  # the spec should refuse it first; never an OverflowError here
            raise SpecError(f"application.data.epochs: {app.data.epochs} is not a finite number of epochs")
        argv += ["--epochs", str(max(1, math.ceil(app.data.epochs)))]
    return (*argv, "--checkpoint", CHECKPOINTS, "--resume")


def deploy(plan: Plan, catalog: Catalog | None = None) -> Deployed:
    """Stage ``deployment``: what ``plan``'s image runs and where, with the notes about it added to the plan."""
    dep = deployment_from_plan(plan, catalog)
    return Deployed(plan=with_deployment_notes(plan, dep), deployment=dep)


def with_deployment_notes(plan: Plan, dep: Deployment | None = None, catalog: Catalog | None = None) -> Plan:
    """``plan`` with the notes about what its image will run (``_entrypoint_notes``) added once."""
    dep = dep or deployment_from_plan(plan, catalog)
    notes = [*plan.notes, *_entrypoint_notes(plan, dep)]
    try:
        notes += scheduler_module(dep.scheduler).notes(dep)  # e.g. the Kubernetes pod's size
    except RenderError as exc:  # a pod override too large: rendering reports it as an error
        notes.extend(exc.lines)
    return dataclasses.replace(plan, notes=tuple(dict.fromkeys(notes)))


def _entrypoint_notes(plan: Plan, dep: Deployment) -> list[str]:
    """Say so when the image cannot run the application by itself: no command, and nothing of ours runs it, or our
    trainer has no data to read."""
    app = plan.spec.application
    if app.command:
        return []
    if dep.run_argv[3:4] == ("train",):
        path = app.data.path if app.data is not None else None
        if "--synthetic" in dep.run_argv:
            samples = dep.run_argv[dep.run_argv.index("--synthetic") + 1]
            return [
                f"the image trains {dep.run_argv[5]} (built in, random initial weights) on {samples} seeded synthetic "
                "samples: a smoke and throughput run; set application.data.path to an .npz file (x/y arrays) to "
                "train on real data"
            ]
        if not path:
            return [
                "the image trains with `python -m runtime train`, which needs the data: set application.data.path "
                "to an .npz file on the target, or pass --data FILE.npz when submitting"
            ]
        if not path.endswith(".npz"):
            return [f"application.data.path {path!r}: appopt's runtime trains from .npz arrays (x_train/y_train, x/y)"]
        if shipped_data(plan.spec) is None and not Path(path).exists():
            return [
                f"application.data.path {path!r} is not on this machine: the job must find it there on the target "
                "(a path relative to the spec is shipped with the plan instead)"
            ]
        return []
    if dep.run_argv != ("python3",):
        return []
    return [
        f"the image starts a bare python3: the spec gives no application.command, and appopt runs only ONNX models "
        f"itself (with its runtime or onnxruntime), not {plan.choice.route.framework}; add a command (and ship its "
        f"script with application.code)"
    ]


def ships_runtime_runner(plan: Plan, model_file: str | None, trainer: str | None = None) -> bool:
    """Whether the image carries the runtime's sources: our runtime's route, the trainer of an ONNX model (a framework
    whose catalog entry ``trains_onnx``), or the runner of an ONNX model for a route with a ``runner_engine``, when
    the spec gives no command."""
    if plan.choice.route.framework == OUR_RUNTIME or trainer is not None:
        return True
    return model_file is not None and not plan.spec.application.command and runner_engine(plan) is not None


def _training_engine(plan: Plan, catalog: Catalog) -> str | None:
    """The ``runtime train --engine`` of a training plan for an ONNX model or a built-in architecture with no
    command, on a framework whose catalog entry names one (``trains_onnx``: PyTorch, TensorFlow), compiled where the
    runtime has that engine (``tensorflow-xla`` for TensorFlow's XLA route); None otherwise."""
    if not trains_in_runtime(plan.spec, catalog):
        return None
    engine = catalog.frameworks[plan.choice.route.framework].trains_onnx
    if engine is None or plan.choice.route.compiler in ("", "none"):
        return engine
    from runtime.training.config import ENGINES

    compiled = f"{engine}-{plan.choice.route.compiler}"
    return compiled if compiled in ENGINES else engine


def _built_in_architecture(plan: Plan, catalog: Catalog) -> tuple[str, ...] | None:
    """``--arch ID --image-size S`` for a training plan of a named architecture that ``runtime.architectures``
    builds, when the spec gives no command; None otherwise."""
    app = plan.spec.application
    if app.type != "training" or app.command:
        return None
    built = runtime_architecture(app.model.architecture, catalog)
    if built is None:
        return None
    return ("--arch", built, "--image-size", str(catalog.architectures[built].input_shape[-1]))


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
        SPEC_LABEL: spec_digest(plan),
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


def write_plan_outputs(
    plan: Plan,
    out_dir: Path,
    catalog: Catalog | None = None,
    *,
    force: bool = False,
    allow_outside_spec_dir: bool = False,
) -> list[Path]:
    """Write plan.json, plan.md, the model, the runtime sources (when the route needs them), the application's code
    and data, and the artifacts; return the paths written (top-level entries of ``out_dir``).

    ``out_dir`` is this plan's alone (``optimiser.output_dir``): a concurrent planner refuses, what the previous plan
    rendered is cleared, and a directory with files appopt did not write is refused unless ``force``.
    ``allow_outside_spec_dir`` lets ``application.code`` and ``data.path`` name files outside the spec's directory.
    """
    shipped = check_app_files(plan.spec, allow_outside_spec_dir)  # before anything is written
    return render_files(deploy(plan, catalog), out_dir, shipped, force=force)


def render_files(deployed: Deployed, out_dir: Path, shipped: ShippedFiles, *, force: bool = False) -> list[Path]:
    """Stage ``files``: write ``deployed``'s plan and artifacts with the ``shipped`` application files (checked by
    ``check_app_files``) into ``out_dir``; return the top-level entries written (see ``write_plan_outputs``)."""
    with exclusive_output_dir(out_dir, force=force) as staging:
        written = _write_plan_files(deployed.plan, deployed.deployment, shipped, staging)
    return [out_dir / path.relative_to(staging) for path in written]


def _write_plan_files(plan: Plan, dep: Deployment, shipped: ShippedFiles, out_dir: Path) -> list[Path]:
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
    written += copy_app_files(shipped, out_dir)
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


def _write_text(path: Path, text: str) -> Path:
    """Write ``text`` atomically with the mode the umask gives new files (mkstemp alone would leave 0600)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)
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
