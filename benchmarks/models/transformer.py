"""A BERT-like encoder (Devlin et al. 2019, scaled down): token + position embeddings and post-norm layers.

Written the way exporters emit it at opset 17: MatMul + Add projections, Reshape/Transpose into heads, Softmax
attention, LayerNormalization, and GELU spelled with Erf.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import onnx
from onnx import TensorProto

from benchmarks.models.graph import BATCH_DIM, GraphBuilder

VOCAB = 8192


def _gelu(g: GraphBuilder, x: str) -> str:
    # gelu(x) = 0.5 · x · (1 + erf(x / √2))
    erf = g.op("Erf", [g.op("Div", [x, g.scalar(math.sqrt(2.0))])])
    return g.op("Mul", [g.op("Mul", [x, g.scalar(0.5)]), g.op("Add", [erf, g.scalar(1.0)])])


def _layer_norm(g: GraphBuilder, x: str, hidden: int) -> str:
    scale = g.const(np.ones(hidden, dtype=np.float32), "gamma")
    return g.op("LayerNormalization", [x, scale, g.bias(hidden, "beta")], axis=-1, epsilon=1e-5)


def _attention(g: GraphBuilder, x: str, hidden: int, heads: int) -> str:
    head_dim = hidden // heads
    split = g.ints([0, 0, heads, head_dim])

    def project(perm: list[int]) -> str:
        return g.op("Transpose", [g.op("Reshape", [g.linear(x, hidden, hidden), split])], perm=perm)

    q, k, v = project([0, 2, 1, 3]), project([0, 2, 3, 1]), project([0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k]), g.scalar(math.sqrt(head_dim))])
    context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    merged = g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]), g.ints([0, 0, hidden])])
    return g.linear(merged, hidden, hidden)


def bert_encoder(
    seed: int = 0, layers: int = 4, hidden: int = 256, heads: int = 4, seq: int = 128, ffn: int = 1024
) -> onnx.ModelProto:
    """The suite's BERT-like encoder: 4 layers, hidden 256, 4 heads, sequence 128 (0.87 GFLOP per sequence)."""
    g = GraphBuilder("bert_encoder", seed)
    ids = g.input("input_ids", [BATCH_DIM, seq], TensorProto.INT64)
    tokens = g.const((g.rng.standard_normal((VOCAB, hidden)) * 0.02).astype(np.float32), "token_embedding")
    positions = g.const((g.rng.standard_normal((seq, hidden)) * 0.02).astype(np.float32), "position_embedding")
    x = _layer_norm(g, g.op("Add", [g.op("Gather", [tokens, ids], axis=0), positions]), hidden)
    for _ in range(layers):
        x = _layer_norm(g, g.op("Add", [x, _attention(g, x, hidden, heads)]), hidden)
        y = g.linear(_gelu(g, g.linear(x, hidden, ffn)), ffn, hidden)
        x = _layer_norm(g, g.op("Add", [x, y]), hidden)
    g.output(x, [BATCH_DIM, seq, hidden])
    return g.build()


def mlp(seed: int = 0, sizes: tuple[int, ...] = (784, 1024, 1024, 10)) -> onnx.ModelProto:
    """The MNIST-sized multilayer perceptron 784-1024-1024-10 (Gemm + Relu)."""
    g = GraphBuilder("mlp", seed)
    x = g.input("input", [BATCH_DIM, sizes[0]])
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        x = g.gemm(x, n_in, n_out, gain=1.0 if i == len(sizes) - 2 else math.sqrt(2.0))
        if i < len(sizes) - 2:
            x = g.relu(x)
    g.output(x, [BATCH_DIM, sizes[-1]])
    return g.build()
