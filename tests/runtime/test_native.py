"""The compiled kernels against NumPy references, on both thread counts, and the build/cache/fallback machinery."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from runtime import native
from runtime.kernels.conv import conv_nd
from runtime.kernels.pool import PoolGeometry
from runtime.native import ops

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def lib(request: pytest.FixtureRequest) -> Iterator[native.NativeLib]:
    loaded = native.lib()
    assert loaded is not None
    previous = native.get_threads()
    native.set_threads(request.param)
    yield loaded
    native.set_threads(previous)


def _reference_conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    group: int,
    strides: tuple[int, int],
    dilations: tuple[int, int],
    pads: tuple[int, int, int, int],
    act: str = "",
    res: np.ndarray | None = None,
) -> np.ndarray:
    y = conv_nd(
        x.transpose(0, 3, 1, 2).astype(np.float64), w.astype(np.float64), b, list(pads), strides, dilations, group
    ).transpose(0, 2, 3, 1)
    if res is not None:
        y = y + res
    if act == "Relu":
        y = np.maximum(y, 0)
    if act == "Clip":
        y = np.clip(y, 0.0, 6.0)
    if act == "LeakyRelu":
        y = np.where(y < 0, 0.1 * y, y)
    return y


CONV_CASES = [
    # (n, h, w, c, m, k, stride, dilation, pads, group, act, residual)
    (1, 9, 9, 5, 7, 3, 1, 1, (1, 1, 1, 1), 1, "Relu", True),  # 16-wide block, merged rows
    (2, 10, 7, 8, 40, 3, 2, 1, (1, 1, 1, 1), 1, "", False),  # two blocks, the second partial
    (1, 12, 12, 3, 64, 7, 2, 1, (3, 3, 3, 3), 1, "Clip", False),  # a stem: 49 taps of 3 channels
    (2, 5, 5, 16, 33, 1, 1, 1, (0, 0, 0, 0), 1, "", True),  # 1x1 as one GEMM over the batch
    (1, 8, 8, 12, 12, 3, 1, 1, (1, 1, 1, 1), 12, "Clip", False),  # depthwise
    (2, 9, 9, 40, 40, 3, 2, 1, (1, 1, 1, 1), 40, "Relu", True),  # depthwise, strided, partial vector
    (1, 7, 9, 6, 9, 3, 1, 2, (2, 2, 2, 2), 3, "", True),  # grouped and dilated
    (1, 8, 8, 32, 64, 1, 2, 1, (0, 0, 0, 0), 1, "LeakyRelu", False),  # strided 1x1
    (1, 11, 11, 24, 48, 5, 1, 1, (2, 2, 2, 2), 2, "Relu", False),  # grouped: no row merging
    (3, 14, 14, 17, 17, 5, 1, 1, (2, 2, 2, 2), 17, "", False),  # depthwise 5x5
    (1, 13, 13, 8, 16, 3, 1, 1, (0, 1, 2, 1), 1, "", False),  # asymmetric pads
    (1, 7, 7, 64, 96, 3, 1, 1, (1, 1, 1, 1), 1, "Relu", True),  # strips across rows on a small image
    (1, 6, 6, 300, 20, 3, 1, 1, (1, 1, 1, 1), 1, "", False),  # long rows: per-tap tables
    (2, 9, 8, 72, 72, 3, 1, 2, (2, 1, 2, 3), 72, "Relu", True),  # depthwise, dilated, uneven pads: border taps
    (1, 6, 5, 40, 40, 5, 2, 1, (4, 4, 3, 3), 40, "Clip", False),  # depthwise 5x5, pads wider than the kernel's reach
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
def test_nhwc_convolution_matches_the_im2col_reference(lib: native.NativeLib, case: tuple) -> None:
    n, h, w_, c, m, k, s, d, pads, g, act, with_res = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, h, w_, c)).astype(np.float32)
    w = rng.standard_normal((m, c // g, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    conv = ops.NhwcConv2d(
        lib, w, b, g, (s, s), (d, d), pads, ops.Epilogue(act, 0.0 if act != "LeakyRelu" else 0.1, 6.0)
    )
    out_shape = conv.output_shape(x.shape)
    res = rng.standard_normal(out_shape).astype(np.float32) if with_res else None
    y = conv(x, res)
    ref = _reference_conv(x, w, b, g, (s, s), (d, d), pads, act, res)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_convolution_writes_into_a_given_buffer_and_in_place_over_the_residual(lib: native.NativeLib) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6, 6, 8)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    conv = ops.NhwcConv2d(lib, w, None, 1, (1, 1), (1, 1), (1, 1, 1, 1), ops.Epilogue("Relu"))
    res = rng.standard_normal((1, 6, 6, 8)).astype(np.float32)
    expected = _reference_conv(x, w, None, 1, (1, 1), (1, 1), (1, 1, 1, 1), "Relu", res)
    buf = res.copy()
    assert conv(x, buf, out=buf) is buf  # the residual's buffer is overwritten with the result
    np.testing.assert_allclose(buf, expected, rtol=1e-4, atol=1e-4)
    bound = conv.bind(x, None, buf)
    assert bound is not None
    x[...] = 0
    bound()  # a prebound call reads the arrays at their fixed addresses
    np.testing.assert_allclose(buf, 0.0)


def test_two_threads_give_the_same_bits_as_one() -> None:
    loaded = native.lib()
    assert loaded is not None
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 14, 14, 64)).astype(np.float32)
    w = rng.standard_normal((96, 64, 3, 3)).astype(np.float32)
    conv = ops.NhwcConv2d(loaded, w, None, 1, (1, 1), (1, 1), (1, 1, 1, 1), ops.Epilogue())
    previous = native.get_threads()
    try:
        native.set_threads(1)
        one = conv(x)
        native.set_threads(2)
        two = [conv(x) for _ in range(20)]
    finally:
        native.set_threads(previous)
    for y in two:
        np.testing.assert_array_equal(y, one)


def _share_with_another_thread_runnable(threads: int, wall_s: float = 0.3) -> float | None:
    """Share of samples, while a run at ``threads`` holds the pool and the caller only sleeps, in which some other
    thread of this process is runnable (state R: running or waiting for a core) rather than asleep.

    A state, unlike CPU time, does not depend on how busy the machine is: a spinning worker is runnable even when
    other processes leave it no core (None without /proc)."""
    me = threading.get_native_id()
    native.set_threads(threads)
    native.hold(True)
    try:
        hits = samples = 0
        end = time.monotonic() + wall_s
        while time.monotonic() < end:
            try:
                states = [
                    (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    for task in Path("/proc/self/task").iterdir()
                    if int(task.name) != me
                ]
            except (OSError, IndexError, ValueError):
                return None
            samples += 1
            hits += "R" in states
            time.sleep(0.002)
        return hits / samples
    finally:
        native.hold(False)


def _other_threads_sleeps() -> int | None:
    """Voluntary context switches of this process's threads other than the caller (None without /proc)."""
    me, total = threading.get_native_id(), 0
    try:
        for task in Path("/proc/self/task").iterdir():
            if int(task.name) != me:
                status = (task / "status").read_text()
                total += int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return total


def test_a_one_thread_run_leaves_workers_of_earlier_runs_asleep() -> None:
    loaded = native.lib()
    assert loaded is not None
    x = np.ones((1, 14, 14, 64), np.float32)
    conv = ops.NhwcConv2d(
        loaded, np.ones((96, 64, 3, 3), np.float32), None, 1, (1, 1), (1, 1), (1, 1, 1, 1), ops.Epilogue()
    )
    previous = native.get_threads()
    try:
        native.set_threads(2)
        conv(x)  # starts a worker
        spinning = _share_with_another_thread_runnable(2)
        if spinning is None:
            pytest.skip("no /proc/self/task on this system: thread states cannot be read")
        assert spinning > 0.5  # a two-thread run keeps its worker spinning between jobs
        time.sleep(0.05)  # past the grace period after that run
        assert (_share_with_another_thread_runnable(1) or 0.0) < 0.2  # a one-thread run burnt a second core before
        time.sleep(0.05)
        before = _other_threads_sleeps()
        for _ in range(200):  # nor wake them (each wake-up cost a run of a tiny model 20-40 us here)
            native.set_threads(1)
            native.hold(True)
            time.sleep(0.0005)  # the run; a worker woken at its start goes back to sleep meanwhile
            native.hold(False)
        if before is not None:
            assert _other_threads_sleeps() - before < 5
    finally:
        native.set_threads(previous)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 784, 1024), (128, 256, 96), (5, 33, 70), (8, 1024, 10)])
def test_packed_matmul_with_bias_and_relu(lib: native.NativeLib, m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    pm = ops.PackedMatMul(lib, b, bias, ops.Epilogue("Relu"))
    ref = np.maximum(a.astype(np.float64) @ b + bias, 0)
    np.testing.assert_allclose(pm(a), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    assert pm(a.reshape(1, m, k)).shape == (1, m, n)


def test_the_tanh_epilogue_matches_numpy_near_zero_and_in_saturation(lib: native.NativeLib) -> None:
    rng = np.random.default_rng(6)
    a = rng.standard_normal((33, 20)).astype(np.float32)
    b = (rng.standard_normal((20, 40)) * np.logspace(-6, 1, 40)).astype(np.float32)  # tiny to saturating outputs
    y = ops.PackedMatMul(lib, b, None, ops.Epilogue("Tanh"))(a)
    np.testing.assert_allclose(y, np.tanh(a.astype(np.float64) @ b), rtol=2e-5, atol=1e-7)


def test_a_conv_followed_by_tanh_fuses_it() -> None:
    from onnx import helper

    from runtime import compile_model
    from tests.runtime.graphs import const, model, vi

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]), helper.make_node("Tanh", ["c"], ["y"])]
    w = np.random.default_rng(7).standard_normal((8, 4, 3)).astype(np.float32)
    m = model(nodes, [vi("x", shape=[2, 4, 50])], [vi("y", shape=[2, 8, 50])], [const("w", w)])
    exe = compile_model(m)
    assert "Tanh" not in [n.op_type for n in exe.model.graph.nodes]
    x = np.random.default_rng(8).standard_normal((2, 4, 50)).astype(np.float32)
    ref = compile_model(m, passes=[]).run({"x": x})["y"]
    np.testing.assert_allclose(exe.run({"x": x})["y"], ref, rtol=1e-5, atol=1e-6)


def test_a_residual_that_must_be_copied_stays_alive_through_the_call(lib: native.NativeLib) -> None:
    """A transposed (non-contiguous) residual is copied before the compiled call; the copy must outlive it (an
    MLP-Mixer's ``x + mlp(x)`` after a token-mixing transpose read freed memory)."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 64, 96)).astype(np.float32)
    b = rng.standard_normal((96, 384)).astype(np.float32)
    for _ in range(3):  # freed memory gets reused by the next allocations: repeat to meet it
        res = np.swapaxes(rng.standard_normal((2, 384, 64)).astype(np.float32), 1, 2)
        y = ops.PackedMatMul(lib, b, None, ops.Epilogue())(a, res)
        np.testing.assert_allclose(y, a @ b + res, rtol=1e-4, atol=1e-3)
        x = rng.standard_normal((1, 6, 6, 8)).astype(np.float32)
        w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
        for group in (1, 8):
            conv = ops.NhwcConv2d(lib, w[:, : 8 // group], None, group, (1, 1), (1, 1), (1, 1, 1, 1), ops.Epilogue())
            r = np.swapaxes(rng.standard_normal((1, 6, 6, 8)).astype(np.float32), 1, 2)
            ref = _reference_conv(x, w[:, : 8 // group], None, group, (1, 1), (1, 1), (1, 1, 1, 1), "", r)
            np.testing.assert_allclose(conv(x, r), ref, rtol=1e-4, atol=1e-3)


def test_dynamic_matmul_on_transposed_views_and_broadcast_batches(lib: native.NativeLib) -> None:
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 5, 4, 8)).astype(np.float32).transpose(0, 2, 1, 3)  # [2, 4, 5, 8] view
    k = rng.standard_normal((2, 5, 4, 8)).astype(np.float32).transpose(0, 2, 3, 1)  # [2, 4, 8, 5] view
    y = ops.DynamicMatMul(lib, None, ops.Epilogue(alpha=0.125))(q, k)
    assert y is not None
    np.testing.assert_allclose(y, (q @ k) * 0.125, rtol=1e-5, atol=1e-6)
    a = rng.standard_normal((3, 7, 6)).astype(np.float32)
    b = rng.standard_normal((6, 40)).astype(np.float32)
    y2 = ops.DynamicMatMul(lib, None, ops.Epilogue())(a, b)
    assert y2 is not None
    np.testing.assert_allclose(y2, a @ b, rtol=1e-5, atol=1e-5)
    # three batch levels that merge into one: still handled
    sliced = rng.standard_normal((2, 3, 4, 5, 6)).astype(np.float32)[:, :, ::2]
    b3 = rng.standard_normal((6, 3)).astype(np.float32)
    y3 = ops.DynamicMatMul(lib, None, ops.Epilogue())(sliced, b3)
    assert y3 is not None
    np.testing.assert_allclose(y3, sliced @ b3, rtol=1e-5, atol=1e-5)
    # batch dims that do not merge into two strided levels: the caller falls back
    odd = rng.standard_normal((2, 3, 4, 5, 6)).astype(np.float32).transpose(1, 0, 2, 3, 4)
    assert ops.DynamicMatMul(lib, None, ops.Epilogue())(odd, b3) is None


@pytest.mark.parametrize(("mode", "include"), [(0, False), (1, False), (2, True)])
def test_pooling_matches_the_window_reference(lib: native.NativeLib, mode: int, include: bool) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 9, 10, 20)).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1}
    geo = PoolGeometry(attrs, x.shape[1:3])
    y = ops.pool(lib, x, geo.window(mode))
    win = geo.windows(x.transpose(0, 3, 1, 2), -np.inf if mode == 0 else 0)
    ref = win.max(axis=(4, 5)) if mode == 0 else win.sum(axis=(4, 5)) / np.maximum(geo.counts(include), 1)
    np.testing.assert_allclose(y, ref.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1},
        {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [2, 3], "strides": [3, 2], "pads": [0, 2, 1, 0], "dilations": [2, 1]},
        {"kernel_shape": [5, 5], "strides": [4, 3], "pads": [2, 2, 2, 2], "ceil_mode": 1},
        {"kernel_shape": [1, 1], "strides": [2, 2]},
    ],
)
def test_nchw_pooling_matches_the_window_reference(lib: native.NativeLib, mode: int, attrs: dict) -> None:
    """Pads, ceil-mode overhang, dilations and strides the phase split must get right (max and both averages)."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 5, 11, 17)).astype(np.float32)
    geo = PoolGeometry(attrs, x.shape[2:])
    y = ops.pool(lib, x, geo.window(mode), nchw=True)
    win = geo.windows(x, -np.inf if mode == 0 else 0)
    ref = win.max(axis=(4, 5)) if mode == 0 else win.sum(axis=(4, 5)) / np.maximum(geo.counts(mode == 2), 1)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", [0, 2])
def test_nchw_pooling_split_into_tasks_of_many_rows_matches_the_reference(lib: native.NativeLib, mode: int) -> None:
    """Large enough to run in parallel: tasks take 29 rows each, so tasks cross channel planes and the last is
    short."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 7, 61, 67)).astype(np.float32)
    geo = PoolGeometry({"kernel_shape": [3, 3], "strides": [1, 1]}, x.shape[2:])
    y = ops.pool(lib, x, geo.window(mode), nchw=True)
    win = geo.windows(x, -np.inf if mode == 0 else 0)
    ref = win.max(axis=(4, 5)) if mode == 0 else win.sum(axis=(4, 5)) / np.maximum(geo.counts(True), 1)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("shape", "size", "beta"), [((1, 96, 23, 29), 5, 0.75), ((2, 7, 5, 3), 3, 0.5), ((1, 16, 9), 4, 1.0)]
)
def test_lrn_matches_the_running_sum_reference(lib: native.NativeLib, shape: tuple, size: int, beta: float) -> None:
    """Windows clipped at both channel ends, an even size (more channels after than before), strips of pixels
    that end short; 0.75 through square roots, as AlexNet's."""
    from runtime.kernels.normalization import lrn_reference

    x = (np.random.default_rng(8).standard_normal(shape) * 3).astype(np.float32)
    want = lrn_reference(x, size, 1e-2, beta, 1.5)
    got = ops.lrn(lib, x, size, 1e-2, beta, 1.5)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def test_row_kernels_match_numpy(lib: native.NativeLib) -> None:
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((7, 130)) * 5).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(ops.softmax_rows(lib, x), e / e.sum(-1, keepdims=True), rtol=2e-6, atol=1e-7)
    gamma, beta = rng.standard_normal(130).astype(np.float32), rng.standard_normal(130).astype(np.float32)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(
        ops.layernorm_rows(lib, x, gamma, beta, 1e-5), (x - mu) / np.sqrt(var + 1e-5) * gamma + beta, atol=2e-5
    )
    v = np.linspace(-8, 8, 1001).astype(np.float32)
    gelu = np.array([0.5 * t * (1 + math.erf(t / math.sqrt(2))) for t in v.astype(np.float64)])
    np.testing.assert_allclose(ops.gelu(lib, v), gelu, atol=1e-6)
    g = rng.standard_normal((2, 5, 4, 33)).astype(np.float32)
    np.testing.assert_allclose(ops.global_average_pool_nhwc(lib, g)[:, 0, 0], g.mean(axis=(1, 2)), atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 3, 9216), (2, 64, 300), (1, 300, 64), (3, 257, 129), (1, 17, 33), (1, 16, 16)])
def test_transpose_including_ragged_tiles(lib: native.NativeLib, shape: tuple[int, int, int]) -> None:
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(ops.transpose_last2(lib, x), x.transpose(0, 2, 1))


def test_without_a_compiler_the_runtime_reports_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_state", {"lib": None, "tried": False, "reason": "", "enabled": None})
    monkeypatch.setattr(native, "_ACTIVE", [])
    monkeypatch.setattr(native, "_compiler", lambda: None)
    assert native.lib() is None
    assert "no C compiler" in native.status()


def test_a_failed_build_falls_back_with_the_compiler_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    broken = tmp_path / "kernels.c"
    broken.write_text("this is not C\n")
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "SOURCE", broken)
    monkeypatch.setattr(native, "_state", {"lib": None, "tried": False, "reason": "", "enabled": None})
    monkeypatch.setattr(native, "_ACTIVE", [])
    assert native.lib() is None
    assert "failed" in native.status()


def test_build_is_cached_under_the_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native, "_state", {"lib": None, "tried": False, "reason": "", "enabled": None})
    monkeypatch.setattr(native, "_ACTIVE", [])
    loaded = native.lib()
    assert loaded is not None
    assert loaded.path.parent == tmp_path / "native"
    first = loaded.path.stat().st_mtime_ns
    monkeypatch.setattr(native, "_state", {"lib": None, "tried": False, "reason": "", "enabled": None})
    monkeypatch.setattr(native, "_ACTIVE", [])
    again = native.lib()
    assert again is not None and again.path == loaded.path and again.path.stat().st_mtime_ns == first


def test_every_included_header_is_part_of_the_build_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A header the sources include (vec16.h) names the cached build, so editing it rebuilds the kernels."""
    included = {name for path in (native.SOURCE, *native.EXTRA_SOURCES) for name in _local_includes(path)}
    assert included == {path.name for path in native.HEADERS}
    copy = tmp_path / "vec16.h"
    copy.write_bytes(native.HEADERS[0].read_bytes())
    monkeypatch.setattr(native, "HEADERS", (copy,))
    monkeypatch.setattr(native, "_compiler_version", lambda cc: "cc 1")
    before = native.build_key("cc")
    copy.write_text(copy.read_text() + "/* edited */\n")
    assert native.build_key("cc") != before


def _local_includes(path: Path) -> list[str]:
    return [line.split('"')[1] for line in path.read_text().splitlines() if line.startswith('#include "')]


def test_set_enabled_switches_the_kernels_off_and_back() -> None:
    try:
        native.set_enabled(False)
        assert native.lib() is None
        assert "disabled" in native.status()
    finally:
        native.set_enabled(None)
    assert native.lib() is not None


@pytest.mark.slow
def test_the_portable_build_without_avx512_gives_the_same_answers(tmp_path: Path) -> None:
    """Machines without AVX-512 get narrower strips (x86-64-v3, or v2 without FMA): same results."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the portable flags below are x86-64 ones")
    flags = (*(f for f in native.FLAGS if not f.startswith("-march")), "-march=x86-64-v2")
    portable = native.build_variant(flags, tmp_path)
    assert portable.vector_width == 8
    rng = np.random.default_rng(8)
    for n, h, w_, c, m, k, s, d, pads, g, act, with_res in CONV_CASES:
        x = rng.standard_normal((n, h, w_, c)).astype(np.float32)
        w = rng.standard_normal((m, c // g, k, k)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        conv = ops.NhwcConv2d(portable, w, b, g, (s, s), (d, d), pads, ops.Epilogue(act, 0.0, 6.0))
        res = rng.standard_normal(conv.output_shape(x.shape)).astype(np.float32) if with_res else None
        ref = _reference_conv(x, w, b, g, (s, s), (d, d), pads, act if act != "LeakyRelu" else "", res)
        if act == "LeakyRelu":
            ref = np.where(ref < 0, 0.0, ref)  # slope 0.0 here
        np.testing.assert_allclose(conv(x, res), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    a = rng.standard_normal((20, 70)).astype(np.float32)
    bm = rng.standard_normal((70, 45)).astype(np.float32)
    np.testing.assert_allclose(ops.PackedMatMul(portable, bm, None, ops.Epilogue())(a), a @ bm, rtol=1e-4, atol=1e-4)
    t = rng.standard_normal((2, 37, 45)).astype(np.float32)
    np.testing.assert_array_equal(ops.transpose_last2(portable, t), t.transpose(0, 2, 1))
