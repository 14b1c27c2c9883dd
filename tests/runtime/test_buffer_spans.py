"""``BufferSpans``: the planned executor's one-bisection test of whether an output lives in its reusable buffers,
against ``np.may_share_memory`` (the per-buffer test it replaced) on views of every kind."""

from __future__ import annotations

import numpy as np

from runtime.static_plan import BufferSpans, byte_bounds


def test_byte_bounds_are_the_first_and_past_the_last_byte_of_any_view() -> None:
    a = np.zeros((5, 6, 7), np.float32)
    for view in (a, a[::-1], a[:, ::-2, 1:], a.T, a[2:3, 1], a[..., ::-1].swapaxes(0, 2)):
        first = view.__array_interface__["data"][0]  # the address of view[0, 0, ...]
        offsets = sum(i * s for i, s in zip(np.indices(view.shape), view.strides, strict=True))
        assert byte_bounds(view) == (first + int(np.min(offsets)), first + int(np.max(offsets)) + view.itemsize)


def test_overlaps_agrees_with_may_share_memory() -> None:
    rng = np.random.default_rng(0)
    arena = np.zeros(4096, np.float32)
    buffers = [arena[0:100], arena[80:300], arena[1000:1500], np.zeros(50), np.zeros((8, 9))]  # two overlap
    spans = BufferSpans(buffers)
    others = [np.zeros(10), arena[300:1000], arena[1500:], arena[:0]]
    candidates = [*others, *(b[::-1] for b in buffers), buffers[4].T]
    for _ in range(200):
        start = int(rng.integers(0, 4000))
        stop = int(rng.integers(start, 4096))
        candidates.append(arena[start : stop : int(rng.integers(1, 4))])
    for value in candidates:
        assert spans.overlaps(value) == any(np.may_share_memory(value, b) for b in buffers), value.shape
