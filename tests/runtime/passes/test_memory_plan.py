"""The static memory plan: the planner on its own, and the executor running planned buffers."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import compile_model
from runtime.passes.memory_plan import StepInfo, plan_buffers
from tests.runtime.graphs import const, model, vi


def _step(reads: tuple[str, ...], out: str, nbytes: int = 1024, **kw: object) -> StepInfo:
    return StepInfo(reads=reads, outputs=(out,), writes_into=True, fresh=True, out_nbytes=nbytes, **kw)  # type: ignore[arg-type]


def test_buffers_are_reused_once_their_values_are_dead() -> None:
    steps = [_step(("x",), "a"), _step(("a",), "b"), _step(("b",), "c"), _step(("c",), "d")]
    plan = plan_buffers(steps, keep={"d"})
    assert set(plan.slot_of) == {"a", "b", "c"}
    assert len(plan.slot_bytes) == 2  # a and c share, b has its own
    assert plan.slot_of["a"] == plan.slot_of["c"] != plan.slot_of["b"]


def test_in_place_takes_the_dying_input_buffer() -> None:
    steps = [_step(("x",), "a"), _step(("a",), "b", inplace=(0,)), _step(("b",), "c", inplace=(0,))]
    plan = plan_buffers(steps, keep=set())
    assert plan.slot_of["a"] == plan.slot_of["b"] == plan.slot_of["c"]
    assert plan.inplace == 2


def test_no_in_place_while_the_input_is_still_needed() -> None:
    steps = [_step(("x",), "a"), _step(("a",), "b", inplace=(0,)), _step(("a", "b"), "c")]
    plan = plan_buffers(steps, keep=set())
    assert plan.slot_of["a"] != plan.slot_of["b"]


def test_views_extend_lifetimes_and_exposure_unplans() -> None:
    view = StepInfo(reads=("a",), outputs=("v",))  # a Reshape: may return a view of its input
    steps = [_step(("x",), "a"), view, _step(("x",), "b"), _step(("v", "b"), "c")]
    plan = plan_buffers(steps, keep=set())
    assert plan.slot_of["a"] != plan.slot_of["b"]  # a is alive through its view until step 3
    exposed = plan_buffers([_step(("x",), "a"), StepInfo(reads=("a",), outputs=("out",))], keep={"out"})
    assert "a" not in exposed.slot_of  # a caller would keep a view of it across runs


def test_concat_inputs_live_in_their_slices_of_the_concat_output() -> None:
    steps = [
        _step(("x",), "a"),
        _step(("x",), "v", 512),
        _step(("a",), "w", 512),
        _step(("v", "w"), "c", 1024),
        _step(("c",), "d"),
    ]
    plan = plan_buffers(steps, keep=set(), placed={"v": "c", "w": "c"})
    assert plan.placed == {"v": "c", "w": "c"} and "v" not in plan.slot_of and "w" not in plan.slot_of
    assert plan.slot_of["c"] != plan.slot_of["a"]  # c's slot is taken at v's step, while a is still alive
    assert plan.slot_of["d"] == plan.slot_of["a"]
    # a concat output the caller keeps is not planned, so its parts get slots of their own
    kept = plan_buffers(steps[:4], keep={"c"}, placed={"v": "c", "w": "c"})
    assert kept.placed == {} and {"v", "w"} <= kept.slot_of.keys()


def _conv_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "b"], ["d"]),
        helper.make_node("Flatten", ["d"], ["y"]),
    ]
    init = [const("w1", rng.standard_normal((8, 3, 3, 3))), const("w2", rng.standard_normal((8, 8, 3, 3)))]
    return model(nodes, [vi("x", shape=["n", 3, 6, 6])], [vi("y", shape=["n", 288])], init)


def test_outputs_survive_later_runs_and_shapes_get_their_own_plans() -> None:
    exe = compile_model(_conv_model(), threads=2)
    plain = compile_model(_conv_model(), passes=[])
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((n, 3, 6, 6)).astype(np.float32) for n in (1, 2, 1, 3, 2)]
    outs = [exe.run({"x": x})["y"] for x in xs]
    for x, y in zip(xs, outs, strict=True):  # every earlier output unchanged by the runs after it
        np.testing.assert_allclose(y, plain.run({"x": x})["y"], rtol=1e-4, atol=1e-4)
    assert exe.plan._static is not None and len(exe.plan._static) == 3
    assert len({id(o) for o in outs}) == len(outs)


def test_memory_plan_can_be_disabled_by_name() -> None:
    exe = compile_model(_conv_model(), disable=["memory_plan"])
    x = np.ones((1, 3, 6, 6), np.float32)
    exe.run({"x": x})
    exe.run({"x": x})
    assert exe.plan._static is None


def test_concurrent_runs_use_their_own_buffers() -> None:
    exe = compile_model(_conv_model(), threads=1)
    plain = compile_model(_conv_model(), passes=[])
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((2, 3, 6, 6)).astype(np.float32) for _ in range(4)]
    expected = [plain.run({"x": x})["y"] for x in xs]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(30):
                np.testing.assert_allclose(exe.run({"x": xs[i]})["y"], expected[i], rtol=1e-4, atol=1e-4)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_value_dependent_shapes_fall_back_to_unplanned_runs() -> None:
    # y = x[:k] with k read from a second input: same input shapes, different intermediate shapes
    nodes = [
        helper.make_node("Slice", ["x", "zero", "k"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("MatMul", ["r", "w"], ["y"]),
    ]
    init = [const("zero", [0], np.int64), const("w", np.eye(4))]
    from onnx import TensorProto

    m = model(nodes, [vi("x", shape=[6, 4]), vi("k", TensorProto.INT64, [1])], [vi("y", shape=["m", 4])], init)
    exe = compile_model(m)
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    for k in (3, 3, 5, 2, 5):
        y = exe.run({"x": x, "k": np.array([k], np.int64)})["y"]
        np.testing.assert_array_equal(y, x[:k])


@pytest.mark.parametrize("threads", [1, 2])
def test_a_planned_run_allocates_less(threads: int) -> None:
    import tracemalloc

    exe = compile_model(_conv_model(), threads=threads)
    x = np.ones((4, 3, 6, 6), np.float32)
    exe.run({"x": x})
    exe.run({"x": x})
    tracemalloc.start()
    exe.run({"x": x})
    planned_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    plain = compile_model(_conv_model(), threads=threads, disable=["memory_plan"])
    plain.run({"x": x})
    tracemalloc.start()
    plain.run({"x": x})
    unplanned_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert planned_peak < unplanned_peak
