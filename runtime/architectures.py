"""Named architectures built as ONNX in code (no torchvision, no downloads), so an image can train one by name.

Outside ``runtime.training`` so the planner can read ``ARCHITECTURES`` without importing the trainer.

``python -m runtime train --arch resnet50`` builds the graph here, with seeded random weights, and trains it like any
ONNX model (with this runtime or ``--engine torch``). The ResNets follow torchvision's layout (v1.5: the stride sits
in the bottleneck's 3x3 convolution), so their parameter counts are torchvision's (ResNet-50: 25,557,032).

>>> model = build_architecture("resnet18", classes=10, image_size=32)   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from runtime.errors import RuntimeModelError

#: Blocks per stage and block kind of each ResNet (He et al. 2016, Table 1).
_RESNETS: dict[str, tuple[tuple[int, ...], bool]] = {
    "resnet18": ((2, 2, 2, 2), False),
    "resnet34": ((3, 4, 6, 3), False),
    "resnet50": ((3, 4, 6, 3), True),
    "resnet101": ((3, 4, 23, 3), True),
    "resnet152": ((3, 8, 36, 3), True),
}
#: Architectures this module builds (the catalog's ids).
ARCHITECTURES: tuple[str, ...] = tuple(_RESNETS)
#: Inputs ``[batch, 3, image_size, image_size]`` named so; outputs ``logits`` ``[batch, classes]``.
INPUT, OUTPUT = "input", "logits"


@dataclass
class _Graph:
    """Nodes and seeded initializers of a graph under construction."""

    rng: np.random.Generator
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: dict[str, np.ndarray] = field(default_factory=dict)

    def conv(self, x: str, name: str, c_in: int, c_out: int, k: int, stride: int = 1) -> str:
        """Conv without bias, He-normal (fan-out) weights as torchvision initialises them."""
        w = self.rng.standard_normal((c_out, c_in, k, k), dtype=np.float32) * np.float32(np.sqrt(2.0 / (c_out * k * k)))
        self.inits[f"{name}.weight"] = w
        pad = k // 2
        self.nodes.append(
            helper.make_node(
                "Conv", [x, f"{name}.weight"], [name], name=name, kernel_shape=[k, k], strides=[stride, stride],
                pads=[pad] * 4,
            )
        )  # fmt: skip
        return name

    def bn(self, x: str, name: str, c: int, relu: bool) -> str:
        stats = {"weight": 1.0, "bias": 0.0, "running_mean": 0.0, "running_var": 1.0}
        for key, value in stats.items():
            self.inits[f"{name}.{key}"] = np.full(c, value, np.float32)
        inputs = [x, *(f"{name}.{key}" for key in stats)]
        self.nodes.append(helper.make_node("BatchNormalization", inputs, [name], name=name, epsilon=1e-5, momentum=0.9))
        return self.relu(name) if relu else name

    def relu(self, x: str) -> str:
        self.nodes.append(helper.make_node("Relu", [x], [f"{x}.relu"], name=f"{x}.relu"))
        return f"{x}.relu"


def _block(g: _Graph, x: str, name: str, c_in: int, planes: int, stride: int, bottleneck: bool) -> tuple[str, int]:
    """One basic (two 3x3) or bottleneck (1x1, 3x3 with the stride, 1x1 x4) block with its shortcut."""
    c_out = planes * (4 if bottleneck else 1)
    if bottleneck:
        y = g.bn(g.conv(x, f"{name}.conv1", c_in, planes, 1), f"{name}.bn1", planes, relu=True)
        y = g.bn(g.conv(y, f"{name}.conv2", planes, planes, 3, stride), f"{name}.bn2", planes, relu=True)
        y = g.bn(g.conv(y, f"{name}.conv3", planes, c_out, 1), f"{name}.bn3", c_out, relu=False)
    else:
        y = g.bn(g.conv(x, f"{name}.conv1", c_in, planes, 3, stride), f"{name}.bn1", planes, relu=True)
        y = g.bn(g.conv(y, f"{name}.conv2", planes, planes, 3), f"{name}.bn2", planes, relu=False)
    short = x
    if stride != 1 or c_in != c_out:
        short = g.bn(g.conv(x, f"{name}.downsample.0", c_in, c_out, 1, stride), f"{name}.downsample.1", c_out, False)
    g.nodes.append(helper.make_node("Add", [y, short], [f"{name}.add"], name=f"{name}.add"))
    return g.relu(f"{name}.add"), c_out


def _resnet(g: _Graph, name: str, classes: int) -> str:
    stages, bottleneck = _RESNETS[name]
    x = g.bn(g.conv(INPUT, "conv1", 3, 64, 7, 2), "bn1", 64, relu=True)
    g.nodes.append(
        helper.make_node("MaxPool", [x], ["maxpool"], name="maxpool", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1])
    )  # fmt: skip
    x, channels = "maxpool", 64
    for stage, blocks in enumerate(stages):
        planes = 64 << stage
        for index in range(blocks):
            stride = 2 if stage > 0 and index == 0 else 1
            x, channels = _block(g, x, f"layer{stage + 1}.{index}", channels, planes, stride, bottleneck)
    g.nodes.append(helper.make_node("GlobalAveragePool", [x], ["avgpool"], name="avgpool"))
    g.nodes.append(helper.make_node("Flatten", ["avgpool"], ["flatten"], name="flatten", axis=1))
    bound = np.float32(1.0 / np.sqrt(channels))  # nn.Linear's default initialisation
    g.inits["fc.weight"] = g.rng.uniform(-bound, bound, (classes, channels)).astype(np.float32)
    g.inits["fc.bias"] = g.rng.uniform(-bound, bound, classes).astype(np.float32)
    g.nodes.append(helper.make_node("Gemm", ["flatten", "fc.weight", "fc.bias"], [OUTPUT], name="fc", transB=1))
    return OUTPUT


def build_architecture(name: str, *, classes: int = 1000, image_size: int = 224, seed: int = 0) -> onnx.ModelProto:
    """``name`` (one of ``ARCHITECTURES``) as an opset-17 ONNX model with seeded random weights, input
    ``[batch, 3, image_size, image_size]``; raises RuntimeModelError naming the flag of a bad setting."""
    if name not in ARCHITECTURES:
        raise RuntimeModelError(f"--arch: {name!r} is not built in; known: {', '.join(ARCHITECTURES)}")
    if classes < 2:
        raise RuntimeModelError(f"--classes: {classes}; a classifier needs at least 2")
    if image_size < 32:
        raise RuntimeModelError(f"--image-size: {image_size}; {name} needs at least 32 pixels (it downsamples 32x)")
    g = _Graph(np.random.default_rng(seed))
    _resnet(g, name, classes)
    graph = helper.make_graph(
        g.nodes,
        name,
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["batch", 3, image_size, image_size])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", classes])],
        [numpy_helper.from_array(v, k) for k, v in g.inits.items()],
    )
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="appopt-runtime")
    model.ir_version = helper.find_min_ir_version_for(opsets)
    return model


def synthetic_images(
    samples: int, classes: int, image_size: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` seeded images ``[N, 3, S, S]`` whose labels follow a fixed random pattern per class (so the loss
    can fall), for a run with no data of its own: a throughput and smoke run, not a measure of accuracy."""
    if samples < 1:
        raise RuntimeModelError(f"--synthetic: {samples}; give at least one sample")
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, samples).astype(np.int64)
    patterns = rng.standard_normal((classes, 3, 1, 1), dtype=np.float32)
    x = rng.standard_normal((samples, 3, image_size, image_size), dtype=np.float32) * np.float32(0.5)
    x += patterns[y]
    return x, y
