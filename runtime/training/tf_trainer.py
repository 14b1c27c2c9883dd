"""``TfTrainer``: the runtime's ``Trainer`` interface with TensorFlow doing the work (``--engine tensorflow`` and
``--engine tensorflow-xla``).

A TensorFlow training plan for an ONNX model, with no command of its own, runs ``python -m runtime train MODEL
--engine tensorflow`` (``tensorflow-xla`` when the route compiles with XLA): the same data, batch order (a seeded
permutation per epoch), epoch lines, checkpoints and ONNX export as the runtime's own trainer, with the model run as
``runtime.training.tf_module.OnnxTfGraph`` and the step a ``tf.function`` (``jit_compile=True`` for XLA), as
Keras's ``Model.fit`` runs it. SGD keeps torch's momentum rule (``v = m*v + g; w -= lr*v``) and Adam torch's
bias-corrected form, both with torch's ``weight_decay`` (L2 added to the gradient). fp32 only: the graph's ops are
TensorFlow's fp32 kernels.

Only imported when TensorFlow is asked for: the runtime itself needs NumPy and onnx alone.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tensorflow as tf

from runtime.atomic import write_atomic
from runtime.ir import Value
from runtime.loader import ModelSource, load_model_proto
from runtime.training.config import TrainConfig, TrainingError
from runtime.training.data import Features, as_feeds, class_ids
from runtime.training.epochs import checkpoint_to_resume, loss_reads, sample_count, train_epochs
from runtime.training.export import export_trained
from runtime.training.tf_module import OnnxTfGraph
from runtime.training.trainer import EpochStats

#: The checkpoint file inside ``config.checkpoint_dir``.
CHECKPOINT = "tf-checkpoint.npz"


class TfTrainer:
    """Trains ``model`` with ``config`` in TensorFlow (``jit_compile``: the step compiled by XLA); ``resume=True``
    continues from ``config.checkpoint_dir``."""

    def __init__(
        self, model: ModelSource, config: TrainConfig | None = None, *, resume: bool = False, jit_compile: bool = False
    ) -> None:
        self.config = config or TrainConfig()
        self.config.validate()
        engine = "tensorflow-xla" if jit_compile else "tensorflow"
        if self.config.loss != "cross_entropy":
            raise TrainingError(f"--engine {engine} trains classifiers (cross_entropy) only")
        if self.config.precision != "fp32":
            raise TrainingError(f"--engine {engine}: --precision {self.config.precision}: it trains fp32 only")
        if self.config.threads:
            _pin_threads(self.config.threads)
        tf.random.set_seed(self.config.seed)
        self.engine = engine
        self.proto = load_model_proto(model)
        self.graph = OnnxTfGraph(self.proto)
        self.output = self.config.output or self.graph.output_names[0]
        self.reads, self.logits = loss_reads(self.proto, self.output)
        if self.logits not in self.graph.output_names:
            self.graph.output_names.append(self.logits)
        inputs = {vi.name: Value.from_type(vi.name, vi.type) for vi in self.proto.graph.input}
        self._inputs = {name: inputs[name] for name in self.graph.input_names}
        self.weights = self.graph.trainable_variables
        if not self.weights:
            raise TrainingError("the model has no trainable float initializer")
        self.slots = {
            name: [tf.Variable(tf.zeros_like(w), trainable=False) for w in self.weights]
            for name in (("m", "v") if self.config.optimizer == "adam" else ("v",))
        }
        self.steps_taken = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._train = tf.function(self._train_step, jit_compile=jit_compile)
        self._scores = tf.function(self._inference, jit_compile=jit_compile)
        self.epoch = 0
        self.history: list[EpochStats] = []
        self.resumed_from: Path | None = None
        if resume and checkpoint_to_resume(self.config, CHECKPOINT):
            self.load_checkpoint()

    def _loss(self, scores: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
        if self.reads == "LogSoftmax":
            picked = tf.gather(scores, target, axis=1, batch_dims=1)
            return -tf.reduce_mean(picked)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target, logits=scores))

    def _train_step(self, inputs: list[tf.Tensor], target: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        cfg = self.config
        with tf.GradientTape() as tape:
            scores = self.graph(inputs, training=True)[self.logits]
            loss = self._loss(scores, target)
        grads = tape.gradient(loss, self.weights)
        self.steps_taken.assign_add(1)
        t = tf.cast(self.steps_taken, tf.float32)
        for i, (w, g) in enumerate(zip(self.weights, grads, strict=True)):
            if g is None:  # not reached by the loss: torch leaves such a parameter alone too
                continue
            g = tf.convert_to_tensor(g)  # an embedding's gradient arrives as slices
            if cfg.weight_decay:
                g = g + cfg.weight_decay * w
            if cfg.optimizer == "adam":
                m, v = self.slots["m"][i], self.slots["v"][i]
                b1, b2 = cfg.betas
                m.assign(b1 * m + (1.0 - b1) * g)
                v.assign(b2 * v + (1.0 - b2) * g * g)
                m_hat, v_hat = m / (1.0 - b1**t), v / (1.0 - b2**t)
                w.assign_sub(cfg.lr * m_hat / (tf.sqrt(v_hat) + cfg.adam_eps))
            else:
                v = self.slots["v"][i]
                v.assign(cfg.momentum * v + g)
                w.assign_sub(cfg.lr * v)
        return loss, scores

    def _inference(self, inputs: list[tf.Tensor]) -> tf.Tensor:
        return self.graph(inputs, training=False)[self.logits]

    def _arrays(self, x: Features) -> list[np.ndarray]:
        feeds = as_feeds(x, self._inputs)
        return [np.ascontiguousarray(feeds[n]) for n in self.graph.input_names]

    def fit(
        self,
        x: Features,
        y: np.ndarray,
        *,
        validation: tuple[Features, np.ndarray] | None = None,
        on_epoch: Callable[[EpochStats], None] | None = None,
    ) -> list[EpochStats]:
        """Train up to ``config.epochs`` epochs (counting those a resumed checkpoint already did)."""
        inputs, target = self._arrays(x), class_ids(y)
        n = sample_count(inputs, target)

        def step(idx: np.ndarray) -> tuple[float, int]:
            loss, scores = self._run(self._train, [tf.constant(a[idx]) for a in inputs], tf.constant(target[idx]))
            return float(loss), int((np.argmax(scores.numpy(), axis=1) == target[idx]).sum())

        return train_epochs(self, n, step, validation, on_epoch)

    def _run(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``, TensorFlow's failure (an op XLA cannot compile, memory) said in one line."""
        try:
            return function(*args)
        except tf.errors.OpError as error:
            text = str(error.message).strip()
            first = text.splitlines()[0] if text else type(error).__name__
            raise TrainingError(f"--engine {self.engine}: TensorFlow failed: {first}") from None

    def evaluate(self, x: Features, y: np.ndarray, batch_size: int = 512) -> dict[str, float]:
        """Mean loss and accuracy of the model (in inference mode) on ``(x, y)``."""
        inputs, target = self._arrays(x), class_ids(y)
        total, correct = 0.0, 0
        for start in range(0, len(target), batch_size):
            part = slice(start, start + batch_size)
            scores = self._run(self._scores, [tf.constant(a[part]) for a in inputs])
            total += float(self._loss(scores, tf.constant(target[part]))) * len(target[part])
            correct += int((np.argmax(scores.numpy(), axis=1) == target[part]).sum())
        n = max(len(target), 1)
        return {"loss": total / n, "accuracy": correct / n}

    def export(self) -> onnx.ModelProto:
        """The original model with the trained weights and running statistics."""
        engine = f"{self.engine} {tf.__version__}"
        summary = {"epochs": self.epoch, "optimizer": self.config.optimizer, "engine": engine}
        return export_trained(self.proto, self.graph.values(), {"appopt.training": json.dumps(summary)})

    # -- checkpoints (after every epoch, atomic) ------------------------------------------------------------------
    def _state(self) -> dict[str, np.ndarray]:
        state = {f"var/{name}": v.numpy() for name, v in self.graph.variables.items()}
        for slot, values in self.slots.items():
            state.update({f"{slot}/{i}": s.numpy() for i, s in enumerate(values)})
        meta = {"epoch": self.epoch, "optimizer_name": self.config.optimizer, "steps": int(self.steps_taken.numpy()),
                "history": [h.as_dict() for h in self.history]}  # fmt: skip
        state["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        return state

    def save_checkpoint(self) -> Path | None:
        if self.config.checkpoint_dir is None:
            return None
        state = self._state()
        return write_atomic(Path(self.config.checkpoint_dir) / CHECKPOINT, lambda f: np.savez(f, **state))  # type: ignore[arg-type]

    def load_checkpoint(self) -> None:
        directory = Path(self.config.checkpoint_dir or ".")
        try:
            with np.load(io.BytesIO((directory / CHECKPOINT).read_bytes())) as saved:
                state = {k: saved[k] for k in saved.files}
            meta = json.loads(state.pop("meta").tobytes().decode())
            if meta.get("optimizer_name") != self.config.optimizer:
                raise TrainingError(
                    f"checkpoint in {str(directory)!r} was made with optimizer {meta.get('optimizer_name')!r}, "
                    f"not {self.config.optimizer!r}"
                )
            wanted = self._state()
            wanted.pop("meta")
            if set(state) != set(wanted) or any(state[k].shape != wanted[k].shape for k in wanted):
                raise ValueError("its tensors differ from this model's")
            for name, v in self.graph.variables.items():
                v.assign(state[f"var/{name}"])
            for slot, values in self.slots.items():
                for i, s in enumerate(values):
                    s.assign(state[f"{slot}/{i}"])
            self.steps_taken.assign(int(meta["steps"]))
            self.epoch = int(meta["epoch"])
            self.history = [EpochStats(**h) for h in meta.get("history", [])]
        except TrainingError:
            raise
        except (KeyError, OSError, ValueError, TypeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TrainingError(f"checkpoint in {str(directory)!r} does not fit this model: {first}") from None
        self.resumed_from = directory


def _pin_threads(threads: int) -> None:
    """intra-op ``threads``, inter-op 1; TensorFlow fixes them when it first runs an op, once per process."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # this process's TensorFlow already runs: its pools stay as they are
