"""Tiny models in the spirit of MLPerf Tiny (Banbury et al. 2021) plus LeNet-5 and a 2-layer BERT.

They run in microseconds to a millisecond, so their times are mostly per-query and per-node overhead: what a
performance model must know to rank backends for small models, learned here from several architecture families
(not only the MLP) so that leave-one-architecture-out can test it.

* ResNet-8 on 32×32 images (MLPerf Tiny image classification), family ``resnet``;
* DS-CNN for keyword spotting on 49×10 MFCC features (Zhang et al. 2017, "Hello Edge"), family ``ds-cnn``;
* MobileNetV1 width 0.25 on 96×96 images (MLPerf Tiny visual wake words), family ``mobilenet``;
* the fully-connected autoencoder of MLPerf Tiny's anomaly detection (640-128-128-128-128-8-…-640), family ``mlp``;
* LeNet-5 on 28×28 digits (LeCun et al. 1998, ReLU and max pooling), family ``lenet``;
* a BERT-like encoder with 2 layers, hidden 128, sequence 64, family ``bert``.
"""

from __future__ import annotations

import itertools
import math

import onnx

from benchmarks.models.graph import BATCH_DIM, GraphBuilder
from benchmarks.models.transformer import bert_encoder


def _classifier(g: GraphBuilder, x: str, channels: int, classes: int) -> onnx.ModelProto:
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    g.output(g.gemm(x, channels, classes, gain=1.0), [BATCH_DIM, classes])
    return g.build()


def resnet8(seed: int = 0) -> onnx.ModelProto:
    """ResNet-8 for CIFAR-10: a 3×3 stem and three basic blocks (16, 32, 64 channels); 12.5 M MACs, 78 k params."""
    g = GraphBuilder("resnet8", seed)
    x = g.relu(g.conv(g.input("input", [BATCH_DIM, 3, 32, 32]), 3, 16, 3))
    c = 16
    for width, stride in ((16, 1), (32, 2), (64, 2)):
        y = g.relu(g.conv(x, c, width, 3, stride))
        y = g.conv(y, width, width, 3, gain=0.3)
        shortcut = x if stride == 1 and c == width else g.conv(x, c, width, 1, stride, gain=1.0)
        x, c = g.relu(g.op("Add", [y, shortcut])), width
    return _classifier(g, x, c, 10)


def ds_cnn(seed: int = 0) -> onnx.ModelProto:
    """DS-CNN (small) for keyword spotting: a 10×4 stride-2 conv, four depthwise-separable blocks of 64, 12 classes."""
    g = GraphBuilder("ds_cnn", seed)
    x = g.input("input", [BATCH_DIM, 1, 49, 10])
    w = g.weight((64, 1, 10, 4), fan_in=40)
    x = g.relu(g.op("Conv", [x, w, g.bias(64)], kernel_shape=[10, 4], strides=[2, 2], pads=[5, 1, 5, 1]))
    for _ in range(4):
        x = g.relu(g.conv(x, 64, 64, 3, group=64))
        x = g.relu(g.conv(x, 64, 64, 1))
    return _classifier(g, x, 64, 12)


def mobilenet_v1(seed: int = 0, width: float = 0.25, image: int = 96) -> onnx.ModelProto:
    """MobileNetV1 (Howard et al. 2017) at width 0.25 on 96×96 (visual wake words): 7.5 M MACs, 0.2 M params."""
    g = GraphBuilder("mobilenet_v1", seed)
    x = g.input("input", [BATCH_DIM, 3, image, image])
    c = int(32 * width)
    x = g.relu(g.conv(x, 3, c, 3, stride=2))
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5, (1024, 2), (1024, 1)]
    for channels, stride in plan:
        c_out = int(channels * width)
        x = g.relu(g.conv(x, c, c, 3, stride, group=c))
        x = g.relu(g.conv(x, c, c_out, 1))
        c = c_out
    return _classifier(g, x, c, 2)


def fc_autoencoder(seed: int = 0, sizes: tuple[int, ...] = (640, 128, 128, 128, 128, 8)) -> onnx.ModelProto:
    """MLPerf Tiny's anomaly-detection autoencoder: 640-128-128-128-128-8 and back (Gemm + Relu); 0.27 M MACs."""
    g = GraphBuilder("fc_autoencoder", seed)
    x = g.input("input", [BATCH_DIM, sizes[0]])
    layers = list(itertools.pairwise((*sizes, *reversed(sizes[:-1]))))
    for i, (n_in, n_out) in enumerate(layers):
        last = i == len(layers) - 1
        x = g.gemm(x, n_in, n_out, gain=1.0 if last else math.sqrt(2.0))
        if not last:
            x = g.relu(x)
    g.output(x, [BATCH_DIM, sizes[0]])
    return g.build()


def lenet5(seed: int = 0) -> onnx.ModelProto:
    """LeNet-5 on 28×28 digits: conv 5×5 (6) → pool → conv 5×5 (16) → pool → 120 → 84 → 10; 0.4 M MACs."""
    g = GraphBuilder("lenet5", seed)
    x = g.input("input", [BATCH_DIM, 1, 28, 28])
    x = g.op("MaxPool", [g.relu(g.conv(x, 1, 6, 5))], kernel_shape=[2, 2], strides=[2, 2])
    w = g.weight((16, 6, 5, 5), fan_in=150)
    x = g.relu(g.op("Conv", [x, w, g.bias(16)], kernel_shape=[5, 5]))
    x = g.op("Flatten", [g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])], axis=1)
    x = g.relu(g.gemm(x, 16 * 5 * 5, 120))
    x = g.relu(g.gemm(x, 120, 84))
    g.output(g.gemm(x, 84, 10, gain=1.0), [BATCH_DIM, 10])
    return g.build()


def bert_tiny(seed: int = 0) -> onnx.ModelProto:
    """The suite's BERT-like encoder at 2 layers, hidden 128, 2 heads, sequence 64, FFN 512 (56 MFLOP)."""
    return bert_encoder(seed, layers=2, hidden=128, heads=2, seq=64, ffn=512)
