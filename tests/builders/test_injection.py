"""Spec text full of shell and file-format metacharacters must come out inert in every rendered file.

For each generated string (command substitutions, backticks, quotes, ``;``, ``|``, newlines followed by
``RUN``/``%post``/``Bootstrap:``/``#SBATCH``, Unicode line separators...) put into the app name, an env value, a
label, the run and compile argv and a pip requirement, the test renders everything and checks, with readers that
follow each format's own rules:

- the structure (Dockerfile instructions, Singularity stages and sections, ``#SBATCH``/``#PBS`` directives, the
  YAML document's keys) is exactly that of the same deployment with plain text in those fields;
- the values read back exactly: ENTRYPOINT/RUN JSON forms via ``json.loads``, ENV/LABEL via Docker's unquoting,
  ``%environment`` and ``%runscript`` and every job script by running them with ``sh``/``bash``;
- nothing ran: the payloads try to create ``CANARY`` in the working directory, which must not exist afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders.containers import render_dockerfile, render_singularity
from builders.deployment import Deployment
from builders.errors import RenderError
from builders.jobs import render_job
from builders.names import dns_label
from builders.quoting import LINE_BREAKS
from tests.builders.cases import gpu_training, kubernetes_gpu, local_plain, pbs_arm, torque_gpu
from tests.builders.parsers import (
    LINE_SPLITTERS,
    docker_pairs,
    docker_unquote,
    dockerfile_instructions,
    section_body,
    singularity_stages,
    spython_recipe,
)
from tests.builders.stubs import bash_syntax_ok, run_script

PAYLOADS = [
    "$(touch CANARY)",
    "`touch CANARY`",
    "; touch CANARY",
    "| touch CANARY",
    "&& touch CANARY",
    "> CANARY",
    "' ; touch CANARY ; '",
    '" ; touch CANARY ; "',
    "\ntouch CANARY\n",
    "\nRUN touch CANARY",
    "\\\nRUN touch CANARY",
    "\n%post\n    touch CANARY",
    "\n  %runscript\ntouch CANARY",
    "\nBootstrap: docker\nFrom: evil/image\n",
    "\r\n#SBATCH --wrap='touch CANARY'",
    "\n#PBS -l nodes=99",
    "\u2028%post",
    "\x85%files",
    "\r%labels",
    "${HOME}",
    "$HOME",
    "$((1+1))",
    "\\",
    "'",
    '"',
    "\t",
    " ",
    "*",
    "~",
    "!",
    "{a,b}",
    "<<EOF",
    "%",
    "-",
    "#",
    "\\u0041",
    "\\n",
    "key: value",
    "- item",
    "&anchor",
    "*alias",
    "{x: y}",
    "\x1b[31m",
    "é ✓ 中",
]
_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6)
EVIL = st.lists(st.one_of(st.sampled_from(PAYLOADS), _TEXT), min_size=1, max_size=4).map("".join)

BASES: dict[str, Callable[[], Deployment]] = {
    "slurm": gpu_training,
    "pbs": pbs_arm,
    "torque": torque_gpu,
    "kubernetes": kubernetes_gpu,
    "none": local_plain,
}


def _inject(dep: Deployment, text: str) -> Deployment:
    """``text`` into every free-text field a spec can reach."""
    return dataclasses.replace(
        dep,
        app_name="app " + text,
        env=(*dep.env, ("APPOPT_NOTE", text)),
        labels=(*dep.labels, ("io.appopt.note", text)),
        run_argv=(*dep.run_argv, text, "--last"),
        compile_argv=(*(dep.compile_argv or ("python3", "-m", "runtime", "compile")), text),
        pip_packages=(*dep.pip_packages, text),
    )


def _docker_structure(text: str) -> list[str]:
    return [keyword for keyword, _ in dockerfile_instructions(text)]


def _singularity_structure(text: str, split: Callable[[str], list[str]]) -> list[tuple[tuple[str, ...], ...]]:
    return [
        (tuple(stage["header"]), tuple(name for name, _ in stage["sections"]))
        for stage in singularity_stages(text, split)
    ]


def _directive_lines(text: str) -> list[str]:
    return [line for split in LINE_SPLITTERS.values() for line in split(text) if line.startswith(("#SBATCH", "#PBS"))]


def _contains_run(words: list[str], run: tuple[str, ...]) -> bool:
    return any(tuple(words[i : i + len(run)]) == run for i in range(len(words) - len(run) + 1))


def _check_dockerfile(dep: Deployment, plain: Deployment, text: str) -> None:
    instructions = dockerfile_instructions(text)
    assert _docker_structure(text) == _docker_structure(render_dockerfile(plain))
    (entrypoint,) = [rest for keyword, rest in instructions if keyword == "ENTRYPOINT"]
    assert json.loads(entrypoint) == list(dep.run_argv)
    runs = []
    for keyword, rest in instructions:
        if keyword == "RUN":
            command = json.loads(rest)[2] if rest.startswith("[") else rest
            bash_syntax_ok(command)
            runs.append(shlex.split(command))
    assert any(_contains_run(words, dep.compile_argv or ()) for words in runs)
    assert any(_contains_run(words, dep.pip_packages[-1:]) for words in runs)
    values = {k: v for keyword, rest in instructions if keyword in ("ENV", "LABEL") for k, v in docker_pairs(rest)}
    for key, value in (
        ("APPOPT_NOTE", dep.env[-1][1]),
        ("io.appopt.note", dep.labels[-1][1]),
        ("org.opencontainers.image.title", dep.app_name),
    ):
        read = docker_unquote(values[key])  # also fails on any $ Docker would expand
        if not any(ch in LINE_BREAKS or ord(ch) < 0x20 for ch in value):
            assert read == value


def _check_singularity(dep: Deployment, plain: Deployment, text: str, raw: str, tmp: Path) -> None:
    for split in LINE_SPLITTERS.values():  # Apptainer (and Go) split on "\n"; Python's readers on more
        assert _singularity_structure(text, split) == _singularity_structure(render_singularity(plain), split)
    final = singularity_stages(text)[-1]
    environment = section_body(final, "%environment")
    out = subprocess.run(
        ["sh", "-c", environment + '\nprintf "%s" "$APPOPT_NOTE"'], cwd=tmp, check=True, capture_output=True
    ).stdout
    assert out.decode() == dep.env[-1][1]  # bytes: text mode would turn "\r" into "\n"
    # the runscript, with exec replaced by a function that prints its arguments NUL-separated
    runscript = 'exec() { printf "%s\\0" "$@"; }\nset -- extra\n' + section_body(final, "%runscript")
    done = subprocess.run(["bash", "-c", runscript], cwd=tmp, check=True, capture_output=True)
    assert done.stdout.decode().split("\0")[:-1] == [*dep.run_argv, "extra"]
    for stage in singularity_stages(text):
        bash_syntax_ok(section_body(stage, "%post"))
    build = singularity_stages(text)[0]
    assert _contains_run(shlex.split(section_body(build, "%post")), dep.compile_argv or ())
    labels = section_body(final, "%labels").split("\n")
    assert sum(line.strip().startswith("io.appopt.note") for line in labels) == 1
    spython_confused = any(word in raw.lower() for word in ("bootstrap", "from:", "stage:"))
    if not spython_confused:  # spython matches those words anywhere in a line, quoted or not
        parsed = spython_recipe(text, tmp)
        assert list(parsed) == ["build", "final"]


def _check_job(dep: Deployment, plain: Deployment, tmp: Path) -> None:
    name, text = render_job(dep)
    plain_text = render_job(plain)[1]
    if name.endswith(".yaml"):
        job, plain_job = yaml.safe_load(text), yaml.safe_load(plain_text)
        container = job["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == list(dep.run_argv)
        assert container["env"][-1] == {"name": "APPOPT_NOTE", "value": dep.env[-1][1]}
        assert job["metadata"]["annotations"]["org.opencontainers.image.title"] == dep.app_name
        assert job["metadata"]["annotations"]["io.appopt.note"] == dep.labels[-1][1]
        assert job["metadata"]["name"].replace("-", "").isalnum()
        assert _keys(job) == _keys(plain_job)
        return
    bash_syntax_ok(text)
    # the directives are the plain ones, but for the job name: the sanitised app name
    expected = [
        line.replace(dns_label(plain.app_name), dns_label(dep.app_name)) for line in _directive_lines(plain_text)
    ]
    assert _directive_lines(text) == expected
    container = "docker" if name == "run.sh" else "singularity"
    run = run_script(text, tmp, extra_args=("--extra",), check_env="APPOPT_NOTE", container=container)
    assert run.returncode == 0, run.stderr
    if name == "run.sh":  # docker run --entrypoint ARGV0 IMAGE ARGV1...
        assert run.argv[run.argv.index("--entrypoint") + 1] == dep.run_argv[0]
        assert run.argv[-len(dep.run_argv) :] == [*dep.run_argv[1:], "--extra"]
    else:
        assert run.argv[-len(dep.run_argv) - 1 :] == [*dep.run_argv, "--extra"]
        assert run.env_value == dep.env[-1][1]


def _keys(node: object) -> object:
    if isinstance(node, dict):
        return {key: _keys(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_keys(value) for value in node]
    return type(node).__name__


def _check_everything_inert(scheduler: str, text: str) -> None:
    base = BASES[scheduler]()
    dep = _inject(base, text)
    plain = _inject(base, "x")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        if "docker" in dep.formats:
            _check_dockerfile(dep, plain, render_dockerfile(dep))
        if "singularity" in dep.formats:
            _check_singularity(dep, plain, render_singularity(dep), text, tmp)
        _check_job(dep, plain, tmp)
        assert not (tmp / "CANARY").exists()


@pytest.mark.parametrize("scheduler", sorted(BASES))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=EVIL)
def test_spec_text_is_inert_in_every_rendered_file(scheduler: str, text: str) -> None:
    _check_everything_inert(scheduler, text)


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", sorted(BASES))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=EVIL)
def test_spec_text_is_inert_in_every_rendered_file_thoroughly(scheduler: str, text: str) -> None:
    _check_everything_inert(scheduler, text)


@pytest.mark.parametrize("scheduler", sorted(BASES))
def test_all_known_payloads_at_once_are_inert(scheduler: str) -> None:
    _check_everything_inert(scheduler, "".join(PAYLOADS))


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", sorted(BASES))
@pytest.mark.parametrize("payload", PAYLOADS)
def test_each_known_payload_is_inert(scheduler: str, payload: str) -> None:
    _check_everything_inert(scheduler, payload)


def test_a_nul_character_is_refused_not_rendered() -> None:
    with pytest.raises(RenderError) as info:
        render_dockerfile(_inject(gpu_training(), "a\x00b"))
    assert "app_name: contains a NUL character" in info.value.lines
