"""``appopt build``, ``push``, ``submit`` and ``status``: thin typer wrappers over ``builders``.

Failures the user can act on become one ``error: ...`` line and an exit code per family: 4 build (engine missing,
build failed), 5 push (registry refused or unreachable), 6 scheduler (client missing, submission refused).
``status --wait`` exits with the job's own exit code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from builders.errors import BuildError, PushError, SchedulerError
from optimiser.errors import AppoptError

# --- one plan, one image: build, push and submit check the spec digest ------------------------------------------


def _plan_digest(out: Path) -> str | None:
    """plan.json's ``spec_sha256``; None when OUT has no readable plan.json (a hand-made build context)."""
    import json

    try:
        digest = json.loads((out / "plan.json").read_text(encoding="utf-8")).get("spec_sha256")
    except (OSError, ValueError, AttributeError):
        return None
    return digest if isinstance(digest, str) else None


def check_deployment_matches_plan(out: Path) -> None:
    """Before a build: ``deployment.json`` (what the Dockerfile is re-rendered from) is the plan's own."""
    from builders.image_build import SPEC_LABEL, load_deployment

    planned = _plan_digest(out)
    dep = load_deployment(out) if planned else None
    if planned is None or dep is None:
        return
    rendered = dict(dep.labels).get(SPEC_LABEL)
    if rendered != planned:
        raise BuildError(
            f"{out}/deployment.json is from another spec (sha256 {str(rendered)[:12]}) than {out}/plan.json "
            f"({planned[:12]}); plan again: appopt plan SPEC -o {out}"
        )


def check_build_matches_plan(out: Path, error: type[AppoptError], required: bool) -> None:
    """Before a push or a submission: ``build.json`` records an image built from the plan's spec. Without a
    build.json, ``required`` says whether that is an error here (a push) or not (a job may run a pulled image)."""
    import json

    from builders.image_build import BUILD_RECORD

    planned = _plan_digest(out)
    record = out / BUILD_RECORD
    if planned is None or (not record.is_file() and not required):
        return
    try:
        built = json.loads(record.read_text(encoding="utf-8")).get("spec_sha256")
    except (OSError, ValueError, AttributeError):
        return  # a missing or unreadable record: the push itself says so
    if built != planned:
        was = f"from another spec (sha256 {built[:12]})" if isinstance(built, str) else "with no spec digest"
        raise error(
            f"{record} was built {was}, not from {out}/plan.json ({planned[:12]}); rebuild: appopt build {out}"
        )


def _printer(quiet: bool) -> Callable[[str], None]:
    return (lambda _line: None) if quiet else (lambda line: typer.echo(line))


OutArg = Annotated[
    Path, typer.Argument(help="A plan's output directory (from `appopt plan SPEC -o OUT`).", show_default=False)
]


def build_cmd(
    out: OutArg,
    engine: Annotated[
        str,
        typer.Option(
            help="auto | docker (any Docker Engine API via DOCKER_HOST) | buildah | podman | charliecloud | apptainer.",
        ),
    ] = "auto",
    tag: Annotated[
        str | None, typer.Option(help="Image reference to tag (default: the spec's registry:tag, else <name>:latest).")
    ] = None,
    platform: Annotated[str | None, typer.Option(help="Target platform, e.g. linux/amd64 or linux/arm64.")] = None,
    wheelhouse: Annotated[
        Path | None,
        typer.Option(
            help="Install Python requirements only from this directory of wheels (filled by pip download when empty).",
        ),
    ] = None,
    base_image: Annotated[str | None, typer.Option(help="Build on this base image instead of the plan's.")] = None,
    push: Annotated[bool, typer.Option("--push", help="Push the image to --tag after building.")] = False,
    insecure: Annotated[bool, typer.Option("--insecure", help="With --push: no TLS checks / plain HTTP.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the result, not the build output.")] = False,
) -> None:
    """Build OUT's Dockerfile into an image (log in OUT/logs/, record in OUT/build.json)."""
    from builders.image_build import build_plan_image, push_built_image

    say = _printer(quiet)
    check_deployment_matches_plan(out)
    if engine in ("charliecloud", "apptainer"):
        if push:
            raise BuildError(f"--push: {engine} images are files, not registry images; copy them instead")
        _build_hpc_image(out, engine, tag, base_image, wheelhouse, say)
        return
    record = build_plan_image(
        out, engine=engine, tag=tag, platform=platform, base_image=base_image, wheelhouse=wheelhouse, on_line=say
    )
    typer.echo(
        f"built {record.image} ({record.image_id[:19] or 'no id'}) with {record.engine_detail} "
        f"in {record.seconds:.1f} s; log {out / record.log}"
    )
    if push:
        result = push_built_image(out, record.image, insecure=insecure, on_line=say)
        typer.echo(f"pushed {result.ref} digest {result.digest}")


def _build_hpc_image(
    out: Path, engine: str, tag: str | None, base_image: str | None, wheelhouse: Path | None, say: Callable[[str], None]
) -> None:
    from builders import apptainer, charliecloud
    from builders.image_build import default_tag, prepare_build
    from builders.names import dns_label

    if engine == "apptainer":
        if base_image or wheelhouse:
            raise BuildError(
                "--engine apptainer builds Singularity.def as rendered; --base-image and --wheelhouse "
                "apply to Dockerfile builds"
            )
        result = apptainer.build_sif(out, on_line=say)
        if not result.available:
            raise BuildError(f"apptainer: {result.reason}")
        typer.echo(f"built {result.sif} with {result.binary} in {result.seconds:.1f} s")
        return
    prepared = prepare_build(out, base_image=base_image, wheelhouse=wheelhouse, on_line=say)
    name = tag or default_tag(out, prepared.deployment)
    image = charliecloud.build(
        out, prepared.dockerfile, name, log_path=out / "logs" / "build-charliecloud.log", on_line=say
    )
    sqfs = charliecloud.to_squashfs(image, out / f"{dns_label(name.split(':')[0].rsplit('/', 1)[-1])}.sqfs")
    typer.echo(
        f"built {sqfs.squashfs} with ch-image in {image.seconds:.1f} s; "
        f"run: ch-run --set-env {sqfs.squashfs} -- {' '.join(image.command)}"
    )


def push_cmd(
    out: OutArg,
    to: Annotated[
        str | None,
        typer.Option("--to", help="Destination registry/repository:tag (default: the tag it was built with)."),
    ] = None,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="Skip TLS verification; fall back to plain HTTP.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the result.")] = False,
) -> None:
    """Push the image `appopt build` made for OUT; print and verify its digest."""
    from builders.image_build import push_built_image

    check_build_matches_plan(out, PushError, required=True)
    result = push_built_image(out, to, insecure=insecure, on_line=_printer(quiet))
    typer.echo(
        f"pushed {result.ref} digest {result.digest} ({result.blobs_uploaded} blobs sent, "
        f"{result.blobs_present} already there, {result.retries} retries, {result.seconds:.1f} s)"
    )


def submit_cmd(out: OutArg) -> None:
    """Submit OUT's job script (sbatch for Slurm, qsub for PBS/Torque) and print the job id."""
    from builders.schedulers import submit_plan_job

    check_build_matches_plan(out, SchedulerError, required=False)
    scheduler, job_id = submit_plan_job(out)
    typer.echo(f"submitted job {job_id} to {scheduler.name}")
    typer.echo(job_id)


def status_cmd(
    job_id: Annotated[str, typer.Argument(help="The job id `appopt submit` printed.", show_default=False)],
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the job ends; exit with its exit code.")] = False,
    scheduler: Annotated[str, typer.Option(help="auto | slurm | pbs | torque.")] = "auto",
    poll: Annotated[float, typer.Option(help="Seconds between polls with --wait.", min=0.1)] = 2.0,
    timeout: Annotated[float | None, typer.Option(help="Give up waiting after this many seconds.", min=1)] = None,
) -> None:
    """Show a job's state (and exit code once it has finished)."""
    from builders.schedulers import get_scheduler

    sched = get_scheduler(scheduler)
    if not wait:
        current = sched.status(job_id)
    else:
        current = sched.wait(
            job_id,
            poll_seconds=poll,
            timeout_seconds=timeout,
            on_change=lambda s: None if s.finished else typer.echo(s.summary()),
        )
    typer.echo(current.summary())
    if current.stdout_path:
        typer.echo(f"output: {current.stdout_path}")
    if wait and current.shell_exit_code != 0:
        raise typer.Exit(current.shell_exit_code)


#: Where this module's commands sit in ``appopt --help`` (``cli.main.command_modules``).
ORDER = 30


def register(app: typer.Typer) -> None:
    """Add build, push, submit and status to the ``appopt`` app (errors through the CLI's ``user_errors``)."""
    from cli.errors import user_errors

    app.command("build")(user_errors(build_cmd))
    app.command("push")(user_errors(push_cmd))
    app.command("submit")(user_errors(submit_cmd))
    app.command("status")(user_errors(status_cmd))
