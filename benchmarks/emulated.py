"""Correctness runs for another architecture's Python under qemu: model outputs and conformance cases.

The host prepares the work (``export_cases`` writes ONNX node-suite cases as files: generating them takes ~5 s
natively and minutes under emulation); the emulated Python runs it with the runtime and its cross-built kernels
(``APPOPT_NATIVE_LIB``) and prints results. Only correctness comes out of here: timings under emulation mean
nothing about the target and are never recorded.

    python -m benchmarks.emulated outputs MODEL INPUTS.npz OUT.npz      # run a model, save its outputs
    python -m benchmarks.emulated conformance CASES_DIR                # run exported cases, judge them

The last line of ``conformance`` is ``N passed, M failed``, as in :mod:`benchmarks.conformance`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx


def export_cases(ops: Sequence[str], dest: Path) -> list[str]:
    """Write the node-suite cases of ``ops`` under ``dest`` (one directory per case: ``model.onnx``,
    ``data_N.npz`` with ``in_i``/``out_i`` arrays, ``tolerance.txt``); returns the case names. Cases whose inputs
    or outputs are sequences or optionals are left out (none of the light models' ops has them)."""
    from benchmarks.conformance import _normalize, case_ops, load_cases

    cases = load_cases()
    op_of = case_ops(cases)
    wanted = set(ops)
    names = []
    for case in cases:
        if op_of.get(case.name) not in wanted:
            continue
        sets = [([_normalize(x) for x in ins], [_normalize(x) for x in outs]) for ins, outs in case.data_sets]
        if any(not isinstance(v, np.ndarray) for ins, outs in sets for v in (*ins, *outs)):
            continue
        where = dest / case.name
        where.mkdir(parents=True, exist_ok=True)
        onnx.save(case.model, str(where / "model.onnx"))
        for n, (ins, outs) in enumerate(sets):
            arrays = {f"in_{i}": v for i, v in enumerate(ins)} | {f"out_{i}": v for i, v in enumerate(outs)}
            np.savez(where / f"data_{n}.npz", **arrays)
        (where / "tolerance.txt").write_text(f"{op_of[case.name]} {case.rtol!r} {case.atol!r}\n")
        names.append(case.name)
    return names


def load_exported(where: Path) -> tuple[str, Any]:
    """One exported case as ``(op, case)``, shaped like the suite's own cases for ``conformance.run_case``."""
    op, rtol, atol = (where / "tolerance.txt").read_text().split()
    data_sets = []
    for path in sorted(where.glob("data_*.npz"), key=lambda p: int(p.stem.split("_")[1])):
        with np.load(path) as data:
            ins = [data[f"in_{i}"] for i in range(sum(k.startswith("in_") for k in data.files))]
            outs = [data[f"out_{i}"] for i in range(sum(k.startswith("out_") for k in data.files))]
        data_sets.append((ins, outs))
    model = onnx.load(str(where / "model.onnx"))
    return op, SimpleNamespace(name=where.name, model=model, data_sets=data_sets, rtol=float(rtol), atol=float(atol))


def _conformance(cases_dir: Path) -> int:
    from benchmarks.conformance import run_case
    from runtime import native

    print(f"kernels: {native.status()}")
    passed = failed = 0
    for where in sorted(p for p in cases_dir.iterdir() if (p / "model.onnx").is_file()):
        op, case = load_exported(where)
        result = run_case(case, op)
        if result.passed:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {result.name} ({op}): {result.reason}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def _outputs(model: str, inputs: Path, out: Path) -> int:
    from runtime import compile_model, native

    exe = compile_model(model)
    with np.load(inputs) as data:
        feeds = {name: data[name] for name in data.files}
    results = exe.run(feeds)
    np.savez(out, **{name: np.asarray(results[name]) for name in exe.output_names})  # type: ignore[arg-type]
    print(f"kernels: {native.status()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.emulated", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    outs = sub.add_parser("outputs", help="run a model on inputs from an .npz and save its outputs")
    outs.add_argument("model")
    outs.add_argument("inputs", type=Path)
    outs.add_argument("out", type=Path)
    conf = sub.add_parser("conformance", help="run exported node-suite cases")
    conf.add_argument("cases", type=Path)
    args = parser.parse_args(argv)
    if args.command == "outputs":
        return _outputs(args.model, args.inputs, args.out)
    return _conformance(args.cases)


if __name__ == "__main__":
    sys.exit(main())
