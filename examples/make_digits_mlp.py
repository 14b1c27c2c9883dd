"""Write examples/digits_mlp.onnx: a 64-128-64-10 MLP for scikit-learn's 8×8 digits, built in code.

The weights are seeded random (a training run is issue #7's job); the graph is what matters for planning.
Run: ``python examples/make_digits_mlp.py``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    sizes = [64, 128, 64, 10]
    nodes, inits = [], []
    x = "input"
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        w = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2 / fan_in)).astype(np.float32)
        b = np.zeros(fan_out, np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        y = f"h{i}"
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [y], name=f"fc{i}"))
        if i < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [y], [f"r{i}"], name=f"relu{i}"))
            y = f"r{i}"
        x = y
    nodes.append(helper.make_node("Softmax", [x], ["probabilities"], axis=1, name="softmax"))
    graph = helper.make_graph(
        nodes, "digits_mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="appopt-examples")
    model.ir_version = 8  # what opset 17 needs; newer IR versions are refused by released onnxruntime builds
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    out = Path(__file__).with_name("digits_mlp.onnx")
    onnx.save(build(), out)
    print(f"wrote {out}")
