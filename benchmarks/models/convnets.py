"""ResNet-18/50 and a MobileNetV2-like network, built as exported models look (BatchNorm folded into Conv)."""

from __future__ import annotations

import onnx

from benchmarks.models.graph import BATCH_DIM, GraphBuilder

#: Gain of the last conv of a residual branch: keeps the residual sum from growing with depth (random weights).
_RESIDUAL_GAIN = 0.3
NUM_CLASSES = 1000


def _stem(g: GraphBuilder) -> str:
    x = g.input("input", [BATCH_DIM, 3, 224, 224])
    x = g.relu(g.conv(x, 3, 64, 7, stride=2))
    return g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


def _head(g: GraphBuilder, x: str, channels: int) -> onnx.ModelProto:
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    logits = g.gemm(x, channels, NUM_CLASSES, gain=1.0)
    g.output(logits, [BATCH_DIM, NUM_CLASSES])
    return g.build()


def _basic_block(g: GraphBuilder, x: str, c_in: int, c_out: int, stride: int) -> str:
    y = g.relu(g.conv(x, c_in, c_out, 3, stride))
    y = g.conv(y, c_out, c_out, 3, gain=_RESIDUAL_GAIN)
    shortcut = x if stride == 1 and c_in == c_out else g.conv(x, c_in, c_out, 1, stride, gain=1.0)
    return g.relu(g.op("Add", [y, shortcut]))


def _bottleneck(g: GraphBuilder, x: str, c_in: int, width: int, stride: int) -> str:
    c_out = width * 4
    y = g.relu(g.conv(x, c_in, width, 1))
    y = g.relu(g.conv(y, width, width, 3, stride))
    y = g.conv(y, width, c_out, 1, gain=_RESIDUAL_GAIN)
    shortcut = x if stride == 1 and c_in == c_out else g.conv(x, c_in, c_out, 1, stride, gain=1.0)
    return g.relu(g.op("Add", [y, shortcut]))


def resnet18(seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 (He et al. 2016), basic blocks [2, 2, 2, 2]: 1.8 GMACs, 11.7 M params."""
    g = GraphBuilder("resnet18", seed)
    x, c = _stem(g), 64
    for stage, width in enumerate((64, 128, 256, 512)):
        for block in range(2):
            x = _basic_block(g, x, c, width, 2 if block == 0 and stage > 0 else 1)
            c = width
    return _head(g, x, c)


def resnet50(seed: int = 0) -> onnx.ModelProto:
    """ResNet-50 v1.5 (stride on the 3×3), bottlenecks [3, 4, 6, 3]: 4.1 GMACs, 25.6 M params."""
    g = GraphBuilder("resnet50", seed)
    x, c = _stem(g), 64
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for block in range(blocks):
            x = _bottleneck(g, x, c, width, 2 if block == 0 and stage > 0 else 1)
            c = width * 4
    return _head(g, x, c)


#: MobileNetV2's inverted-residual settings: (expansion t, channels c, repeats n, first stride s).
MOBILENET_V2_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2(seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2-like (Sandler et al. 2018, width 1.0): ReLU6 as Clip, depthwise 3×3; 0.3 GMACs, 3.5 M params."""
    g = GraphBuilder("mobilenetv2", seed)
    x = g.input("input", [BATCH_DIM, 3, 224, 224])
    x = g.relu6(g.conv(x, 3, 32, 3, stride=2))
    c = 32
    for t, c_out, n, s in MOBILENET_V2_BLOCKS:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c * t
            y = x if t == 1 else g.relu6(g.conv(x, c, hidden, 1))
            y = g.relu6(g.conv(y, hidden, hidden, 3, stride, group=hidden))
            y = g.conv(y, hidden, c_out, 1, gain=_RESIDUAL_GAIN if stride == 1 and c == c_out else 1.0)
            x = g.op("Add", [x, y]) if stride == 1 and c == c_out else y
            c = c_out
    x = g.relu6(g.conv(x, c, 1280, 1))
    return _head(g, x, 1280)
