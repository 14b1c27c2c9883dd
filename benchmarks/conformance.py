"""Run the ONNX backend node test suite through ``runtime.compile_model`` and report per-op results.

The suite ships with the ``onnx`` wheel as code (``onnx.backend.test.case.node.collect_testcases()``: about 1,900
single-op models with inputs and expected outputs). Each case is compiled and run once, then judged with onnx's
own ``Runner.assert_similar_outputs`` at the case's ``rtol``/``atol``. Cases whose graph contains a random op
(Bernoulli, RandomUniformLike, Dropout in training mode, ...) are judged on output count, shape and dtype only;
the report marks them ``shape-only``.

    python -m benchmarks.conformance [--ops Relu,Conv] [--verbose] [--json FILE] [--timeout S]

The last line printed is always ``N passed, M failed``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import onnx

from runtime.loader import all_graphs

#: Ops whose outputs are random: judged on shape and dtype only.
RANDOM_OPS = frozenset(
    {"Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial"}
)
DEFAULT_TIMEOUT_S = 60.0


@dataclass
class CaseResult:
    name: str
    op: str
    passed: bool
    reason: str = ""
    seconds: float = 0.0
    shape_only: bool = False


class CaseTimeout(Exception):
    """A case ran past its time limit."""


def load_cases() -> list[Any]:
    """All node test cases (generated in-process by onnx, ~5 s)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return list(collect_testcases())


def case_ops(cases: Sequence[Any]) -> dict[str, str]:
    """Case name -> the op it tests (an ``_expanded`` case belongs to the op of the case it expands)."""
    ops: dict[str, str] = {}
    for case in cases:
        nodes = case.model.graph.node
        if len(nodes) == 1:
            ops[case.name] = nodes[0].op_type
    for case in cases:
        if case.name in ops:
            continue
        base = re.sub(r"_expanded(_ver\d+)?$", "", case.name)
        if base in ops:
            ops[case.name] = ops[base]
            continue
        main = [n.op_type for n in case.model.graph.node if n.op_type not in ("Constant", "Identity")]
        ops[case.name] = main[-1] if main else case.model.graph.node[0].op_type
    return ops


def is_random(model: onnx.ModelProto) -> bool:
    """True when the graph contains a random op (or Dropout asked to train)."""
    for node in _all_nodes(model.graph):
        if node.op_type in RANDOM_OPS:
            return True
        if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
            return True
    return False


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    return (node for g in all_graphs(graph) for node in g.node)


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise CaseTimeout in the main thread after ``seconds`` (no-op where SIGALRM is unavailable).

    An alarm already set (a caller's own limit) is set again afterwards with the time it has left, or at once
    when that time ran out during the block.
    """
    if seconds <= 0 or not hasattr(signal, "setitimer"):
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise CaseTimeout(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, _raise)
    outer_left, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left > 0:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - started), 1e-3))


def _normalize(value: Any) -> Any:
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


def _assert_shapes(refs: Sequence[Any], outs: Sequence[Any]) -> None:
    if len(refs) != len(outs):
        raise AssertionError(f"{len(outs)} outputs, expected {len(refs)}")
    for i, (ref, out) in enumerate(zip(refs, outs, strict=True)):
        if isinstance(ref, list):
            _assert_shapes(ref, out)
            continue
        if np.shape(out) != np.shape(ref) or np.asarray(out).dtype != np.asarray(ref).dtype:
            raise AssertionError(
                f"output {i}: got {np.asarray(out).dtype}{list(np.shape(out))}, "
                f"expected {np.asarray(ref).dtype}{list(np.shape(ref))}"
            )


def judge(runner: Any, refs: Sequence[Any], outs: Sequence[Any], rtol: float, atol: float) -> None:
    """onnx's comparator, applied per output and, for sequences, per element.

    ``Runner.assert_similar_outputs`` recurses into sequences by calling itself on single elements, which fails
    with a TypeError on 0-d arrays (``len()`` of a scalar); comparing element by element avoids that.
    """
    if len(refs) != len(outs):
        raise AssertionError(f"{len(outs)} outputs, expected {len(refs)}")
    for ref, out in zip(refs, outs, strict=True):
        if isinstance(ref, list):
            if not isinstance(out, list):
                raise AssertionError(f"expected a sequence, got {type(out).__name__}")
            if len(ref) != len(out):
                raise AssertionError(f"sequence of {len(out)} elements, expected {len(ref)}")
            for r, o in zip(ref, out, strict=True):
                runner.assert_similar_outputs([r], [o], rtol=rtol, atol=atol)
        else:
            runner.assert_similar_outputs([ref], [out], rtol=rtol, atol=atol)


def run_case(case: Any, op: str = "", timeout_s: float = DEFAULT_TIMEOUT_S) -> CaseResult:
    """Compile and run one case; never raises."""
    from onnx.backend.test.runner import Runner

    from runtime import KernelError, ModelCheckError, RuntimeModelError, UnsupportedOpError, compile_model

    shape_only = is_random(case.model)
    started = time.perf_counter()
    result = CaseResult(case.name, op, False, shape_only=shape_only)
    try:
        with time_limit(timeout_s), warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            exe = compile_model(case.model)
            for inputs, expected in case.data_sets:
                feeds = dict(zip(exe.input_names, [_normalize(x) for x in inputs], strict=False))
                outputs = exe.run(feeds)
                got = [outputs[name] for name in exe.output_names]
                refs = [_normalize(x) for x in expected]
                if shape_only:
                    _assert_shapes(refs, got)
                else:
                    judge(Runner, refs, got, case.rtol, case.atol)
        result.passed = True
    except Exception as exc:  # any failure, a crash included, is this case's reason; the run goes on
        kinds = ((UnsupportedOpError, "unsupported"), (KernelError, "kernel"), (ModelCheckError, "check"),
                 (RuntimeModelError, "model"), (CaseTimeout, "timeout"), (AssertionError, "mismatch"))
        kind = next((name for cls, name in kinds if isinstance(exc, cls)), f"error: {type(exc).__name__}")
        result.reason = f"{kind}: {_short(exc)}"
    result.seconds = round(time.perf_counter() - started, 4)
    return result


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_conformance(
    ops: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[CaseResult]:
    """Run the suite (optionally only cases of ``ops`` or with ``names``); one result per case."""
    cases = load_cases()
    op_of = case_ops(cases)
    wanted_ops = set(ops) if ops else None
    wanted_names = set(names) if names else None
    results = []
    for case in cases:
        op = op_of[case.name]
        if wanted_ops is not None and op not in wanted_ops:
            continue
        if wanted_names is not None and case.name not in wanted_names:
            continue
        results.append(run_case(case, op, timeout_s))
    return results


def per_op_table(results: Sequence[CaseResult]) -> list[tuple[str, int, int, str]]:
    """(op, passed, failed, most common failure reason) sorted by failures then op name."""
    by_op: dict[str, list[CaseResult]] = defaultdict(list)
    for r in results:
        by_op[r.op].append(r)
    rows = []
    for op, rs in by_op.items():
        failed = [r for r in rs if not r.passed]
        reason = Counter(_reason_kind(r.reason) for r in failed).most_common(1)[0][0] if failed else ""
        rows.append((op, len(rs) - len(failed), len(failed), reason))
    return sorted(rows, key=lambda row: (-row[2], row[0]))


def _reason_kind(reason: str) -> str:
    return reason[:100]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.conformance", description=__doc__.split("\n")[0])
    parser.add_argument("--ops", help="comma-separated op types to run (default: all)")
    parser.add_argument("--verbose", action="store_true", help="print every case with its result")
    parser.add_argument("--json", metavar="FILE", help="write per-case results as JSON")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds allowed per case")
    args = parser.parse_args(argv)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else None
    started = time.perf_counter()
    results = run_conformance(ops, timeout_s=args.timeout)
    if args.verbose:
        for r in results:
            status = "PASS" if r.passed else "FAIL"
            extra = " (shape-only)" if r.shape_only else ""
            print(f"{status} {r.name} [{r.op}]{extra} {r.seconds:.3f}s {r.reason}")
    rows = per_op_table(results)
    width = max([len(r[0]) for r in rows] + [2])
    print(f"{'op':<{width}}  passed  failed  main reason")
    for op, ok, bad, reason in rows:
        print(f"{op:<{width}}  {ok:>6}  {bad:>6}  {reason}")
    shape_only = sum(1 for r in results if r.shape_only)
    elapsed = time.perf_counter() - started
    print(
        f"{len(rows)} ops, {len(results)} cases in {elapsed:.1f} s; {shape_only} random-output cases judged on "
        "shape/dtype only"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
    passed = sum(1 for r in results if r.passed)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
