"""Are the suite models' features right? The analyser's FLOPs and bytes against the same counts on recorded shapes.

The performance models stand on ``analysis.modelinfo``'s FLOPs, bytes and op classes. Its shapes come from shape
inference and folding; this check runs each suite model once through onnxruntime (graph optimisations off, every
intermediate tensor a graph output), records every tensor's real shape, and counts again on those. A ratio other
than 1 or a node with an unresolved shape means the features the fits read are wrong for that model.

Usage::

    python -m benchmarks.feature_audit                 # every inference-suite model and the training suite
    python -m benchmarks.feature_audit --suite heldout --no-training
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx

from analysis.modelinfo import ModelCost, analyse_onnx


@dataclass(frozen=True)
class AuditRow:
    model: str
    suite: str
    analysed: ModelCost
    reference: ModelCost

    @property
    def flops_ratio(self) -> float:
        return self.analysed.flops / self.reference.flops if self.reference.flops else math.nan

    @property
    def bytes_ratio(self) -> float:
        ref = self.reference.activation_bytes
        return self.analysed.activation_bytes / ref if ref else math.nan

    @property
    def classes_differ(self) -> list[str]:
        """Op classes whose node count or FLOPs differ between the two counts."""
        out: list[str] = []
        for klass, ref in self.reference.by_class.items():
            got = self.analysed.by_class[klass]
            if got.count != ref.count or not math.isclose(got.flops, ref.flops, rel_tol=1e-6, abs_tol=1.0):
                out.append(klass)
        return out


def recorded_shapes(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, tuple[tuple[int, ...], int]]:
    """Tensor name -> (shape, ONNX element type) of the graph inputs and every node output, from one onnxruntime run
    on ``feeds``."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    declared = {value.name for value in probe.graph.output}
    for node in probe.graph.node:
        for name in node.output:
            if name and name not in declared:
                probe.graph.output.append(onnx.ValueInfoProto(name=name))
                declared.add(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    values = session.run(names, feeds)
    return {
        name: (tuple(int(d) for d in value.shape), int(onnx.helper.np_dtype_to_tensor_dtype(value.dtype)))
        for name, value in [*feeds.items(), *zip(names, values, strict=True)]
        if isinstance(value, np.ndarray)
    }


def audit(model: onnx.ModelProto, feeds: dict[str, np.ndarray], name: str, suite: str) -> AuditRow:
    """The analyser's count and the count on recorded shapes of one model at the feeds' batch (1 in this module)."""
    batch = next(iter(feeds.values())).shape[0]
    return AuditRow(
        model=name,
        suite=suite,
        analysed=analyse_onnx(model, batch_size=batch),
        reference=analyse_onnx(model, batch_size=batch, recorded=recorded_shapes(model, feeds)),
    )


def _inference_models(suite_name: str) -> Iterator[tuple[str, str, onnx.ModelProto, dict[str, np.ndarray]]]:
    from benchmarks.models import suite

    for entry in suite(suite_name):
        tag = entry.tags[0] if entry.tags else suite_name
        yield entry.name, tag, entry.model(), entry.feeds(batch=1)


def _training_models() -> Iterator[tuple[str, str, onnx.ModelProto, dict[str, np.ndarray]]]:
    from benchmarks.trainers.base import SharedModel
    from benchmarks.training_suite import TASKS

    for task in TASKS:
        data = task.data(0)
        shared = SharedModel(task.build(0), data.x_train[:2])
        yield task.name, "training", onnx.load_from_string(shared.onnx_bytes()), {"input": data.x_train[:1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--suite", default="all", help="inference suite to check (benchmarks.models.suite)")
    parser.add_argument("--no-training", action="store_true", help="leave out the training suite")
    args = parser.parse_args(argv)
    sources = list(_inference_models(args.suite))
    if not args.no_training:
        sources += list(_training_models())
    print(
        f"{'model':<24} {'suite':<9} {'analysed MFLOPs':>15} {'reference':>11} {'ratio':>7} "
        f"{'act. bytes ratio':>16} {'unresolved':>10}  classes that differ"
    )
    wrong = 0
    for name, suite_name, model, feeds in sources:
        row = audit(model, feeds, name, suite_name)
        unresolved = len(row.analysed.unresolved_nodes)
        differ = row.classes_differ
        wrong += bool(differ or unresolved or not math.isclose(row.flops_ratio, 1.0, rel_tol=1e-6))
        print(
            f"{name:<24} {suite_name:<9} {row.analysed.flops / 1e6:>15.3f} {row.reference.flops / 1e6:>11.3f} "
            f"{row.flops_ratio:>7.4f} {row.bytes_ratio:>16.4f} {unresolved:>10}  {','.join(differ) or '-'}",
            flush=True,
        )
    print(f"{wrong} of {len(sources)} model(s) with features that differ from the recorded-shape count")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
