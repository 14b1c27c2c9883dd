"""Files the runtime reads are verified, not trusted (issue 21): artifact manifests, external data fields, opsets,
declared shapes and strings. Every refusal is the runtime's own one-line error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from runtime import ModelCheckError, RuntimeModelError, UnsupportedOpError, compile_model
from runtime.artifact import MANIFEST_FILE, MODEL_FILE, file_sha256, load_artifact, save_artifact
from runtime.errors import MAX_MESSAGE_CHARS
from runtime.tools import run_model
from tests.runtime.graphs import F, const, model, vi


def _conv() -> onnx.ModelProto:
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3])
    w = np.ones((2, 1, 3, 3), np.float32)
    return model([node], [vi("x", F, [1, 1, 6, 6])], [vi("y", F, None)], [const("w", w)])


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    out = tmp_path / "compiled"
    save_artifact(compile_model(_conv(), passes=[]), out)
    return out


def _edit_manifest(path: Path, **fields: Any) -> None:
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    manifest.update(fields)
    (path / MANIFEST_FILE).write_text(json.dumps(manifest))


def test_an_untouched_artifact_loads_fast(artifact: Path) -> None:
    exe = load_artifact(artifact)
    assert exe.stats["artifact"]["fast_load"] is True
    assert exe.run({"x": np.ones((1, 1, 6, 6), np.float32)})["y"].shape == (1, 2, 4, 4)


def test_a_model_changed_after_compile_is_refused(artifact: Path) -> None:
    proto = onnx.load(artifact / MODEL_FILE)
    proto.graph.node[0].attribute[0].ints[:] = [5, 5]
    onnx.save(proto, artifact / MODEL_FILE)
    with pytest.raises(RuntimeModelError, match="does not match the digest"):
        load_artifact(artifact)


def test_a_forged_digest_does_not_skip_the_static_checks(artifact: Path) -> None:
    """The right runtime_version and a recomputed digest: the runtime's own checks still run on the fast path."""
    proto = onnx.load(artifact / MODEL_FILE)
    proto.graph.node[0].attribute[0].ints[:] = [5, 5]
    onnx.save(proto, artifact / MODEL_FILE)
    _edit_manifest(artifact, model_sha256=file_sha256(artifact / MODEL_FILE))
    with pytest.raises(ModelCheckError, match=r"node 'conv' \(Conv\): kernel_shape \[5, 5\] does not match"):
        load_artifact(artifact)


def test_an_artifact_without_a_digest_is_compiled_in_full(artifact: Path) -> None:
    manifest = json.loads((artifact / MANIFEST_FILE).read_text())
    del manifest["model_sha256"]
    (artifact / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert load_artifact(artifact).stats["artifact"]["fast_load"] is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "must hold a JSON object"),
        ('"appopt"', "must hold a JSON object"),
        ("{", "unreadable manifest.json"),
        ('{"format": "appopt-compiled-model", "format_version": NaN}', "NaN is not JSON"),
        ('{"format": "appopt-compiled-model", "format_version": "abc"}', "'format_version' must be a positive"),
        ('{"format": "appopt-compiled-model", "format_version": {"a": 1}}', "'format_version' must be a positive"),
        ('{"format": "appopt-compiled-model", "format_version": true}', "'format_version' must be a positive"),
        ('{"format": "appopt-compiled-model", "format_version": 1, "node_opsets": [1]}', "'node_opsets' must be"),
        ('{"format": "appopt-compiled-model", "format_version": 1, "node_opsets": {"n": "x"}}', "'node_opsets'"),
        ('{"format": "appopt-compiled-model", "format_version": 1, "node_opsets": {"n": 99999}}', "'node_opsets'"),
        ('{"format": "appopt-compiled-model", "format_version": 1, "model_sha256": 3}', "'model_sha256' must"),
        ('{"format": "appopt-compiled-model", "format_version": 1, "runtime_version": []}', "'runtime_version'"),
        ('{"format": "appopt-compiled-model", "format_version": 1, "stats": 5}', "'stats' must be an object"),
        ('{"format": ["x"], "format_version": 1}', "not an appopt compiled model"),
        ("[" * 100_000, "unreadable manifest.json"),
    ],
)
def test_malformed_manifests_are_refused_in_one_line(artifact: Path, text: str, message: str) -> None:
    (artifact / MANIFEST_FILE).write_text(text)
    with pytest.raises(RuntimeModelError, match=message) as info:
        compile_model(str(artifact))
    assert "\n" not in str(info.value)


def _external(tmp_path: Path, **fields: str) -> Path:
    w = const("w", np.ones(4, np.float32))
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": "w.bin", "offset": "0", "length": "16", **fields}
    for key, value in entries.items():
        w.external_data.add(key=key, value=value)
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", F, [4])], [vi("y", F, None)], [w])
    (tmp_path / "w.bin").write_bytes(np.arange(8, dtype=np.float32).tobytes())
    onnx.save(m, tmp_path / "m.onnx")
    return tmp_path / "m.onnx"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"offset": "abc"}, "offset 'abc' is not a non-negative integer"),
        ({"offset": ""}, "offset '' is not a non-negative integer"),
        ({"offset": "-1"}, "offset '-1' is not a non-negative integer"),
        ({"length": "1e9"}, "length '1e9' is not a non-negative integer"),
        ({"offset": "20"}, r"range \[20, 36\) is outside"),
        ({"location": "w\x00.bin"}, "contains a NUL character"),
        ({"location": "../w.bin"}, "escapes the model directory"),
        ({"location": "x" * 5000}, "characters long"),
        ({"bogus": "1"}, "unknown external data key 'bogus'"),
    ],
)
def test_external_data_fields_are_parsed_strictly(tmp_path: Path, fields: dict[str, str], message: str) -> None:
    with pytest.raises(ModelCheckError, match=message):
        compile_model(_external(tmp_path, **fields))


def test_valid_external_data_still_loads(tmp_path: Path) -> None:
    out = compile_model(_external(tmp_path, offset="16")).run({"x": np.zeros(4, np.float32)})["y"]
    np.testing.assert_array_equal(out, [4, 5, 6, 7])


@pytest.mark.parametrize("opset", [99, 2**31, 0])
def test_an_opset_beyond_what_the_runtime_supports_is_refused(opset: int) -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2])], [vi("y", F, None)])
    m.opset_import[0].version = opset
    with pytest.raises(UnsupportedOpError, match=f"ai.onnx opset {opset}"):
        compile_model(m)


def test_negative_declared_dims_are_refused_before_onnx_inference() -> None:
    """onnx's C++ Slice inference aborts the process (std::clamp assertion) on a negative input dim."""
    nodes = [helper.make_node("Slice", ["x", "s", "e"], ["y"])]
    inits = [const("s", [0], np.int64), const("e", [2], np.int64)]
    m = model(nodes, [vi("x", F, [4])], [vi("y", F, None)], inits)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
    with pytest.raises(ModelCheckError, match="dimension -1 is negative"):
        compile_model(m)


def test_a_string_that_is_not_utf8_is_refused() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", F, [2])], [vi("y", F, None)])
    data = bytearray(m.SerializeToString())
    at = data.index(b"Relu")
    data[at] = 0xFF
    with pytest.raises(ModelCheckError, match="not UTF-8"):
        compile_model(bytes(data))


@pytest.mark.parametrize("shape", [[2**31], [0, 2**62, 2**62]])
def test_random_inputs_of_a_huge_declared_shape_are_refused(tmp_path: Path, shape: list[int]) -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, shape)], [vi("y", F, None)])
    onnx.save(m, tmp_path / "m.onnx")
    with pytest.raises(RuntimeModelError, match=r"declared shape \[.*\] is too large for --random"):
        run_model(tmp_path / "m.onnx", random=True)


def test_error_messages_are_one_bounded_line() -> None:
    err = RuntimeModelError("first\nsecond\t" + "x" * 10_000)
    assert "\n" not in str(err) and str(err).startswith("first second x")
    assert len(str(err)) == MAX_MESSAGE_CHARS


def test_an_unforeseen_failure_is_one_line_with_its_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    """The safety net of compile and run: what no check foresaw is still the runtime's error, not a traceback."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("float() argument must be a string or a real number, not 'list'")

    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2])], [vi("y", F, None)])
    monkeypatch.setattr("runtime.passes.pipeline.run_passes", broken)
    with pytest.raises(ModelCheckError, match=r"^internal error while compiling the model: TypeError: float") as info:
        compile_model(m)
    assert isinstance(info.value.__cause__, TypeError)
    monkeypatch.undo()
    exe = compile_model(m)
    monkeypatch.setattr(exe, "_run", broken)
    with pytest.raises(RuntimeModelError, match=r"^internal error while running the model: TypeError"):
        exe.run({"x": np.zeros(2, np.float32)})
