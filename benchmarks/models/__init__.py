"""The benchmark model suite: networks built in code with seeded weights, the onnx wheel's light model zoo, and tiny
models (MLPerf Tiny-like, LeNet-5, a 2-layer BERT) whose times are mostly per-query and per-node overhead.

Every entry is a ``SuiteModel``: a name, an architecture family (the unit of leave-one-architecture-out), a builder
that returns an ``onnx.ModelProto``, and seeded input feeds for any batch it supports.

Example::

    >>> from benchmarks.models import suite, get_model
    >>> [m.name for m in suite("core")]
    ['resnet50', 'resnet18', 'mobilenetv2', 'bert', 'mlp']
    >>> m = get_model("mlp")
    >>> feeds = m.feeds(batch=8)           # {"input": float32 array of shape (8, 784)}
    >>> proto = m.model()                  # built once, then cached
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx

from benchmarks.models import breadth, heldout
from benchmarks.models.convnets import mobilenet_v2, resnet18, resnet50
from benchmarks.models.tiny import bert_tiny, ds_cnn, fc_autoencoder, lenet5, mobilenet_v1, resnet8
from benchmarks.models.transformer import VOCAB, bert_encoder, mlp
from benchmarks.models.zoo import LIGHT_MODELS, light_model_path, load_light_model


@dataclass(frozen=True)
class InputSpec:
    """One graph input: its shape without the batch axis, dtype, and the range seeded values are drawn from."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    #: Integer inputs are drawn uniformly from [low, high); float inputs from N(0, 1).
    low: int = 0
    high: int = 1


@dataclass(frozen=True)
class SuiteModel:
    """A benchmark model: how to build it, what to feed it, and which family it belongs to."""

    name: str
    #: Architecture family: models sharing one are held out together when evaluating performance models.
    family: str
    builder: Callable[[], onnx.ModelProto] = field(repr=False, compare=False)
    inputs: tuple[InputSpec, ...]
    #: "built" (in code) or "onnx-light-zoo".
    source: str = "built"
    #: A model whose graph fixes its batch runs only at that batch.
    fixed_batch: int | None = None
    description: str = ""
    tags: tuple[str, ...] = ()

    def model(self) -> onnx.ModelProto:
        """The ONNX model (built or loaded once per process)."""
        return _cached_model(self.name)

    def supports_batch(self, batch: int) -> bool:
        return batch >= 1 and (self.fixed_batch is None or batch == self.fixed_batch)

    def feeds(self, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded inputs for one query of ``batch`` samples."""
        if not self.supports_batch(batch):
            raise ValueError(f"{self.name} runs only at batch {self.fixed_batch}, not {batch}")
        rng = np.random.default_rng(seed)
        out: dict[str, np.ndarray] = {}
        for spec in self.inputs:
            shape = (batch, *spec.shape)
            if spec.dtype.startswith("int"):
                out[spec.name] = rng.integers(spec.low, spec.high, size=shape).astype(spec.dtype)
            else:
                out[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        return out


_IMAGE = (InputSpec("input", (3, 224, 224)),)


def _zoo_entry(stem: str) -> SuiteModel:
    name, family = LIGHT_MODELS[stem]
    input_name = "gpu_0/data_0" if stem in ("light_resnet50", "light_shufflenet", "light_zfnet512") else "data_0"
    return SuiteModel(
        name=name,
        family=family,
        builder=functools.partial(load_light_model, stem),
        inputs=(InputSpec(input_name, (3, 224, 224)),),
        source="onnx-light-zoo",
        fixed_batch=1,
        description=f"{stem} from the onnx wheel (opset 9, constant weights)",
        tags=("zoo",),
    )


_CORE: tuple[SuiteModel, ...] = (
    SuiteModel("resnet50", "resnet", resnet50, _IMAGE, description="ResNet-50 v1.5, BN folded", tags=("core",)),
    SuiteModel("resnet18", "resnet", resnet18, _IMAGE, description="ResNet-18, BN folded", tags=("core",)),
    SuiteModel("mobilenetv2", "mobilenet", mobilenet_v2, _IMAGE, description="MobileNetV2-like", tags=("core",)),
    SuiteModel(
        "bert",
        "bert",
        bert_encoder,
        (InputSpec("input_ids", (128,), "int64", 0, VOCAB),),
        description="BERT-like encoder, 4 layers, hidden 256, seq 128",
        tags=("core",),
    ),
    SuiteModel("mlp", "mlp", mlp, (InputSpec("input", (784,)),), description="MLP 784-1024-1024-10", tags=("core",)),
)

_TINY: tuple[SuiteModel, ...] = tuple(
    SuiteModel(name, family, builder, inputs, description=description, tags=("tiny",))
    for name, family, builder, inputs, description in (
        ("tiny_resnet8", "resnet", resnet8, (InputSpec("input", (3, 32, 32)),), "ResNet-8, CIFAR-10 (MLPerf Tiny)"),
        ("tiny_dscnn", "ds-cnn", ds_cnn, (InputSpec("input", (1, 49, 10)),), "DS-CNN keyword spotting (MLPerf Tiny)"),
        (
            "tiny_mobilenetv1",
            "mobilenet",
            mobilenet_v1,
            (InputSpec("input", (3, 96, 96)),),
            "MobileNetV1 0.25 at 96x96, visual wake words (MLPerf Tiny)",
        ),
        (
            "tiny_autoencoder",
            "mlp",
            fc_autoencoder,
            (InputSpec("input", (640,)),),
            "FC autoencoder 640-128-…-8-…-640, anomaly detection (MLPerf Tiny)",
        ),
        ("tiny_lenet5", "lenet", lenet5, (InputSpec("input", (1, 28, 28)),), "LeNet-5, 28x28 digits"),
        (
            "tiny_bert",
            "bert",
            bert_tiny,
            (InputSpec("input_ids", (64,), "int64", 0, VOCAB),),
            "BERT-like encoder, 2 layers, hidden 128, seq 64",
        ),
    )
)


def _torch_exports(
    tag: str, build: Callable[[str], onnx.ModelProto], rows: tuple[tuple[str, str, tuple[InputSpec, ...], str], ...]
) -> tuple[SuiteModel, ...]:
    """A suite of PyTorch exports: one (name, family, inputs, description) row per model, built by ``build(name)``."""
    return tuple(
        SuiteModel(name, family, functools.partial(build, name), inputs, source="torch.onnx", description=description,
                   tags=(tag,))
        for name, family, inputs, description in rows
    )


_BREADTH = _torch_exports(
    "breadth",
    breadth.build,
    (
        ("lstm_tagger", "lstm", (InputSpec("ids", (20,), "int64", 0, breadth.VOCAB),), "embedding, 2-layer LSTM 128"),
        ("bilstm_classifier", "lstm", (InputSpec("ids", (32,), "int64", 0, breadth.VOCAB),), "bidirectional LSTM 96"),
        ("gru_lm", "gru", (InputSpec("ids", (16,), "int64", 0, breadth.VOCAB),), "GRU 256 language model"),
        (
            "seq2seq_gru",
            "seq2seq",
            (InputSpec("src", (16,), "int64", 0, breadth.VOCAB), InputSpec("tgt", (12,), "int64", 0, breadth.VOCAB)),
            "GRU encoder-decoder, teacher forcing",
        ),
        ("vit_tiny", "vit", (InputSpec("input", (3, 64, 64)),), "ViT-tiny, 4 blocks, dim 192, 64 patches"),
        (
            "distilbert_masked",
            "bert-masked",
            (InputSpec("ids", (64,), "int64", 0, breadth.VOCAB), InputSpec("mask", (64,), "int64", 0, 2)),
            "DistilBERT-like, 2 layers, hidden 256, attention mask",
        ),
        ("unet_small", "unet", (InputSpec("input", (3, 64, 64)),), "U-Net: ConvTranspose, bilinear Resize, Concat"),
        ("yolo_head", "yolo", (InputSpec("input", (3, 128, 128)),), "YOLO-like head: nearest Resize, Concat, Sigmoid"),
        ("conv_autoencoder", "autoencoder", (InputSpec("input", (1, 64, 64)),), "ConvTranspose autoencoder"),
        ("efficientnet_like", "efficientnet", (InputSpec("input", (3, 96, 96)),), "MBConv, SiLU, squeeze-excite"),
        ("convnext_like", "convnext", (InputSpec("input", (3, 64, 64)),), "7x7 depthwise, LayerNorm, GELU"),
        ("audio_conv1d", "audio-conv1d", (InputSpec("input", (1, 16000)),), "1-D conv net on 16k samples"),
        (
            "recsys_embbag",
            "recsys",
            (InputSpec("dense", (13,)), InputSpec("ids", (8, 4), "int64", 0, breadth.VOCAB)),
            "DLRM-like: embedding bags (Gather + ReduceSum) and MLPs",
        ),
    )
)

_IMG32, _IMG64 = (InputSpec("input", (3, 32, 32)),), (InputSpec("input", (3, 64, 64)),)
_HELDOUT = _torch_exports(
    "heldout",
    heldout.build,
    (
        (
            "prenorm_encoder",
            "transformer",
            (InputSpec("ids", (48,), "int64", 0, heldout.VOCAB),),
            "nn.TransformerEncoder, norm_first, GELU, 2 layers, dim 128, seq 48",
        ),
        (
            "transformer_seq2seq",
            "seq2seq",
            (InputSpec("src", (20,), "int64", 0, heldout.VOCAB), InputSpec("tgt", (16,), "int64", 0, heldout.VOCAB)),
            "nn.Transformer encoder-decoder (nn.MultiheadAttention), causal target mask",
        ),
        ("vit_patch4", "vit", _IMG32, "ViT, 4x4 patches, cls token, split Q/K/V, dim 128"),
        (
            "distilbert_padmask",
            "bert-masked",
            (InputSpec("ids", (96,), "int64", 0, heldout.VOCAB), InputSpec("keep", (96,), "int64", 0, 2)),
            "DistilBERT-like, 6 heads, hidden 192, masked_fill padding mask",
        ),
        ("mlp_mixer", "vit", _IMG64, "MLP-Mixer, 64 tokens, dim 96, 3 blocks"),
        ("swin_window", "vit", _IMG32, "Swin-like 4x4 window attention with relative-position bias"),
        ("yolo_silu", "yolo", (InputSpec("input", (3, 128, 128)),), "YOLO-like: SiLU, x2 and x4 nearest Resize"),
        ("efficientnet_b0_like", "efficientnet", (InputSpec("input", (3, 96, 96)),), "MBConv6, Swish, SE 1/4 of input"),
        ("convnext_cf", "convnext", _IMG64, "ConvNeXt 32/64/128, channels-first LayerNorm written out, layer scale"),
        ("unet_bilinear", "unet", _IMG64, "U-Net, bilinear Resize align_corners True and False, BN"),
        ("vae_decoder", "autoencoder", (InputSpec("z", (32,)),), "VAE decoder: ConvTranspose k4 s2, LeakyReLU"),
        ("wavenet_like", "audio-conv1d", (InputSpec("input", (1, 4000)),), "WaveNet-like gated dilated causal conv"),
        ("tcn_classifier", "audio-conv1d", (InputSpec("input", (40, 200)),), "TCN on 40 features, dilations 1-8"),
        (
            "dlrm_bags",
            "recsys",
            (InputSpec("dense", (16,)), InputSpec("ids", (6, 5), "int64", 0, heldout.VOCAB)),
            "DLRM-like: nn.EmbeddingBag sum and mean, dot interaction",
        ),
    )
)

#: Suite names accepted by ``suite()``; ``breadth`` and ``heldout`` (PyTorch exports, empty without torch) are not
#: part of ``all``.
SUITES = ("all", "core", "zoo", "tiny", "quick", "breadth", "heldout")
#: A fast subset for smoke tests and CI.
_QUICK = ("mlp", "bert", "zoo_squeezenet")


def _all_models() -> tuple[SuiteModel, ...]:
    zoo = tuple(_zoo_entry(stem) for stem in LIGHT_MODELS if light_model_path(stem).is_file())
    return _CORE + zoo + _TINY


def suite(which: str = "all") -> list[SuiteModel]:
    """The models of a named suite (``all``, ``core``, ``zoo``, ``tiny``, ``quick``, ``breadth``, ``heldout``) or of
    suites and model names joined by commas (``core,tiny_lenet5``), each model once, in order."""
    parts = [part.strip() for part in which.split(",") if part.strip()]
    if len(parts) > 1:
        chosen: dict[str, SuiteModel] = {}
        for part in parts:
            for model in suite(part):
                chosen.setdefault(model.name, model)
        return list(chosen.values())
    models = _all_models()
    if which == "breadth":
        return list(_BREADTH) if breadth.available() else []
    if which == "heldout":
        return list(_HELDOUT) if breadth.available() else []
    if which == "all":
        return list(models)
    if which in ("core", "zoo", "tiny"):
        return [m for m in models if which in m.tags]
    names = _QUICK if which == "quick" else tuple(n.strip() for n in which.split(",") if n.strip())
    by_name = {m.name: m for m in (*models, *_BREADTH, *_HELDOUT)}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise KeyError(
            f"unknown suite or model {unknown[0]!r}; suites: {', '.join(SUITES)}; models: {', '.join(by_name)}"
        )
    return [by_name[n] for n in names]


def get_model(name: str) -> SuiteModel:
    """One suite model by name."""
    return suite(name)[0]


@functools.lru_cache(maxsize=4)
def _cached_model(name: str) -> onnx.ModelProto:
    by_name = {m.name: m for m in (*_all_models(), *_BREADTH, *_HELDOUT)}
    return by_name[name].builder()


__all__ = ["SUITES", "InputSpec", "SuiteModel", "get_model", "suite"]
