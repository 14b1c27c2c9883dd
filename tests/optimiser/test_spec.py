"""The spec's public contract: accepted fields, and one clear line per problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from optimiser.errors import SpecError
from optimiser.spec import json_schema, load_spec, parse_spec

ISSUE_EXAMPLE = """\
name: resnet50-train
application:
  type: training            # training | inference
  model:
    architecture: resnet50  # a catalog architecture, or:
  batch_size: 64
  precision: auto           # auto | fp32 | fp16 | bf16 | int8
  framework: auto           # auto, or pin one from the catalog
target:
  platform: hpc             # hpc | cloud
  cpu: {arch: x86_64, model: xeon-8380, cores: 80}
  accelerator: {vendor: nvidia, model: a100, count: 4}
  scheduler: slurm          # slurm | pbs | torque | kubernetes | none
  nodes: 2
container:
  formats: [docker, singularity]
  registry: registry.example.org/team/app   # optional
optimisation:
  goal: time_to_solution    # latency | throughput | time_to_solution
  allow: {compilers: [xla, tvm, tensorrt]}
  deny:  {libraries: [mkl]}
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    assert info.value.exit_code == 2
    return list(info.value.lines)


def test_issue_example_is_accepted_field_for_field() -> None:
    spec = parse_spec(ISSUE_EXAMPLE)
    assert spec.application.type == "training"
    assert spec.application.model.architecture == "resnet50"
    assert spec.target.accelerator is not None and spec.target.accelerator.count == 4
    assert spec.target.cpu.cores == 80
    assert spec.container.formats == ["docker", "singularity"]
    assert spec.optimisation.allow.compilers == ["xla", "tvm", "tensorrt"]
    assert spec.optimisation.deny.libraries == ["mkl"]


def test_every_shipped_example_loads() -> None:
    examples = sorted(Path(__file__).parents[2].joinpath("examples").glob("*.yaml"))
    assert len(examples) >= 4
    for path in examples:
        assert load_spec(path).name


def test_unknown_key_suggests_the_close_one_with_its_line() -> None:
    lines = errors_of(ISSUE_EXAMPLE.replace("  batch_size: 64", "  batch_sise: 64"))
    assert lines == ["application.batch_sise: unknown key (did you mean 'batch_size'?) (line 6)"]


def test_unknown_key_far_from_any_lists_the_known_ones() -> None:
    (line,) = errors_of(ISSUE_EXAMPLE + "colour: blue\n")
    assert line.startswith("colour: unknown key (known keys: name, application, target")


def test_every_problem_gets_its_own_line() -> None:
    text = ISSUE_EXAMPLE.replace("count: 4", "count: -1").replace("goal: time_to_solution", "goal: fastest")
    lines = errors_of(text)
    assert len(lines) == 2
    assert lines[0].startswith("target.accelerator.count: ") and lines[0].endswith("(line 12)")
    assert lines[1].startswith("optimisation.goal: Input should be 'latency', 'throughput' or 'time_to_solution'")


def test_model_needs_exactly_one_source() -> None:
    both = ISSUE_EXAMPLE.replace("    architecture: resnet50", "    architecture: resnet50\n    onnx: m.onnx")
    (line,) = errors_of(both)
    assert line.startswith("application.model: give exactly one of 'architecture' or 'onnx'")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: [unclosed\n", "invalid YAML"),
        ("- just\n- a list\n", "the spec must be a mapping"),
        ("name: a\nname: b\napplication: {type: inference, model: {architecture: x}}\n", "duplicate key (line 2)"),
    ],
)
def test_malformed_yaml_is_one_line(text: str, expected: str) -> None:
    (line,) = errors_of(text)
    assert expected in line


def test_missing_file_and_binary_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "absent.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(tmp_path / "bin.yaml")


def test_onnx_path_is_relative_to_the_spec(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    spec_file = tmp_path / "sub" / "app.yaml"
    spec_file.write_text("name: x\napplication: {type: inference, model: {onnx: ../m.onnx}}\n")
    assert load_spec(spec_file).model_path() == (tmp_path / "m.onnx").resolve()


def test_schema_is_json_and_forbids_unknown_keys() -> None:
    schema = json_schema()
    json.dumps(schema)
    assert schema["additionalProperties"] is False
    assert "base_dir" not in schema["properties"]
    assert set(schema["required"]) == {"name", "application"}


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_name_is_either_accepted_safely_or_rejected_with_a_line(name: str) -> None:
    text = yaml.safe_dump({"name": name, "application": {"type": "inference", "model": {"architecture": "resnet50"}}})
    try:
        spec = parse_spec(text)
    except SpecError as exc:
        assert all(line.startswith(("name:", "<spec>:")) for line in exc.lines), exc.lines
    else:
        assert all(c.isalnum() or c in "._-" for c in spec.name)
