"""The training suite: tasks with bundled or seeded data, each a PyTorch module that every trainer starts from.

A task names its model (built in PyTorch from a seed, so every trainer starts from the same weights: the PyTorch
trainers copy the module, appopt's runtime trains its ONNX export), its data, and the test accuracy that counts as
"trained" (MLPerf Training's time-to-quality target) where the data allows one.

* ``digits_mlp``, ``digits_cnn``: scikit-learn's bundled 8x8 digits (1,797 images; no download), target 0.95;
* ``resnet8``: a ResNet-8 (CIFAR-style basic blocks) on seeded synthetic 3x16x16 images, target 0.90;
* ``transformer_tiny``: a 2-layer encoder classifier on seeded synthetic token sequences, target 0.90;
* ``resnet50``, ``mobilenet_v2``, ``bert_like``: the catalog's named architectures at reduced resolution (32x32) or
  length (32 tokens), for step time only (no target: random labels);
* ``resnet50_224``, ``mobilenet_v2_224``, ``bert_like_128``: the same models at the catalog's resolution (224x224)
  and BERT's usual length (128 tokens), for step time only: at 32x32 a step's tensors fit in cache and its time is
  set by the parameters, at 224x224 by the activations' traffic, which a fit on small inputs alone cannot see;
* ``vgg_small``, ``densenet_tiny``, ``vit_tiny``, ``gru_tiny``: four more families (plain CNN, concatenating CNN,
  patch transformer, unrolled recurrent net) at 32x32 or 16 tokens, for step time only, so that a family held out
  is predicted from eight others;
* ``node_chain_4``, ``node_chain_64``: chains of tiny layers, the per-node probe (``PROBE_FAMILY``): every fit keeps
  them, the held-out evaluation never predicts them.

MobileNetV2 uses ReLU where the paper uses ReLU6 (the runtime's autodiff has no rule for Clip); BERT-like uses ReLU
in its feed-forward (no Erf rule). Both change the FLOPs by well under 1%.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.models.convnets import MOBILENET_V2_BLOCKS
from perfmodels.training_units import PROBE_FAMILY

if TYPE_CHECKING:
    from torch import nn


class SuiteUnavailable(RuntimeError):
    """The suite needs PyTorch to build its models (the message says so: "extra not installed")."""


def require_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        raise SuiteUnavailable("torch: extra not installed (the training suite builds its models in PyTorch)")


@dataclass(frozen=True)
class TaskData:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@dataclass(frozen=True)
class TrainingTask:
    name: str
    #: Architecture family: the unit held out when the training performance model is evaluated.
    family: str
    build: Callable[[int], nn.Module]
    data: Callable[[int], TaskData]
    #: Test accuracy that counts as trained; None: step time only (synthetic labels carry no signal).
    target_accuracy: float | None
    lr: float
    epochs: int
    batch_sizes: tuple[int, ...]
    description: str = ""

    @property
    def step_time_only(self) -> bool:
        return self.target_accuracy is None


# --- data ------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def digits_data(seed: int = 0, image: bool = False) -> TaskData:
    """scikit-learn's digits scaled to [0, 1], a seeded 80/20 split; ``image``: shaped [n, 1, 8, 8]."""
    from sklearn.datasets import load_digits

    raw = load_digits()
    x = (raw.data / 16.0).astype(np.float32)
    y = raw.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    cut = len(y) * 4 // 5
    if image:
        x = x.reshape(-1, 1, 8, 8)
    return TaskData(x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]])


def synthetic_images(
    seed: int = 0,
    samples: int = 1024,
    shape: tuple[int, ...] = (3, 16, 16),
    classes: int = 10,
    signal: float = 0.6,
) -> TaskData:
    """Seeded class templates plus Gaussian noise (learnable; ``signal=0``: random labels, step time only)."""
    rng = np.random.default_rng(seed)
    templates = rng.standard_normal((classes, *shape)).astype(np.float32)
    y = rng.integers(0, classes, samples).astype(np.int64)
    x = (signal * templates[y] + rng.standard_normal((samples, *shape)).astype(np.float32)).astype(np.float32)
    cut = samples * 3 // 4
    return TaskData(x[:cut], y[:cut], x[cut:], y[cut:])


def synthetic_tokens(
    seed: int = 0, samples: int = 1024, length: int = 16, vocab: int = 64, classes: int = 4, signal: bool = True
) -> TaskData:
    """Seeded token sequences; the class is which of ``classes`` marker tokens occurs (random labels: no signal)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(classes, vocab, (samples, length)).astype(np.int64)
    y = rng.integers(0, classes, samples).astype(np.int64)
    if signal:
        positions = rng.integers(0, length, samples)
        x[np.arange(samples), positions] = y  # tokens 0..classes-1 are the markers
    cut = samples * 3 // 4
    return TaskData(x[:cut], y[:cut], x[cut:], y[cut:])


# --- models ----------------------------------------------------------------------------------------------------


def _seeded(seed: int) -> None:
    import torch

    torch.manual_seed(seed)


def digits_mlp(seed: int = 0) -> nn.Module:
    from torch import nn

    _seeded(seed)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def digits_cnn(seed: int = 0) -> nn.Module:
    """runtime.training.models.digits_cnn's architecture: conv16-BN-ReLU, conv32-ReLU, maxpool, FC64, FC10."""
    from torch import nn

    _seeded(seed)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


@functools.cache
def _torch_modules() -> SimpleNamespace:
    """Module classes defined on first use (PyTorch is optional), once per process."""
    import torch
    from torch import nn

    class Basic(nn.Module):
        def __init__(self, c_in: int, c_out: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c_out)
            self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c_out)
            self.short = (
                nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                if stride != 1 or c_in != c_out
                else nn.Identity()
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(h)) + self.short(x))

    class Bottleneck(nn.Module):
        def __init__(self, c_in: int, width: int, stride: int) -> None:
            super().__init__()
            c_out = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(c_in, width, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(),
                nn.Conv2d(width, width, 3, stride, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(),
                nn.Conv2d(width, c_out, 1, bias=False),
                nn.BatchNorm2d(c_out),
            )
            self.short = (
                nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                if stride != 1 or c_in != c_out
                else nn.Identity()
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.body(x) + self.short(x))

    class InvertedResidual(nn.Module):
        def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = c_in * expand
            layers: list[nn.Module] = []
            if expand != 1:
                layers += [nn.Conv2d(c_in, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU()]
            layers += [
                nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                nn.BatchNorm2d(hidden),
                nn.ReLU(),
                nn.Conv2d(hidden, c_out, 1, bias=False),
                nn.BatchNorm2d(c_out),
            ]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and c_in == c_out

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.body(x)
            return x + y if self.residual else y

    class Encoder(nn.Module):
        """Token + position embeddings, pre-LN encoder layers (attention, ReLU FFN), mean pool, linear head."""

        def __init__(
            self,
            vocab: int,
            length: int,
            hidden: int,
            heads: int,
            layers: int,
            classes: int,
            embed: nn.Module | None = None,
        ) -> None:
            super().__init__()
            self.heads = heads
            self.embed = nn.Embedding(vocab, hidden) if embed is None else embed
            self.position = nn.Parameter(torch.randn(1, length, hidden) * 0.02)
            self.blocks = nn.ModuleList(
                nn.ModuleDict(
                    {
                        "ln1": nn.LayerNorm(hidden),
                        "qkv": nn.Linear(hidden, 3 * hidden),
                        "proj": nn.Linear(hidden, hidden),
                        "ln2": nn.LayerNorm(hidden),
                        "ff1": nn.Linear(hidden, 4 * hidden),
                        "ff2": nn.Linear(4 * hidden, hidden),
                    }
                )
                for _ in range(layers)
            )
            self.norm = nn.LayerNorm(hidden)
            self.head = nn.Linear(hidden, classes)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embed(tokens) + self.position
            length, hidden = x.shape[1], x.shape[2]
            dim = hidden // self.heads
            block: Any
            for block in self.blocks:
                q, k, v = block["qkv"](block["ln1"](x)).chunk(3, dim=-1)
                q, k, v = (t.reshape(-1, length, self.heads, dim).transpose(1, 2) for t in (q, k, v))
                attn = torch.softmax(q @ k.transpose(-1, -2) * (dim**-0.5), dim=-1)
                mixed = (attn @ v).transpose(1, 2).reshape(-1, length, hidden)
                x = x + block["proj"](mixed)
                x = x + block["ff2"](torch.relu(block["ff1"](block["ln2"](x))))
            return self.head(self.norm(x).mean(dim=1))

    class Patches(nn.Module):
        """ViT's patch embedding: a ``patch``-strided convolution, its positions as the sequence."""

        def __init__(self, channels: int, hidden: int, patch: int) -> None:
            super().__init__()
            self.conv = nn.Conv2d(channels, hidden, patch, patch)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x).flatten(2).transpose(1, 2)

    class DenseLayer(nn.Module):
        """DenseNet-BC's layer: BN-ReLU-1x1 conv (4k) - BN-ReLU-3x3 conv (k), concatenated to its input."""

        def __init__(self, c_in: int, growth: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.BatchNorm2d(c_in),
                nn.ReLU(),
                nn.Conv2d(c_in, 4 * growth, 1, bias=False),
                nn.BatchNorm2d(4 * growth),
                nn.ReLU(),
                nn.Conv2d(4 * growth, growth, 3, 1, 1, bias=False),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, self.body(x)], dim=1)

    class Gru(nn.Module):
        """A GRU classifier unrolled over the sequence (Cho et al. 2014 gates; one linear map per gate and input),
        mean of the hidden states into a linear head: the recurrent family, many small matrix products a step."""

        def __init__(self, vocab: int, length: int, hidden: int, classes: int) -> None:
            super().__init__()
            self.length = length
            self.embed = nn.Embedding(vocab, hidden)
            self.x_gates = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(3))  # update, reset, new
            self.h_gates = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(3))
            self.head = nn.Linear(hidden, classes)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            xs = self.embed(tokens)
            xz, xr, xn = (gate(xs) for gate in self.x_gates)
            hz, hr, hn = self.h_gates
            # h starts at zero: the first step has no recurrent terms (no zeros tensor in the export)
            h = (1.0 - torch.sigmoid(xz[:, 0])) * torch.tanh(xn[:, 0])
            total = h
            for t in range(1, self.length):
                z = torch.sigmoid(xz[:, t] + hz(h))
                r = torch.sigmoid(xr[:, t] + hr(h))
                n = torch.tanh(xn[:, t] + r * hn(h))
                h = (1.0 - z) * n + z * h
                total = total + h
            return self.head(total * (1.0 / self.length))

    return SimpleNamespace(
        Basic=Basic,
        Bottleneck=Bottleneck,
        InvertedResidual=InvertedResidual,
        Encoder=Encoder,
        Patches=Patches,
        DenseLayer=DenseLayer,
        Gru=Gru,
    )


def _classifier(features: nn.Module, channels: int, classes: int) -> nn.Module:
    from torch import nn

    return nn.Sequential(features, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes))


def resnet8(seed: int = 0, classes: int = 10) -> nn.Module:
    """ResNet-8 (He et al. 2016, CIFAR form: 3 stages of one basic block, 16/32/64 channels)."""
    from torch import nn

    basic = _torch_modules().Basic
    _seeded(seed)
    stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
    return _classifier(nn.Sequential(stem, basic(16, 16, 1), basic(16, 32, 2), basic(32, 64, 2)), 64, classes)


def resnet50(seed: int = 0, classes: int = 10) -> nn.Module:
    """ResNet-50 (3-4-6-3 bottlenecks, widths 64-512) at any resolution; the stem's stride-2 conv and pool kept."""
    from torch import nn

    bottleneck = _torch_modules().Bottleneck
    _seeded(seed)
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    c_in = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(bottleneck(c_in, width, stride if i == 0 else 1))
            c_in = width * 4
    return _classifier(nn.Sequential(*layers), c_in, classes)


def mobilenet_v2(seed: int = 0, classes: int = 10) -> nn.Module:
    """MobileNetV2 (Sandler et al. 2018, width 1.0), ReLU for ReLU6."""
    from torch import nn

    inverted = _torch_modules().InvertedResidual
    _seeded(seed)
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()]
    c_in = 32
    for expand, c_out, repeats, stride in MOBILENET_V2_BLOCKS:
        for i in range(repeats):
            layers.append(inverted(c_in, c_out, stride if i == 0 else 1, expand))
            c_in = c_out
    layers += [nn.Conv2d(c_in, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU()]
    return _classifier(nn.Sequential(*layers), 1280, classes)


def vgg_small(seed: int = 0, classes: int = 10) -> nn.Module:
    """A VGG-style plain CNN (Simonyan & Zisserman 2015: 3x3 conv-BN-ReLU stacks and max pools, no shortcuts),
    32-64-128-128-256-256 channels at 32x32."""
    from torch import nn

    _seeded(seed)
    layers: list[nn.Module] = []
    c_in = 3
    for width in (32, "M", 64, "M", 128, 128, "M", 256, 256, "M"):
        if width == "M":
            layers.append(nn.MaxPool2d(2))
            continue
        layers += [nn.Conv2d(c_in, int(width), 3, 1, 1, bias=False), nn.BatchNorm2d(int(width)), nn.ReLU()]
        c_in = int(width)
    return _classifier(nn.Sequential(*layers), c_in, classes)


def densenet_tiny(seed: int = 0, classes: int = 10) -> nn.Module:
    """DenseNet-BC (Huang et al. 2017) at 32x32: growth 12, three dense blocks of 4 layers, transitions halving the
    channels and the resolution: every layer concatenates, so activations, not FLOPs, set its step."""
    from torch import nn

    dense = _torch_modules().DenseLayer
    _seeded(seed)
    layers: list[nn.Module] = [nn.Conv2d(3, 24, 3, 1, 1, bias=False)]
    channels = 24
    for block in range(3):
        for _ in range(4):
            layers.append(dense(channels, 12))
            channels += 12
        if block < 2:
            out = channels // 2
            layers += [nn.BatchNorm2d(channels), nn.ReLU(), nn.Conv2d(channels, out, 1, bias=False), nn.AvgPool2d(2)]
            channels = out
    layers += [nn.BatchNorm2d(channels), nn.ReLU()]
    return _classifier(nn.Sequential(*layers), channels, classes)


def vit_tiny(seed: int = 0) -> nn.Module:
    """A ViT (Dosovitskiy et al. 2021) at 32x32: 4x4 patches (64 tokens), 4 encoder layers of hidden 128."""
    modules = _torch_modules()
    _seeded(seed)
    return modules.Encoder(1, 64, 128, 4, 4, 10, embed=modules.Patches(3, 128, 4))


def gru_tiny(seed: int = 0) -> nn.Module:
    """A GRU of hidden 128 over 16 tokens (``_torch_modules``' ``Gru``)."""
    _seeded(seed)
    return _torch_modules().Gru(64, 16, 128, 4)


def node_chain(depth: int, seed: int = 0) -> nn.Module:
    """``depth`` layers of a 16-wide linear map and tanh, then a 4-class head: a step of tiny kernels, whose time
    over two depths is what each node of a training step costs (``perfmodels.training_fit.PROBE_FAMILY``)."""
    from torch import nn

    _seeded(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(PROBE_WIDTH, PROBE_WIDTH), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(PROBE_WIDTH, 4))


def transformer_tiny(seed: int = 0) -> nn.Module:
    _seeded(seed)
    return _torch_modules().Encoder(vocab=64, length=16, hidden=64, heads=4, layers=2, classes=4)


def bert_like(seed: int = 0, length: int = 32) -> nn.Module:
    """BERT-like encoder, 4 layers of hidden 256 (BERT-mini's shape) at ``length`` tokens."""
    _seeded(seed)
    return _torch_modules().Encoder(vocab=1024, length=length, hidden=256, heads=4, layers=4, classes=2)


def bert_like_128(seed: int = 0) -> nn.Module:
    return bert_like(seed, length=128)


# --- the suite -------------------------------------------------------------------------------------------------

#: The per-node probes' width and depths (``node_chain``).
PROBE_WIDTH = 16
PROBE_DEPTHS = (4, 64)

TASKS: tuple[TrainingTask, ...] = (
    TrainingTask(
        "digits_mlp", "mlp", digits_mlp, lambda s: digits_data(s), 0.95, 0.05, 10, (32, 128), "digits, 64-128-128-10"
    ),
    TrainingTask(
        "digits_cnn", "cnn", digits_cnn, lambda s: digits_data(s, image=True), 0.95, 0.05, 10, (32, 128), "digits CNN"
    ),
    TrainingTask(
        "resnet8",
        "resnet",
        resnet8,
        lambda s: synthetic_images(s),
        0.90,
        0.05,
        8,
        (32, 64),
        "ResNet-8, synthetic 3x16x16",
    ),
    TrainingTask(
        "transformer_tiny",
        "transformer",
        transformer_tiny,
        lambda s: synthetic_tokens(s),
        0.90,
        0.05,
        15,
        (32, 64),
        "2-layer encoder (hidden 64), synthetic tokens",
    ),
    TrainingTask(
        "resnet50",
        "resnet",
        resnet50,
        lambda s: synthetic_images(s, 64, (3, 32, 32), signal=0.0),
        None,
        0.01,
        1,
        (4, 8),
        "ResNet-50 at 32x32, step time only",
    ),
    TrainingTask(
        "mobilenet_v2",
        "mobilenet",
        mobilenet_v2,
        lambda s: synthetic_images(s, 64, (3, 32, 32), signal=0.0),
        None,
        0.01,
        1,
        (4, 8),
        "MobileNetV2 at 32x32, step time only",
    ),
    TrainingTask(
        "bert_like",
        "transformer",
        bert_like,
        lambda s: synthetic_tokens(s, 64, 32, 1024, 2, signal=False),
        None,
        0.01,
        1,
        (4, 8),
        "BERT-like (4x256) at 32 tokens, step time only",
    ),
    TrainingTask(
        "vgg_small",
        "vgg",
        vgg_small,
        lambda s: synthetic_images(s, 256, (3, 32, 32), signal=0.0),
        None,
        0.01,
        1,
        (8, 32),
        "VGG-style plain CNN at 32x32, step time only",
    ),
    TrainingTask(
        "densenet_tiny",
        "densenet",
        densenet_tiny,
        lambda s: synthetic_images(s, 256, (3, 32, 32), signal=0.0),
        None,
        0.01,
        1,
        (8, 32),
        "DenseNet-BC (growth 12, 3x4 layers) at 32x32, step time only",
    ),
    TrainingTask(
        "vit_tiny",
        "vit",
        vit_tiny,
        lambda s: synthetic_images(s, 256, (3, 32, 32), signal=0.0),
        None,
        0.01,
        1,
        (8, 32),
        "ViT (4x4 patches, 4x128) at 32x32, step time only",
    ),
    TrainingTask(
        "gru_tiny",
        "rnn",
        gru_tiny,
        lambda s: synthetic_tokens(s, 512, 16, 64, 4, signal=False),
        None,
        0.01,
        1,
        (16, 64),
        "GRU (hidden 128) over 16 tokens, step time only",
    ),
    TrainingTask(
        "resnet50_224",
        "resnet",
        resnet50,
        lambda s: synthetic_images(s, 32, (3, 224, 224), signal=0.0),
        None,
        0.01,
        1,
        (2, 4),
        "ResNet-50 at 224x224, step time only",
    ),
    TrainingTask(
        "mobilenet_v2_224",
        "mobilenet",
        mobilenet_v2,
        lambda s: synthetic_images(s, 64, (3, 224, 224), signal=0.0),
        None,
        0.01,
        1,
        (4, 8),
        "MobileNetV2 at 224x224, step time only",
    ),
    TrainingTask(
        "bert_like_128",
        "transformer",
        bert_like_128,
        lambda s: synthetic_tokens(s, 64, 128, 1024, 2, signal=False),
        None,
        0.01,
        1,
        (4, 8),
        "BERT-like (4x256) at 128 tokens, step time only",
    ),
)
TASKS += tuple(
    TrainingTask(
        f"node_chain_{depth}",
        PROBE_FAMILY,
        functools.partial(node_chain, depth),
        lambda s: synthetic_images(s, 256, (PROBE_WIDTH,), classes=4, signal=0.0),
        None,
        0.01,
        1,
        (4,),
        f"{depth} linear+tanh layers of width {PROBE_WIDTH}: the per-node probe, step time only",
    )
    for depth in PROBE_DEPTHS
)
TASK_NAMES = tuple(t.name for t in TASKS)


def get_task(name: str) -> TrainingTask:
    for task in TASKS:
        if task.name == name:
            return task
    raise KeyError(f"unknown training task {name!r}; known: {', '.join(TASK_NAMES)}")
