"""The breadth suite: small models from families outside the core suite, written in PyTorch and exported with
``torch.onnx`` (the TorchScript exporter, opset 17, a dynamic batch axis), the way users bring them.

Recurrent language models and a seq2seq, a ViT-tiny and a masked DistilBERT-like encoder, a U-Net, a YOLO-like
head, a ConvTranspose autoencoder, EfficientNet- and ConvNeXt-like nets, a 1-D conv audio net and an embedding-bag
recommendation MLP. Weights come from ``torch.manual_seed(0)`` and PyTorch's default initialisation.

PyTorch is not a dependency of appopt: ``available()`` says whether it is installed, and the suite is empty without
it (``python -m benchmarks.vs_peers --models breadth``).
"""

from __future__ import annotations

import math
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

OPSET = 17
VOCAB = 2000


def available() -> bool:
    """Whether PyTorch (which builds these models) is installed."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def export_module(module: Any, example: tuple[Any, ...], names: list[str]) -> onnx.ModelProto:
    """``module`` exported with a dynamic batch axis on every input and the output."""
    import torch

    module.eval()
    axes = {name: {0: "batch"} for name in [*names, "output"]}
    with warnings.catch_warnings(), torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore")
        path = Path(tmp) / "model.onnx"
        torch.onnx.export(
            module,
            example,
            path,
            dynamo=False,
            input_names=names,
            output_names=["output"],
            dynamic_axes=axes,
            opset_version=OPSET,
        )
        return onnx.load(path)


def _modules() -> dict[str, Callable[[], tuple[Any, tuple[Any, ...], list[str]]]]:
    """Builders of (module, example inputs, input names), by model name; imports torch."""
    import torch
    from torch import nn

    class LstmTagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 64)
            self.rnn = nn.LSTM(64, 128, num_layers=2, batch_first=True)
            self.out = nn.Linear(128, 20)

        def forward(self, ids: Any) -> Any:
            return self.out(self.rnn(self.emb(ids))[0])

    class GruLm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 128)
            self.rnn = nn.GRU(128, 256, batch_first=True)
            self.out = nn.Linear(256, VOCAB)

        def forward(self, ids: Any) -> Any:
            return self.out(self.rnn(self.emb(ids))[0][:, -1])

    class BiLstmClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 64)
            self.rnn = nn.LSTM(64, 96, batch_first=True, bidirectional=True)
            self.out = nn.Linear(192, 5)

        def forward(self, ids: Any) -> Any:
            return self.out(self.rnn(self.emb(ids))[0].mean(1))

    class Seq2Seq(nn.Module):
        """A GRU encoder whose final state starts a GRU decoder (teacher forcing on the target ids)."""

        def __init__(self) -> None:
            super().__init__()
            self.src = nn.Embedding(VOCAB, 96)
            self.tgt = nn.Embedding(VOCAB, 96)
            self.enc = nn.GRU(96, 128, batch_first=True)
            self.dec = nn.GRU(96, 128, batch_first=True)
            self.out = nn.Linear(128, VOCAB)

        def forward(self, src: Any, tgt: Any) -> Any:
            _, h = self.enc(self.src(src))
            return self.out(self.dec(self.tgt(tgt), h)[0])

    class Attention(nn.Module):
        def __init__(self, dim: int, heads: int) -> None:
            super().__init__()
            self.heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

        def forward(self, x: Any, bias: Any = None) -> Any:
            b, n, d = x.shape
            qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(d // self.heads))
            if bias is not None:
                scores = scores + bias
            return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))

    class Block(nn.Module):
        def __init__(self, dim: int, heads: int, pre_norm: bool) -> None:
            super().__init__()
            self.pre = pre_norm
            self.attn = Attention(dim, heads)
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x: Any, bias: Any = None) -> Any:
            if self.pre:
                x = x + self.attn(self.n1(x), bias)
                return x + self.ff(self.n2(x))
            x = self.n1(x + self.attn(x, bias))
            return self.n2(x + self.ff(x))

    class VitTiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, 192, 8, stride=8)
            self.cls = nn.Parameter(torch.randn(1, 1, 192) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, 65, 192) * 0.02)
            self.blocks = nn.ModuleList([Block(192, 3, True) for _ in range(4)])
            self.norm, self.head = nn.LayerNorm(192), nn.Linear(192, 100)

        def forward(self, x: Any) -> Any:
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x[:, 0]))

    class DistilBert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.pos = nn.Embedding(VOCAB, 256), nn.Embedding(64, 256)
            self.norm = nn.LayerNorm(256)
            self.blocks = nn.ModuleList([Block(256, 4, False) for _ in range(2)])

        def forward(self, ids: Any, mask: Any) -> Any:
            positions = torch.arange(ids.shape[1]).unsqueeze(0)
            x = self.norm(self.emb(ids) + self.pos(positions))
            bias = (1.0 - mask[:, None, None, :].to(torch.float32)) * -10000.0
            for blk in self.blocks:
                x = blk(x, bias)
            return x

    def conv_bn_relu(cin: int, cout: int, stride: int = 1) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d1, self.d2, self.d3 = conv_bn_relu(3, 16), conv_bn_relu(16, 32), conv_bn_relu(32, 64)
            self.pool = nn.MaxPool2d(2)
            self.up2 = nn.ConvTranspose2d(64, 32, 2, stride=2)
            self.u2 = conv_bn_relu(64, 32)
            self.u1 = conv_bn_relu(32 + 16, 16)
            self.out = nn.Conv2d(16, 2, 1)

        def forward(self, x: Any) -> Any:
            a = self.d1(x)
            b = self.d2(self.pool(a))
            c = self.d3(self.pool(b))
            b = self.u2(torch.cat([self.up2(c), b], 1))
            up = nn.functional.interpolate(b, scale_factor=2.0, mode="bilinear", align_corners=False)
            return self.out(self.u1(torch.cat([up, a], 1)))

    class YoloHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s1 = nn.Sequential(conv_bn_relu(3, 16, 2), conv_bn_relu(16, 32, 2), conv_bn_relu(32, 64, 2))
            self.s2 = conv_bn_relu(64, 128, 2)
            self.lat = nn.Conv2d(128, 64, 1)
            self.fuse = conv_bn_relu(128, 64)
            self.det1, self.det2 = nn.Conv2d(64, 3 * 25, 1), nn.Conv2d(128, 3 * 25, 1)

        def forward(self, x: Any) -> Any:
            p3 = self.s1(x)
            p4 = self.s2(p3)
            up = nn.functional.interpolate(self.lat(p4), scale_factor=2.0, mode="nearest")
            f3 = self.fuse(torch.cat([up, p3], 1))
            o3, o4 = torch.sigmoid(self.det1(f3)).flatten(2), torch.sigmoid(self.det2(p4)).flatten(2)
            return torch.cat([o3, o4], 2)

    class ConvAutoencoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = nn.Sequential(conv_bn_relu(1, 16, 2), conv_bn_relu(16, 32, 2), conv_bn_relu(32, 64, 2))
            self.dec = nn.Sequential(
                nn.ConvTranspose2d(64, 32, 3, 2, 1, output_padding=1),
                nn.ReLU(),
                nn.ConvTranspose2d(32, 16, 3, 2, 1, output_padding=1),
                nn.ReLU(),
                nn.ConvTranspose2d(16, 1, 3, 2, 1, output_padding=1),
                nn.Sigmoid(),
            )

        def forward(self, x: Any) -> Any:
            return self.dec(self.enc(x))

    class MBConv(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int = 4) -> None:
            super().__init__()
            mid = cin * expand
            self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1), nn.SiLU())
            self.dw = nn.Sequential(nn.Conv2d(mid, mid, 3, stride, 1, groups=mid), nn.SiLU())
            self.se = nn.Sequential(
                nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, mid // 4, 1), nn.SiLU(), nn.Conv2d(mid // 4, mid, 1)
            )
            self.project = nn.Conv2d(mid, cout, 1)
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            y = self.dw(self.expand(x))
            y = self.project(y * torch.sigmoid(self.se(y)))
            return x + y if self.residual else y

    class EfficientNetLike(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.SiLU())
            self.blocks = nn.Sequential(
                MBConv(16, 24, 2), MBConv(24, 24, 1), MBConv(24, 40, 2), MBConv(40, 40, 1), MBConv(40, 80, 2)
            )
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(80, 100))

        def forward(self, x: Any) -> Any:
            return self.head(self.blocks(self.stem(x)))

    class ConvNeXtBlock(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim)
            self.pw1, self.pw2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
            self.act = nn.GELU()

        def forward(self, x: Any) -> Any:
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            return x + self.pw2(self.act(self.pw1(y))).permute(0, 3, 1, 2)

    class ConvNeXtLike(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, 48, 4, stride=4)
            self.s1 = nn.Sequential(ConvNeXtBlock(48), ConvNeXtBlock(48))
            self.down = nn.Conv2d(48, 96, 2, stride=2)
            self.s2 = nn.Sequential(ConvNeXtBlock(96), ConvNeXtBlock(96))
            self.head = nn.Linear(96, 100)

        def forward(self, x: Any) -> Any:
            return self.head(self.s2(self.down(self.s1(self.stem(x)))).mean((2, 3)))

    class AudioConv1d(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[nn.Module] = [nn.Conv1d(1, 32, 80, stride=4, padding=38), nn.ReLU(), nn.MaxPool1d(4)]
            for cin, cout in ((32, 32), (32, 64), (64, 64)):
                layers += [nn.Conv1d(cin, cout, 3, padding=1), nn.ReLU(), nn.MaxPool1d(4)]
            self.body = nn.Sequential(*layers)
            self.out = nn.Linear(64, 35)

        def forward(self, x: Any) -> Any:
            return self.out(self.body(x).mean(2))

    class RecsysMlp(nn.Module):
        """DLRM-like: 8 sparse features, each a bag of 4 ids summed (Gather + ReduceSum), and 13 dense features."""

        def __init__(self) -> None:
            super().__init__()
            self.tables = nn.ModuleList([nn.Embedding(VOCAB, 32) for _ in range(8)])
            self.bottom = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
            self.top = nn.Sequential(nn.Linear(9 * 32, 128), nn.ReLU(), nn.Linear(128, 1), nn.Sigmoid())

        def forward(self, dense: Any, ids: Any) -> Any:
            bags = [table(ids[:, i]).sum(1) for i, table in enumerate(self.tables)]
            return self.top(torch.cat([self.bottom(dense), *bags], 1))

    def ids(*shape: int, high: int = VOCAB) -> Any:
        return torch.randint(0, high, (1, *shape))

    return {
        "lstm_tagger": lambda: (LstmTagger(), (ids(20),), ["ids"]),
        "gru_lm": lambda: (GruLm(), (ids(16),), ["ids"]),
        "bilstm_classifier": lambda: (BiLstmClassifier(), (ids(32),), ["ids"]),
        "seq2seq_gru": lambda: (Seq2Seq(), (ids(16), ids(12)), ["src", "tgt"]),
        "vit_tiny": lambda: (VitTiny(), (torch.randn(1, 3, 64, 64),), ["input"]),
        "distilbert_masked": lambda: (
            DistilBert(),
            (ids(64), torch.ones(1, 64, dtype=torch.int64)),
            ["ids", "mask"],
        ),
        "unet_small": lambda: (UNet(), (torch.randn(1, 3, 64, 64),), ["input"]),
        "yolo_head": lambda: (YoloHead(), (torch.randn(1, 3, 128, 128),), ["input"]),
        "conv_autoencoder": lambda: (ConvAutoencoder(), (torch.randn(1, 1, 64, 64),), ["input"]),
        "efficientnet_like": lambda: (EfficientNetLike(), (torch.randn(1, 3, 96, 96),), ["input"]),
        "convnext_like": lambda: (ConvNeXtLike(), (torch.randn(1, 3, 64, 64),), ["input"]),
        "audio_conv1d": lambda: (AudioConv1d(), (torch.randn(1, 1, 16000),), ["input"]),
        "recsys_embbag": lambda: (RecsysMlp(), (torch.randn(1, 13), ids(8, 4)), ["dense", "ids"]),
    }


def build(name: str) -> onnx.ModelProto:
    """The named breadth model, exported from PyTorch (seeded weights)."""
    import torch

    torch.manual_seed(0)
    module, example, names = _modules()[name]()
    return export_module(module, example, names)
