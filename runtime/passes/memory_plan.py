"""Static memory plan: which intermediate tensors share which buffers, once every shape is known.

    # value v written by a kernel that can write into a given buffer, shape fixed -> a slot, reused by values
    #   whose lifetimes do not overlap (best fit by size)
    # out = op(..., u, ...) where u's buffer dies at this op and op may work in place on u -> out takes u's slot
    # c = Concat(..., v, ...) where v's producer may write a slice of a wider tensor -> v lives in its slice of c's
    #   slot, which is taken from v's producer on (concat by placement: the Concat copies only the other parts)

Lifetimes follow aliasing: an op that may return a view of its input (Reshape, Transpose, Identity, control flow
reading outer values...) extends the lifetime of every buffer its input may live in, and a buffer that may be
visible through a graph output is never planned (the caller keeps outputs across runs). The executor builds the
plan from the shapes of a first run (one plan per input signature) and runs later calls into fixed buffers: no
allocation, no page faults, and in-place chains that stay in cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["MemoryPlan", "StepInfo", "plan_buffers"]

#: Slots are rounded up to this many bytes (so near-equal sizes share).
ALIGN = 64


@dataclass(frozen=True)
class StepInfo:
    """What the planner needs to know about one step of the executor's schedule."""

    #: Every name the step reads (subgraph reads included), and the names it writes.
    reads: tuple[str, ...]
    outputs: tuple[str, ...]
    #: The kernel can write its (single) output into a buffer it is given.
    writes_into: bool = False
    #: The kernel always returns new arrays (never a view of an input).
    fresh: bool = False
    #: Positions in ``reads`` whose buffer the output may overwrite (elementwise-compatible access).
    inplace: tuple[int, ...] = ()
    #: Bytes of the output as recorded by a run (None: not a fixed-size array).
    out_nbytes: int | None = None


@dataclass
class MemoryPlan:
    """``slot_of[value]`` indexes ``slot_bytes``; ``inplace`` counts outputs written over an input; ``placed``
    maps a value that lives in a slice of another's slot to that value."""

    slot_bytes: list[int] = field(default_factory=list)
    slot_of: dict[str, int] = field(default_factory=dict)
    inplace: int = 0
    placed: dict[str, str] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(self.slot_bytes)


def _rounded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_buffers(steps: Sequence[StepInfo], keep: set[str], placed: Mapping[str, str] | None = None) -> MemoryPlan:
    """Assign slots to the outputs of ``steps`` that can be planned; ``keep`` names values the caller receives.

    ``placed`` offers values to live in a slice of another value's slot (part -> concat output): the caller has
    checked that the part's producer can write there and that only the concat reads it. An offer stands while
    both values are planned; ``MemoryPlan.placed`` lists those that stood.
    """
    offers = dict(placed or {})
    candidates = {
        s.outputs[0]: i
        for i, s in enumerate(steps)
        if s.writes_into and len(s.outputs) == 1 and s.outputs[0] and s.out_nbytes and s.outputs[0] not in keep
    }
    last_use: dict[str, int] = {}
    for i, s in enumerate(steps):
        for name in s.reads:
            last_use[name] = i
    while True:
        inside = {v: c for v, c in offers.items() if v in candidates and c in candidates}
        roots = _alias_roots(steps, candidates, inside)
        end: dict[str, int] = {c: i for c, i in candidates.items() if c not in inside}
        exposed: set[str] = set()
        for value, owners in roots.items():
            for c in owners:
                end[c] = max(end[c], last_use.get(value, -1))
                if value in keep:
                    exposed.add(c)
        if not exposed:
            break
        for c in exposed:
            del candidates[c]
    # a container's slot is taken at the first step that writes into it
    opens: dict[int, list[str]] = {}
    for c in set(inside.values()):
        first = min([candidates[c]] + [candidates[v] for v, host in inside.items() if host == c])
        opens.setdefault(first, []).append(c)
    own = {v: i for v, i in candidates.items() if v not in inside}
    plan = _assign(steps, own, end, roots, opens)
    plan.placed = inside
    return plan


def _alias_roots(
    steps: Sequence[StepInfo], candidates: dict[str, int], inside: Mapping[str, str]
) -> dict[str, frozenset[str]]:
    """For every value, the planned buffers it may point into."""
    roots: dict[str, frozenset[str]] = {}
    for s in steps:
        from_inputs: frozenset[str] = frozenset()
        if not s.fresh:
            for name in s.reads:
                from_inputs |= roots.get(name, frozenset())
        for out in s.outputs:
            if not out:
                continue
            if out in inside:
                roots[out] = frozenset({inside[out]})
            else:
                roots[out] = frozenset({out}) if out in candidates else from_inputs
    return roots


def _assign(
    steps: Sequence[StepInfo],
    candidates: dict[str, int],
    end: dict[str, int],
    roots: dict[str, frozenset[str]],
    opens: Mapping[int, list[str]],
) -> MemoryPlan:
    plan = MemoryPlan()
    owner_end: dict[int, int] = {}  # slot -> last step index its current value is needed
    free: list[int] = []
    for i, s in enumerate(steps):
        # slots whose value was last needed before this step are free again
        for slot, last in list(owner_end.items()):
            if last < i:
                free.append(slot)
                del owner_end[slot]
        wanted = [(c, steps[candidates[c]].out_nbytes) for c in opens.get(i, ())]
        out = s.outputs[0] if s.outputs else ""
        if out in candidates and out not in plan.slot_of:
            wanted.append((out, s.out_nbytes))
        for value, nbytes in wanted:
            need = _rounded(int(nbytes or 0))
            reused = None if value != out else _inplace_slot(s, i, plan, candidates, end, roots, need)
            if reused is not None:
                plan.inplace += 1
                slot = reused
            else:
                fit = _best_fit(free, plan.slot_bytes, need)
                if fit is None:
                    plan.slot_bytes.append(need)
                    slot = len(plan.slot_bytes) - 1
                else:
                    slot = fit
                    free.remove(slot)
                    plan.slot_bytes[slot] = max(plan.slot_bytes[slot], need)
            plan.slot_of[value] = slot
            owner_end[slot] = end[value]
    return plan


def _inplace_slot(
    s: StepInfo,
    i: int,
    plan: MemoryPlan,
    candidates: dict[str, int],
    end: dict[str, int],
    roots: dict[str, frozenset[str]],
    need: int,
) -> int | None:
    for pos in s.inplace:
        if pos >= len(s.reads):
            continue
        src = s.reads[pos]
        # only the planned buffer itself (not a view of it), dying exactly here, read once by this step
        if src not in candidates or src not in plan.slot_of or end.get(src) != i or roots.get(src) != {src}:
            continue
        if sum(1 for r in s.reads if r == src) != 1:
            continue
        slot = plan.slot_of[src]
        if plan.slot_bytes[slot] >= need:
            return slot
    return None


def _best_fit(free: list[int], sizes: list[int], need: int) -> int | None:
    """The smallest free slot holding ``need`` bytes, else the largest free one (it will be enlarged)."""
    if not free:
        return None
    fitting = [s for s in free if sizes[s] >= need]
    if fitting:
        return min(fitting, key=lambda s: sizes[s])
    return max(free, key=lambda s: sizes[s])
