"""Named architectures built as ONNX in code (no torchvision, no downloads), so an image can train one by name.

Outside ``runtime.training`` so the planner can read ``ARCHITECTURES`` without importing the trainer.

``python -m runtime train --arch resnet50`` builds the graph here, with seeded random weights, and trains it like any
ONNX model (with this runtime or ``--engine torch``). Parameter counts equal the reference definitions':

* the ResNets follow torchvision's layout (v1.5: the stride sits in the bottleneck's 3x3 convolution; ResNet-50:
  25,557,032);
* MobileNetV2 is torchvision's (width 1.0: 3,504,872), ReLU6 written ``Relu(x) - Relu(x - 6)`` (the same values; the
  runtime's autodiff has no rule for Clip) and its classifier's Dropout left out (the identity at inference);
* BERT-Base and -Large are Hugging Face's ``BertForSequenceClassification`` (post-LN encoder, exact GELU through
  Erf, pooler on the first token; 109,482,240 + the classifier for Base), without dropout, and with every
  sequence's token type 0. Their input is ``[batch, length]`` token ids (int64); ``--image-size`` is the length.

>>> model = build_architecture("resnet18", classes=10, image_size=32)   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
#: MobileNetV2's inverted residual stages (Sandler et al. 2018, Table 2): expansion, channels, repeats, stride.
_MOBILENET_V2: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)
)  # fmt: skip


@dataclass(frozen=True)
class EncoderShape:
    """A BERT encoder's shape (Devlin et al. 2019), by default with BERT's uncased vocabulary and 512 positions."""

    layers: int
    hidden: int
    heads: int
    vocab: int = 30522
    positions: int = 512


#: Token types of BERT's segment embedding (every synthetic sequence is segment 0).
TOKEN_TYPES = 2


_BERTS = {"bert_base": EncoderShape(12, 768, 12), "bert_large": EncoderShape(24, 1024, 16)}
#: Architectures this module builds (the catalog's ids).
ARCHITECTURES: tuple[str, ...] = (*_RESNETS, "mobilenet_v2", *_BERTS)
#: Inputs ``[batch, 3, image_size, image_size]`` (token ids ``[batch, length]`` for BERT) named so; outputs
#: ``logits`` ``[batch, classes]``.
INPUT, OUTPUT = "input", "logits"


def takes_tokens(name: str) -> bool:
    """Whether ``name``'s input is token ids ``[batch, length]`` rather than images."""
    return name in _BERTS


@dataclass
class _Graph:
    """Nodes and seeded initializers of a graph under construction."""

    rng: np.random.Generator
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: dict[str, np.ndarray] = field(default_factory=dict)

    def node(self, op: str, inputs: list[str], name: str, **attrs: Any) -> str:
        """Append ``op`` with one output named ``name``; returns it."""
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        """An initializer the trainers leave untrained (0-d floats, integer tensors)."""
        self.inits[name] = value
        return name

    def conv(self, x: str, name: str, c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1) -> str:
        """Conv without bias, He-normal (fan-out) weights as torchvision initialises them."""
        w = self.rng.standard_normal((c_out, c_in // groups, k, k), dtype=np.float32)
        self.inits[f"{name}.weight"] = w * np.float32(np.sqrt(2.0 / (c_out * k * k)))
        pad = k // 2
        return self.node(
            "Conv", [x, f"{name}.weight"], name, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
            group=groups,
        )  # fmt: skip

    def bn(self, x: str, name: str, c: int, relu: bool) -> str:
        stats = {"weight": 1.0, "bias": 0.0, "running_mean": 0.0, "running_var": 1.0}
        for key, value in stats.items():
            self.inits[f"{name}.{key}"] = np.full(c, value, np.float32)
        inputs = [x, *(f"{name}.{key}" for key in stats)]
        self.node("BatchNormalization", inputs, name, epsilon=1e-5, momentum=0.9)
        return self.relu(name) if relu else name

    def relu(self, x: str) -> str:
        return self.node("Relu", [x], f"{x}.relu")

    def relu6(self, x: str) -> str:
        """min(max(x, 0), 6) as ``Relu(x) - Relu(x - 6)``."""
        six = self.const("six", np.array(6.0, np.float32))
        over = self.relu(self.node("Sub", [x, six], f"{x}.minus6"))
        return self.node("Sub", [self.relu(x), over], f"{x}.relu6")

    def linear(self, x: str, name: str, n_in: int, n_out: int, out: str | None = None) -> str:
        """``x @ W + b`` (W ``[n_in, n_out]``), BERT's initialisation: normal(0, 0.02) weights, zero bias."""
        self.inits[f"{name}.weight"] = self.rng.standard_normal((n_in, n_out), dtype=np.float32) * np.float32(0.02)
        self.inits[f"{name}.bias"] = np.zeros(n_out, np.float32)
        return self.node("Add", [self.node("MatMul", [x, f"{name}.weight"], f"{name}.mm"), f"{name}.bias"], out or name)

    def layer_norm(self, x: str, name: str, width: int) -> str:
        self.inits[f"{name}.weight"] = np.ones(width, np.float32)
        self.inits[f"{name}.bias"] = np.zeros(width, np.float32)
        return self.node("LayerNormalization", [x, f"{name}.weight", f"{name}.bias"], name, axis=-1, epsilon=1e-12)

    def gelu(self, x: str) -> str:
        """The exact GELU, ``0.5 x (1 + erf(x / sqrt 2))`` (opset 17 has no Gelu op)."""
        root2 = self.const("sqrt2", np.array(np.sqrt(2.0), np.float32))
        one, half = self.const("one", np.array(1.0, np.float32)), self.const("half", np.array(0.5, np.float32))
        erf = self.node("Erf", [self.node("Div", [x, root2], f"{x}.scaled")], f"{x}.erf")
        gate = self.node("Mul", [self.node("Add", [erf, one], f"{x}.erf1"), half], f"{x}.gate")
        return self.node("Mul", [x, gate], f"{x}.gelu")


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
    return g.relu(g.node("Add", [y, short], f"{name}.add")), c_out


def _head(g: _Graph, x: str, channels: int, classes: int, std: float | None = None) -> str:
    """Global average pool, flatten, the classifier as torchvision holds it (``fc.weight`` ``[classes, channels]``):
    nn.Linear's uniform initialisation, or normal(0, ``std``) weights and zero bias."""
    flat = g.node("Flatten", [g.node("GlobalAveragePool", [x], "avgpool")], "flatten", axis=1)
    if std is None:
        bound = np.float32(1.0 / np.sqrt(channels))
        g.inits["fc.weight"] = g.rng.uniform(-bound, bound, (classes, channels)).astype(np.float32)
        g.inits["fc.bias"] = g.rng.uniform(-bound, bound, classes).astype(np.float32)
    else:
        g.inits["fc.weight"] = g.rng.standard_normal((classes, channels), dtype=np.float32) * np.float32(std)
        g.inits["fc.bias"] = np.zeros(classes, np.float32)
    return g.node("Gemm", [flat, "fc.weight", "fc.bias"], OUTPUT, transB=1)


def _resnet(g: _Graph, name: str, classes: int) -> str:
    stages, bottleneck = _RESNETS[name]
    x = g.bn(g.conv(INPUT, "conv1", 3, 64, 7, 2), "bn1", 64, relu=True)
    x = g.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, blocks in enumerate(stages):
        planes = 64 << stage
        for index in range(blocks):
            stride = 2 if stage > 0 and index == 0 else 1
            x, channels = _block(g, x, f"layer{stage + 1}.{index}", channels, planes, stride, bottleneck)
    return _head(g, x, channels, classes)


def _mobilenet_v2(g: _Graph, classes: int) -> str:
    """torchvision's MobileNetV2: stem, 17 inverted residuals, the 1x1 to 1280 channels, the classifier."""
    x = g.relu6(g.bn(g.conv(INPUT, "features.0", 3, 32, 3, 2), "features.0.bn", 32, relu=False))
    c_in, index = 32, 1
    for expand, c_out, repeats, first_stride in _MOBILENET_V2:
        for i in range(repeats):
            name, stride, hidden = f"features.{index}", first_stride if i == 0 else 1, c_in * expand
            y = x
            if expand != 1:
                y = g.relu6(g.bn(g.conv(y, f"{name}.expand", c_in, hidden, 1), f"{name}.expand.bn", hidden, False))
            y = g.conv(y, f"{name}.dw", hidden, hidden, 3, stride, groups=hidden)
            y = g.relu6(g.bn(y, f"{name}.dw.bn", hidden, relu=False))
            y = g.bn(g.conv(y, f"{name}.project", hidden, c_out, 1), f"{name}.project.bn", c_out, relu=False)
            x = g.node("Add", [x, y], f"{name}.add") if stride == 1 and c_in == c_out else y
            c_in, index = c_out, index + 1
    x = g.relu6(g.bn(g.conv(x, f"features.{index}", c_in, 1280, 1), f"features.{index}.bn", 1280, relu=False))
    return _head(g, x, 1280, classes, std=0.01)


def _bert(g: _Graph, shape: EncoderShape, classes: int, length: int) -> str:
    """Embeddings (token + position + type 0, LayerNorm), post-LN encoder layers, tanh pooler on the first token."""
    h, heads = shape.hidden, shape.heads
    for table, rows in (("word", shape.vocab), ("position", shape.positions), ("token_type", TOKEN_TYPES)):
        g.inits[f"embeddings.{table}"] = g.rng.standard_normal((rows, h), dtype=np.float32) * np.float32(0.02)
    positions = g.const("position_ids", np.arange(length, dtype=np.int64))
    types = g.const("token_type_ids", np.zeros(1, np.int64))
    x = g.node("Gather", ["embeddings.word", INPUT], "embeddings.tokens")
    x = g.node("Add", [x, g.node("Gather", ["embeddings.position", positions], "embeddings.pos")], "embeddings.sum")
    x = g.node("Add", [x, g.node("Gather", ["embeddings.token_type", types], "embeddings.type")], "embeddings.all")
    x = g.layer_norm(x, "embeddings.norm", h)
    split = g.const("heads_shape", np.array([0, length, heads, h // heads], np.int64))
    merge = g.const("hidden_shape", np.array([0, length, h], np.int64))
    scale = g.const("score_scale", np.array(1.0 / np.sqrt(h // heads), np.float32))
    for layer in range(shape.layers):
        name = f"encoder.{layer}"

        def heads_of(part: str, perm: list[int], x: str = x, name: str = name) -> str:
            y = g.node("Reshape", [g.linear(x, f"{name}.{part}", h, h), split], f"{name}.{part}.split")
            return g.node("Transpose", [y], f"{name}.{part}.heads", perm=perm)

        q, k, v = heads_of("query", [0, 2, 1, 3]), heads_of("key", [0, 2, 3, 1]), heads_of("value", [0, 2, 1, 3])
        scores = g.node("Mul", [g.node("MatMul", [q, k], f"{name}.qk"), scale], f"{name}.scores")
        mixed = g.node("MatMul", [g.node("Softmax", [scores], f"{name}.attn", axis=-1), v], f"{name}.mixed")
        mixed = g.node("Transpose", [mixed], f"{name}.mixed.t", perm=[0, 2, 1, 3])
        mixed = g.node("Reshape", [mixed, merge], f"{name}.mixed.merged")
        attended = g.node("Add", [x, g.linear(mixed, f"{name}.attention_out", h, h)], f"{name}.residual1")
        x = g.layer_norm(attended, f"{name}.norm1", h)
        inner = g.gelu(g.linear(x, f"{name}.intermediate", h, 4 * h))
        x = g.layer_norm(g.node("Add", [x, g.linear(inner, f"{name}.output", 4 * h, h)], f"{name}.residual2"),
                         f"{name}.norm2", h)  # fmt: skip
    first = g.node("Gather", [x, g.const("first_token", np.array(0, np.int64))], "pooler.first", axis=1)
    pooled = g.node("Tanh", [g.linear(first, "pooler", h, h)], "pooler.tanh")
    return g.linear(pooled, "classifier", h, classes, out=OUTPUT)


def build_architecture(name: str, *, classes: int = 1000, image_size: int = 224, seed: int = 0) -> onnx.ModelProto:
    """``name`` (one of ``ARCHITECTURES``) as an opset-17 ONNX model with seeded random weights, input
    ``[batch, 3, image_size, image_size]`` (BERT: ``[batch, image_size]`` token ids); raises RuntimeModelError
    naming the flag of a bad setting."""
    if name not in ARCHITECTURES:
        raise RuntimeModelError(f"--arch: {name!r} is not built in; known: {', '.join(ARCHITECTURES)}")
    if name in _BERTS:
        return encoder_classifier(_BERTS[name], classes=classes, length=image_size, seed=seed, name=name)
    _check_classes(classes)
    if image_size < 32:
        raise RuntimeModelError(f"--image-size: {image_size}; {name} needs at least 32 pixels (it downsamples 32x)")
    g = _Graph(np.random.default_rng(seed))
    if name == "mobilenet_v2":
        _mobilenet_v2(g, classes)
    else:
        _resnet(g, name, classes)
    images = helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["batch", 3, image_size, image_size])
    return _model(g, name, images, classes)


def encoder_classifier(
    shape: EncoderShape, *, classes: int, length: int, seed: int = 0, name: str = "encoder_classifier"
) -> onnx.ModelProto:
    """A BERT-like encoder classifier of ``shape`` over ``[batch, length]`` token ids (int64), as an opset-17 ONNX
    model with seeded weights (``bert_base`` and ``bert_large`` are two shapes of it)."""
    _check_classes(classes)
    if not 1 <= length <= shape.positions:
        raise RuntimeModelError(f"--image-size: {length}; {name}'s sequence length is 1 to {shape.positions}")
    g = _Graph(np.random.default_rng(seed))
    _bert(g, shape, classes, length)
    return _model(g, name, helper.make_tensor_value_info(INPUT, TensorProto.INT64, ["batch", length]), classes)


def _check_classes(classes: int) -> None:
    if classes < 2:
        raise RuntimeModelError(f"--classes: {classes}; a classifier needs at least 2")


def _model(g: _Graph, name: str, source: onnx.ValueInfoProto, classes: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        g.nodes,
        name,
        [source],
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


def synthetic_tokens(
    samples: int, classes: int, length: int, vocab: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` seeded token sequences ``[N, length]`` in which the label's own token stands at one random place
    (tokens below ``classes`` mark the class, so the loss can fall): the token twin of ``synthetic_images``."""
    if samples < 1:
        raise RuntimeModelError(f"--synthetic: {samples}; give at least one sample")
    if classes >= vocab:
        raise RuntimeModelError(f"--classes: {classes}; synthetic tokens need fewer classes than the {vocab} tokens")
    rng = np.random.default_rng(seed)
    x = rng.integers(classes, vocab, (samples, length)).astype(np.int64)
    y = rng.integers(0, classes, samples).astype(np.int64)
    x[np.arange(samples), rng.integers(0, length, samples)] = y
    return x, y


def synthetic_inputs(name: str, samples: int, classes: int, size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded samples that fit ``name``'s input: images of ``size`` pixels, or token sequences of ``size`` tokens."""
    if name in _BERTS:
        return synthetic_tokens(samples, classes, size, _BERTS[name].vocab, seed)
    return synthetic_images(samples, classes, size, seed)
