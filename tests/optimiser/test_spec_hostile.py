"""Hostile specs (issue 21): each ends in a few bounded, printable lines naming the field, never a traceback or hang."""

from __future__ import annotations

import doctest
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import apperrors
from cli.main import app
from optimiser import spec_yaml
from optimiser.errors import MAX_LINE_CHARS, AppoptError, SpecError
from optimiser.spec import load_spec, parse_spec
from optimiser.spec_yaml import MAX_SPEC_CHARS

BASE = "name: x\napplication:\n  type: inference\n  model: {architecture: resnet50}\n"
runner = CliRunner()


def errors_of(text: str) -> list[str]:
    started = time.monotonic()
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    assert time.monotonic() - started < 10, "a hostile spec must fail fast"
    return list(info.value.lines)


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    lines = ['l0: &l0 ["lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (billion_laughs(), "l1.0: YAML aliases (*name) are not allowed in a spec: write the value out (line 2)"),
        ("a: &a [*a]\n", "a.0: YAML aliases (*name) are not allowed in a spec: write the value out (line 1)"),
        (BASE + "target: &t {nodes: 2}\ncontainer: *t\n", "container: YAML aliases (*name) are not allowed"),
    ],
)
def test_aliases_are_refused_before_anything_expands_them(text: str, expected: str) -> None:
    (line,) = errors_of(text)
    assert line.startswith(expected)


@pytest.mark.parametrize("depth", [33, 1000, 12_000])
def test_deep_nesting_is_refused_in_one_line(depth: int) -> None:
    (line,) = errors_of("name: x\napplication: " + "[" * depth + "]" * depth + "\n")
    assert line == "application" + ".0" * 32 + ": nested deeper than 32 levels (line 2)"
    (line,) = errors_of("name: x\napplication: " + "{a: " * depth + "1" + "}" * depth + "\n")
    assert line.startswith("application.a.a.") and line.endswith(": nested deeper than 32 levels (line 2)")


def test_a_spec_as_deep_as_the_limit_still_parses_to_its_field_errors() -> None:
    (line,) = errors_of("name: x\napplication: " + "[" * 32 + "]" * 32 + "\n")
    assert line.startswith("application: Input should be a valid dictionary")


@pytest.mark.parametrize("digits", [41, 4301, 60_000])
def test_huge_integer_literals_are_refused_naming_the_field(digits: int) -> None:
    (line,) = errors_of(BASE + f"  batch_size: {'9' * digits}\n")
    assert line == f"application.batch_size: an integer of {digits:,} characters is too large (at most 40) (line 5)"


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("  data: {samples: 10, epochs: .inf}", "application.data.epochs: Input should be a finite number"),
        ("  data: {samples: 10, epochs: .nan}", "application.data.epochs: Input should be a finite number"),
        ("  data: {samples: 10, epochs: 1.0e+300}", "application.data.epochs: Input should be less than or equal"),
        ("  data: {samples: 1.0e+309}", "application.data.samples: "),
        ("  data: {samples: 10000000000000000000000000000000}", "application.data.samples: Input should be less"),
        ("target: {cpu: {cores: 1.0e+309}}", "target.cpu.cores: "),
        ("target: {cpu: {cores: 1e309}}", "target.cpu.cores: "),
        ("target: {cpu: {cores: 999999999999999999999}}", "target.cpu.cores: Input should be less than or equal"),
        ("target: {interconnect_gbps: -.inf}", "target.interconnect_gbps: "),
        ("target: {interconnect_gbps: 1.0e+300}", "target.interconnect_gbps: Input should be less than"),
        ("  data: {input_shape: [1, 2, 3, 4, 5, 6, 7, 8, 9]}", "application.data.input_shape: "),
    ],
)
def test_numbers_must_be_finite_and_in_range(field: str, expected: str) -> None:
    lines = errors_of(BASE + field + "\n")
    assert any(line.startswith(expected) for line in lines), lines


def test_the_largest_accepted_numbers_give_a_finite_plan_json(tmp_path: Path) -> None:
    spec = tmp_path / "big.yaml"
    spec.write_text(
        "name: big\napplication:\n  type: training\n  model: {architecture: resnet50}\n  batch_size: 1000000\n"
        "  data: {samples: 1000000000000000, epochs: 1000000}\n"
        "target:\n  cpu: {arch: x86_64, model: xeon-8380, cores: 1000000}\n  nodes: 100000\n"
        "  interconnect_gbps: 1000000\n  scheduler: slurm\n  walltime: '99999-999:59:59'\n"
    )
    result = runner.invoke(app, ["plan", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    plan = json.loads((tmp_path / "out" / "plan.json").read_text(), parse_constant=pytest.fail)
    assert plan


def test_thousands_of_problems_print_twenty_lines_and_a_count() -> None:
    text = BASE + "".join(f"k{i}: {i}\n" for i in range(5_000))
    lines = errors_of(text)
    assert len(lines) == 21
    assert lines[0] == "k0: unknown key (known keys: name, application, target, container, optimisation) (line 5)"
    assert lines[-1] == "… and 4,980 more"


@pytest.mark.parametrize(
    "field",
    [
        f"  framework: {'x' * 60_000}",
        f"  code: [{'x' * 60_000}!]",
        f"  {'k' * 60_000}: 1",
        f"target: {{partition: {'p q' * 20_000}}}",
    ],
)
def test_long_values_are_not_echoed_whole(field: str, tmp_path: Path) -> None:
    spec = tmp_path / "app.yaml"
    spec.write_text(BASE + field + "\n")
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 300, [len(line) for line in lines]


def test_a_spec_file_too_large_or_endless_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(BASE + "#" * (4 * MAX_SPEC_CHARS))
    with pytest.raises(SpecError, match="the most a spec may be"):
        load_spec(big)
    with pytest.raises(SpecError, match="a spec is at most"):
        parse_spec(BASE + "#" * MAX_SPEC_CHARS)
    if Path("/dev/zero").exists():
        with pytest.raises(SpecError, match="the most a spec may be"):
            load_spec("/dev/zero")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\x01\n", "<spec>: invalid YAML: special characters are not allowed (#x0001) (character 8)"),
        ("\x8aname: x\n", "<spec>: invalid YAML: special characters are not allowed (#x008a) (character 1)"),
        ("name: 'a\n  b: [ {", "<spec>: invalid YAML: while scanning a quoted scalar, found unexpected end of stream"),
        ("--- 1\n--- 2\n", "<spec>: invalid YAML: expected a single document in the stream, but found another"),
        (BASE + "  framework: 2020-13-45\n", "application.framework: cannot read '2020-13-45' as timestamp (line 5)"),
        (BASE + "  framework: !!float abc\n", "application.framework: cannot read 'abc' as float (line 5)"),
        (BASE + "  command: !!python/object:os.system [id]\n", "application.command: YAML tag"),
        (BASE + "  framework: !!python/name:os.system\n", "application.framework: could not determine a constructor"),
        (BASE + "  command: !!set {a, b}\n", "application.command: YAML tag tag:yaml.org,2002:set is not supported"),
        (BASE + "  ? [a, b]\n  : 1\n", "application: a key must be a plain name, not a list or mapping (line 5)"),
        (BASE + '  framework: "a\\0b"\n', "application.framework: contains a NUL character (line 5)"),
        (BASE + '  framework: "\\ud800"\n', "application.framework: contains an unpaired surrogate"),
        (BASE + '  "a\\0b": 1\n', "application: contains a NUL character (line 5)"),
        (BASE + '  "a\\nb\\e": 1\n', "application.a\\nb\\x1b: unknown key"),
    ],
)
def test_yaml_problems_are_one_printable_line(text: str, expected: str) -> None:
    (line,) = errors_of(text)
    assert line.startswith(expected), line
    assert line.isprintable()


@pytest.mark.parametrize(
    ("target", "container", "expected"),
    [
        ("{scheduler: slurm, partition: 'gpu debug'}", "{}", "target.partition: 'gpu debug' may only use"),
        ("{scheduler: pbs, account: '$(id)'}", "{}", "target.account: '$(id)' may only use"),
        ("{scheduler: slurm, partition: 'gpu,'}", "{}", "target.partition: 'gpu,' may only use"),
        ("{}", "{registry: 'a:b:c', tag: v1}", "container.registry: 'a:b:c' with tag 'v1' is not an image reference"),
        ("{}", "{registry: 'a/b..c'}", "container.registry: 'a/b..c' with tag 'latest' is not an image reference"),
        ("{scheduler: kubernetes}", "{formats: [singularity]}", "container.formats: a Kubernetes Job runs an OCI"),
        ("{walltime: '00:60:00'}", "{}", "target.walltime: String should match pattern"),
        ("{}", "{registry: " + "a." * 200 + "a}", "container.registry: String should have at most 255 characters"),
    ],
)
def test_validate_refuses_what_plan_o_would_refuse(target: str, container: str, expected: str, tmp_path: Path) -> None:
    spec = tmp_path / "app.yaml"
    spec.write_text(f"{BASE}target: {target}\ncontainer: {container}\n")
    for command in (["validate", str(spec)], ["plan", str(spec), "-o", str(tmp_path / "out")]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, (command, result.stderr)
        assert result.stderr.startswith(f"error: {expected}"), result.stderr
    assert not (tmp_path / "out").exists()


def test_error_lines_are_printable_bounded_and_counted() -> None:
    err = AppoptError("a\nb\x00\ud800", "x" * 10_000, *(f"k{i}" for i in range(100)))
    assert err.lines[0] == "a\\nb\\x00\\ud800"
    assert len(err.lines[1]) == MAX_LINE_CHARS and err.lines[1].endswith("…")
    assert len(err.lines) == 51 and err.lines[-1] == "… and 52 more"
    assert SpecError("a", more=5).lines == ("a", "… and 5 more")


@pytest.mark.parametrize("module", [spec_yaml, apperrors])
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module)  # type: ignore[arg-type]
    assert result.attempted > 0 and result.failed == 0


def test_a_non_finite_estimate_is_one_line_not_infinity_in_plan_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import optimiser.artifacts

    monkeypatch.setattr(optimiser.artifacts, "plan_to_dict", lambda plan: {"total_seconds": float("inf")})
    spec = tmp_path / "app.yaml"
    spec.write_text(BASE + "target: {cpu: {arch: x86_64, model: xeon-8380}}\n")
    result = runner.invoke(app, ["plan", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: plan.json: an estimate is not a finite number (it overflowed); not written"]
    assert not (tmp_path / "out" / "plan.json").exists()


def test_an_undefined_detail_figure_is_null_in_plan_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The shipped evaluation has no held-out regret for int8 (no route to rank): NaN, which plan.json wrote as NaN.
    import optimiser.artifacts

    fake = {"predicted": {"step_seconds": 0.5, "detail": {"heldout_mean_regret": float("nan"), "rmspe": 0.1}}}
    monkeypatch.setattr(optimiser.artifacts, "plan_to_dict", lambda plan: fake)
    spec = tmp_path / "app.yaml"
    spec.write_text(BASE + "target: {cpu: {arch: x86_64, model: xeon-8380}}\n")
    result = runner.invoke(app, ["plan", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    plan = json.loads((tmp_path / "out" / "plan.json").read_text(), parse_constant=pytest.fail)
    assert plan["predicted"] == {"step_seconds": 0.5, "detail": {"heldout_mean_regret": None, "rmspe": 0.1}}
