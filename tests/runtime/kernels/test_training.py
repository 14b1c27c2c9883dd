"""Optimiser ops of ai.onnx.preview.training: the ONNX backend cases and the per-tensor grouping of inputs."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels import NodeContext, resolve
from runtime.kernels.training import TRAINING_DOMAIN
from tests.runtime.kernels.backend_cases import backend_cases_test

test_backend_cases_pass = backend_cases_test(["Adam", "Adagrad", "Momentum"])


def test_two_tensors_update_independently_like_two_single_updates() -> None:
    rng = np.random.default_rng(0)
    x1, g1, v1, h1 = (rng.random(3).astype(np.float32) for _ in range(4))
    x2, g2, v2, h2 = (rng.random((2, 2)).astype(np.float32) for _ in range(4))
    r, t = np.array(0.1, dtype=np.float32), np.array(3, dtype=np.int64)
    node = NodeContext(name="adam", op_type="Adam", domain=TRAINING_DOMAIN, opset=1, n_inputs=10, n_outputs=6)
    adam = resolve("Adam", TRAINING_DOMAIN, 1)(node, {"norm_coefficient": 0.01})
    both = adam.run(r, t, x1, x2, g1, g2, v1, v2, h1, h2)
    first = adam.run(r, t, x1, g1, v1, h1)
    second = adam.run(r, t, x2, g2, v2, h2)
    for got, want in zip(both, (first[0], second[0], first[1], second[1], first[2], second[2]), strict=True):
        np.testing.assert_array_equal(got, want)


def test_wrong_input_count_names_the_node() -> None:
    node = NodeContext(name="bad_momentum", op_type="Momentum", domain=TRAINING_DOMAIN, opset=1, n_inputs=4)
    kernel = resolve("Momentum", TRAINING_DOMAIN, 1)(node, {"alpha": 0.9, "beta": 0.1})
    with pytest.raises(Exception, match="bad_momentum"):
        kernel.run(np.float32(0.1), np.int64(1), np.ones(2, np.float32), np.ones(2, np.float32))
