"""A scheduler is one module: a throwaway one, registered here and nowhere else, goes through the spec check, the
plan, ``appopt validate --strict``, the rendered files and ``appopt submit`` like the built-in ones; and a module
dropped into the ``builders`` package is found by the scan with no other edit.

The toy scheduler writes ``job.toy`` with ``#TOY`` directives, launches tasks with ``toyrun``, needs a SIF image,
adds a note to the plan and "submits" by checking the script's syntax with ``bash -n``.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import builders
from builders.batch import JobStatus, Scheduler, SchedulerModule
from builders.deployment import Deployment
from builders.errors import RenderError, SchedulerError
from builders.job_script import launch_prefix
from builders.jobs import render_job
from builders.quoting import shell_join
from builders.schedulers import built_in, register, rescan, scheduler_names, unregister
from cli.main import app
from optimiser.errors import SpecError
from optimiser.spec import json_schema, parse_spec
from tests.drop_in import dropped_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class ToyClient(Scheduler):
    name = "toy"
    client = "bash"

    def submit(self, script: Path) -> str:
        checked = subprocess.run(["bash", "-n", script.name], cwd=script.parent, capture_output=True, text=True)
        if checked.returncode != 0:
            raise SchedulerError(f"toy {script}: {checked.stderr.strip()}")
        return "toy-1"

    def status(self, job_id: str) -> JobStatus:
        return JobStatus(job_id, "COMPLETED", True, 0)


LAUNCHERS = {"toyrun": lambda dep: f"toyrun -n {dep.nodes * dep.tasks_per_node} "}


def _render(dep: Deployment) -> str:
    directives = [f"--nodes={dep.nodes}", f"--tasks={dep.tasks_per_node}", f"--time={dep.walltime}"]
    launch = launch_prefix(dep, LAUNCHERS, "toyrun")
    return "#!/bin/bash\n" + "".join(f"#TOY {d}\n" for d in directives) + launch + shell_join(dep.run_argv) + "\n"


TOY = SchedulerModule(
    name="toy", job_file="job.toy", render=_render, launchers=LAUNCHERS, default_launcher="toyrun",
    client=ToyClient, needs_format="singularity", needs_format_reason="a toy job runs a SIF image",
    notes=lambda dep: [f"toy queue: {dep.nodes} nodes"], check_rendered=lambda text: "toy job checked",
)


@pytest.fixture
def toy() -> Iterator[SchedulerModule]:
    register(TOY)
    try:
        yield TOY
    finally:
        unregister(TOY.name)


def _toy_spec(tmp_path: Path, formats: tuple[str, ...] = ("docker", "singularity")) -> Path:
    doc = yaml.safe_load((EXAMPLES / "onnx-mlp-local.yaml").read_text())
    doc["application"]["model"]["onnx"] = str(EXAMPLES / "digits_mlp.onnx")
    doc["target"] |= {"scheduler": "toy", "nodes": 2}
    doc["container"]["formats"] = list(formats)
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_an_unregistered_scheduler_is_refused_in_one_line_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(_toy_spec(tmp_path).read_text(), base_dir=tmp_path)
    assert len(info.value.lines) == 1
    assert info.value.lines[0].startswith(f"target.scheduler: 'toy' is not one of {', '.join(scheduler_names())} (line")


def test_the_spec_and_its_schema_accept_a_registered_scheduler(toy: SchedulerModule, tmp_path: Path) -> None:
    assert parse_spec(_toy_spec(tmp_path).read_text(), base_dir=tmp_path).target.scheduler == "toy"
    assert json_schema()["$defs"]["Target"]["properties"]["scheduler"]["enum"] == [*(m.name for m in built_in()), "toy"]
    with pytest.raises(SpecError) as info:
        parse_spec(_toy_spec(tmp_path, formats=("docker",)).read_text(), base_dir=tmp_path)
    assert info.value.lines[0].startswith("container.formats: a toy job runs a SIF image, so formats must include "
                                          "singularity")


def test_render_checks_the_launcher_against_the_scheduler_module(toy: SchedulerModule) -> None:
    dep = Deployment(app_name="x", base_image="debian:12", run_argv=("echo", "a b"), scheduler="toy", nodes=3,
                     launcher="toyrun")
    assert render_job(dep) == ("job.toy", "#!/bin/bash\n#TOY --nodes=3\n#TOY --tasks=1\n#TOY --time=01:00:00\n"
                                          "toyrun -n 3 echo 'a b'\n")
    with pytest.raises(RenderError, match="launcher: 'srun' does not run under the toy scheduler"):
        render_job(Deployment(app_name="x", base_image="debian:12", run_argv=("true",), scheduler="toy",
                              launcher="srun"))


def test_plan_validate_and_submit_go_through_the_registered_module(toy: SchedulerModule, tmp_path: Path) -> None:
    spec, out = _toy_spec(tmp_path), tmp_path / "out"
    runner = CliRunner()
    strict = runner.invoke(app, ["validate", "--strict", str(spec)])
    assert strict.exit_code == 0, strict.output
    assert "job.toy: toy job checked" in strict.output
    planned = runner.invoke(app, ["plan", str(spec), "-o", str(out)])
    assert planned.exit_code == 0, planned.output
    job = (out / "job.toy").read_text()
    assert job.startswith("#!/bin/bash\n#TOY --nodes=2\n") and "\ntoyrun -n 2 " in job  # the default launcher
    assert (out / "job.toy").stat().st_mode & 0o100
    assert "toy queue: 2 nodes" in json.loads((out / "plan.json").read_text())["notes"]
    submitted = runner.invoke(app, ["submit", str(out)])
    assert submitted.exit_code == 0, submitted.output
    assert "submitted job toy-1 to toy" in submitted.output
    assert json.loads((out / "jobs.json").read_text())[0]["script"] == "job.toy"


def test_built_in_schedulers_cannot_be_replaced_or_removed() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(built_in()[0])
    with pytest.raises(ValueError, match="built in"):
        unregister(built_in()[0].name)


def test_the_scan_lists_the_built_in_schedulers_in_their_declared_order() -> None:
    assert scheduler_names() == ("slurm", "pbs", "torque", "kubernetes", "none")


#: A whole scheduler module as a newcomer writes it: ``job.drop`` with ``#DROP`` lines, which the user hands to the
#: queue (no client: ``appopt submit`` says how).
DROPPED_MODULE = textwrap.dedent('''
    from __future__ import annotations

    from builders.batch import SchedulerModule
    from builders.deployment import Deployment
    from builders.quoting import shell_join


    def render(dep: Deployment) -> str:
        return f"#!/bin/bash\\n#DROP --nodes={dep.nodes}\\n{shell_join(dep.run_argv)}\\n"


    SCHEDULERS = (SchedulerModule(name="drop", job_file="job.drop", render=render, order=45,
                                  run_hint="hand {path} to the drop queue"),)
''')


@pytest.fixture
def dropped(tmp_path: Path) -> Iterator[str]:
    """``builders/appopt_drop_sched.py`` (in a second directory of the package's path), scanned afresh."""
    with dropped_module(builders, "appopt_drop_sched", DROPPED_MODULE, tmp_path / "pkg", rescan):
        yield "drop"


def test_a_scheduler_module_dropped_into_the_package_is_found_with_no_other_edit(dropped: str, tmp_path: Path) -> None:
    assert scheduler_names() == ("slurm", "pbs", "torque", "kubernetes", "drop", "none")  # its order: 45
    spec, out = _toy_spec(tmp_path), tmp_path / "out"
    spec.write_text(spec.read_text().replace("scheduler: toy", f"scheduler: {dropped}"))
    assert parse_spec(spec.read_text(), base_dir=tmp_path).target.scheduler == "drop"
    runner = CliRunner()
    planned = runner.invoke(app, ["plan", str(spec), "-o", str(out)])
    assert planned.exit_code == 0, planned.output
    assert (out / "job.drop").read_text().startswith("#!/bin/bash\n#DROP --nodes=2\n")
    submitted = runner.invoke(app, ["submit", str(out)])
    assert submitted.exit_code != 0 and f"hand {out / 'job.drop'} to the drop queue" in submitted.output


def test_a_dropped_module_leaves_the_registry_once_it_is_gone() -> None:
    assert "drop" not in scheduler_names()
