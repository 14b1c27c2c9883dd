"""TensorFlow/Keras, with and without XLA: the shared model's ONNX export run as TensorFlow ops and trained by the
step a Keras ``Model.fit`` runs, a ``tf.function`` around the forward pass, the tape's gradients and the update.

``keras`` traces that step with ``tf.function`` (Keras's default); ``keras-xla`` compiles it with
``tf.function(jit_compile=True)``, Keras's ``jit_compile`` switch. The model is ``runtime.training.tf_module``'s
``OnnxTfGraph`` of ``SharedModel.onnx_bytes()``, so the initial weights are the other trainers'. SGD keeps torch's
momentum rule (``v = m*v + g; w -= lr*v``) and the loss is softmax cross-entropy on the first output.

TensorFlow fixes its thread pools when it first runs an op, once per process: ``threads_fixed_per_process`` tells
the driver (``benchmarks.training_bench.measure``) to run each thread count in a process of its own. A session
asked for another count than the process's raises ``ThreadsFixed`` with that reason.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from benchmarks.trainers.base import MOMENTUM, SharedModel


class ThreadsFixed(RuntimeError):
    """This process's TensorFlow already runs with another thread count."""


def _tensorflow() -> Any:
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # each session traces its own step: TensorFlow's retracing notice is expected
    return tf


def pin_threads(threads: int) -> None:
    """intra-op ``threads``, inter-op 1, unless this process's TensorFlow already runs (then it must match)."""
    tf = _tensorflow()
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # already initialised: the values set then stay; checked below
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    inter = tf.config.threading.get_inter_op_parallelism_threads()
    if (intra, inter) != (threads, 1):
        raise ThreadsFixed(
            f"tensorflow: this process already runs with intra-op {intra or 'default'} and inter-op "
            f"{inter or 'default'} threads (set once per process); {threads} thread(s) need a process of their own"
        )


class KerasSession:
    def __init__(self, onnx_bytes: bytes, lr: float, jit_compile: bool) -> None:
        import onnx

        from runtime.training.tf_module import OnnxTfGraph

        tf = self.tf = _tensorflow()
        self.graph = OnnxTfGraph(onnx.load_from_string(onnx_bytes))
        self.output = self.graph.output_names[0]
        self.weights = self.graph.trainable_variables
        self.velocity = [tf.Variable(tf.zeros_like(w), trainable=False) for w in self.weights]
        self.lr = lr
        self._train = tf.function(self._train_step, jit_compile=jit_compile)
        self._logits = tf.function(self._inference, jit_compile=jit_compile)

    def _train_step(self, x: Any, y: Any) -> Any:
        tf = self.tf
        with tf.GradientTape() as tape:
            logits = self.graph([x], training=True)[self.output]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        grads = tape.gradient(loss, self.weights)
        for w, v, g in zip(self.weights, self.velocity, grads, strict=True):
            if g is None:  # not reached by the loss: torch leaves such a parameter alone too
                continue
            v.assign(MOMENTUM * v + tf.convert_to_tensor(g))  # an embedding's gradient arrives as slices
            w.assign_sub(self.lr * v)
        return loss

    def _inference(self, x: Any) -> Any:
        return self.graph([x], training=False)[self.output]

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        return float(self._train(self.tf.convert_to_tensor(x), self.tf.convert_to_tensor(y)))

    def accuracy(self, x: np.ndarray, y: np.ndarray, batch: int = 512) -> float:
        correct = 0
        for start in range(0, len(y), batch):
            logits = self._logits(self.tf.convert_to_tensor(x[start : start + batch])).numpy()
            correct += int((logits.argmax(1) == y[start : start + batch]).sum())
        return correct / max(1, len(y))

    def optimizer_state_bytes(self) -> int:
        return sum(int(v.shape.num_elements()) * v.dtype.size for v in self.velocity)


class Keras:
    framework = "tensorflow"
    precision = "fp32"
    layout = "NHWC"  # (``OnnxTfGraph`` runs 4-D activations NHWC)
    #: TensorFlow's thread pools are set once per process: the driver runs each thread count in its own process.
    threads_fixed_per_process = True

    def __init__(self, xla: bool) -> None:
        self.name = "keras-xla" if xla else "keras"
        self.compiler = "xla" if xla else "none"
        self.xla = xla

    def unavailable(self) -> str | None:
        return None if importlib.util.find_spec("tensorflow") else "tensorflow: extra not installed"

    def session(self, model: SharedModel, lr: float, threads: int, batch: int, seed: int) -> KerasSession:
        pin_threads(threads)
        _tensorflow().random.set_seed(seed)
        return KerasSession(model.onnx_bytes(), lr, self.xla)

    def versions(self) -> dict[str, Any]:
        tf = _tensorflow()
        import keras

        return {"tensorflow": tf.__version__, "keras": keras.__version__}


PLUGIN = Keras(xla=False)
XLA_PLUGIN = Keras(xla=True)
