"""The trainer's in-place SGD and Adam against ONNX's Momentum and Adam ops (``runtime.kernels.training``)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from runtime import compile_model
from runtime.training.config import TrainConfig
from runtime.training.optimizers import make_optimizer

DOMAIN = "ai.onnx.preview.training"


def _onnx_update(op_type: str, attrs: dict[str, object], kinds: int, shape: tuple[int, ...]):
    """A one-node model ``op_type(R, T, X, G, state...) -> X_new, state_new...`` run by the executor."""
    names = ["x", "g", *(f"s{i}" for i in range(kinds))]
    inputs = [
        helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("T", TensorProto.INT64, []),
        *(helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in names),
    ]
    outs = ["x_new", *(f"s{i}_new" for i in range(kinds))]
    node = helper.make_node(op_type, ["R", "T", *names], outs, domain=DOMAIN, **attrs)
    graph = helper.make_graph(
        [node], "update", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(shape)) for o in outs]
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    return compile_model(helper.make_model(graph, opset_imports=opsets), passes=())


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_in_place_updates_match_the_onnx_ops(optimizer: str, weight_decay: float) -> None:
    rng = np.random.default_rng(0)
    shape = (5, 3)
    config = TrainConfig(optimizer=optimizer, lr=0.1, weight_decay=weight_decay, momentum=0.9)
    weights = rng.standard_normal(shape).astype(np.float32)
    params = {"w": weights.copy()}
    opt = make_optimizer(config, params)
    exe = _onnx_update(opt.op_type, opt.attributes(), len(opt.state_kinds), shape)
    x = weights.copy()
    state = [np.zeros(shape, np.float32) for _ in opt.state_kinds]
    for step in range(4):
        grad = rng.standard_normal(shape).astype(np.float32)
        grad_view = grad.copy()
        same = opt.apply(params, {"w": grad_view}, config.lr, grad_scale=0.5)
        assert same is params and np.array_equal(grad_view, grad)  # updated in place; the gradient only read
        feeds = {"R": np.float32(config.lr), "T": np.int64(opt.step_count_input() - 1), "x": x, "g": grad * 0.5}
        feeds.update({f"s{i}": s for i, s in enumerate(state)})
        out = exe.run(feeds)
        x, state = out["x_new"].copy(), [out[f"s{i}_new"].copy() for i in range(len(state))]
        np.testing.assert_allclose(params["w"], x, rtol=1e-6, atol=1e-7, err_msg=f"step {step}")
        for kind, value in zip(opt.state_kinds, state, strict=True):
            np.testing.assert_allclose(opt.state[f"{kind}:w"], value, rtol=1e-6, atol=1e-7)


def test_a_read_only_parameter_is_copied_not_written() -> None:
    frozen = np.ones(3, np.float32)
    frozen.flags.writeable = False
    params = {"w": frozen}
    make_optimizer(TrainConfig(lr=0.5), params).apply(params, {"w": np.ones(3, np.float32)}, 0.5, 1.0)
    assert np.array_equal(frozen, np.ones(3)) and np.allclose(params["w"], 0.5)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_the_compiled_sgd_pass_is_numpys_update(momentum: float, weight_decay: float) -> None:
    from runtime import native
    from runtime.native.training import sgd_momentum

    lib = native.lib()
    if lib is None:
        pytest.skip(f"compiled kernels unavailable: {native.status()}")
    rng = np.random.default_rng(3)
    shape = (70_000, 3)  # more than one task of the kernel's split, above the optimiser's fused-pass minimum
    config = TrainConfig(optimizer="sgd", lr=0.05, weight_decay=weight_decay, momentum=momentum)
    x = rng.standard_normal(shape).astype(np.float32)
    fused, plain = {"w": x.copy()}, {"w": x.copy()}
    opt_fused, opt_plain = make_optimizer(config, fused), make_optimizer(config, plain)
    opt_plain._fused = lambda *args: False  # type: ignore[method-assign]  # the NumPy update, the yardstick
    for _ in range(3):
        grad = rng.standard_normal(shape).astype(np.float32)
        opt_fused.apply(fused, {"w": grad}, config.lr, grad_scale=0.25)
        opt_plain.apply(plain, {"w": grad}, config.lr, grad_scale=0.25)
        np.testing.assert_allclose(fused["w"], plain["w"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(opt_fused.state["v:w"], opt_plain.state["v:w"], rtol=1e-6, atol=1e-6)
    assert not np.array_equal(fused["w"], x)
    v = np.zeros(shape, np.float32)
    strided = np.zeros((shape[0], 6), np.float32)[:, ::2]
    assert sgd_momentum(lib, x.copy(), grad, v, 1.0, 0.0, momentum, 0.1)
    assert not sgd_momentum(lib, x.copy(), strided, v, 1.0, 0.0, momentum, 0.1)  # NumPy takes a strided one
    assert not sgd_momentum(lib, x.astype(np.float64), grad, v, 1.0, 0.0, momentum, 0.1)
