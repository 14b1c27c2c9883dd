"""The held-out suite: a second set of PyTorch exports from the breadth suite's families, written to differ from it
in the details the runtime's passes match on, so that it shows whether those passes generalise.

Where breadth uses post-norm blocks with a packed QKV projection, these use ``nn.TransformerEncoder`` with
``norm_first`` and GELU, ``nn.Transformer`` (``nn.MultiheadAttention``'s export), separate Q/K/V projections with
the scale on Q, a boolean padding mask, windowed attention and an MLP-Mixer; SiLU and Swish written by hand,
another squeeze-excite ratio, ConvNeXt with a channels-first LayerNorm written out, bilinear upsampling with
``align_corners`` True and False, a kernel-4 ConvTranspose decoder, a gated dilated 1-D conv net and
``nn.EmbeddingBag`` (sum and mean). No recurrent layers. Weights come from ``torch.manual_seed(1)``.

PyTorch is not a dependency of appopt: the suite is empty without it (``python -m benchmarks.vs_peers --models
heldout``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import onnx

from benchmarks.models.breadth import export_module

VOCAB = 1000


def _modules() -> dict[str, Callable[[], tuple[Any, tuple[Any, ...], list[str]]]]:
    """Builders of (module, example inputs, input names), by model name; imports torch."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class PreNormEncoder(nn.Module):
        """``nn.TransformerEncoder``, pre-norm, GELU, with a final LayerNorm and mean pooling."""

        def __init__(self) -> None:
            super().__init__()
            self.emb, self.pos = nn.Embedding(VOCAB, 128), nn.Parameter(torch.randn(1, 48, 128) * 0.02)
            layer = nn.TransformerEncoderLayer(
                128, 4, 256, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
            )
            self.encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(128), enable_nested_tensor=False)
            self.out = nn.Linear(128, 10)

        def forward(self, ids: Any) -> Any:
            return self.out(self.encoder(self.emb(ids) + self.pos).mean(1))

    class TransformerSeq2Seq(nn.Module):
        """``nn.Transformer`` encoder-decoder with a causal target mask."""

        def __init__(self) -> None:
            super().__init__()
            self.src, self.tgt = nn.Embedding(VOCAB, 96), nn.Embedding(VOCAB, 96)
            self.core = nn.Transformer(96, 4, 1, 1, 192, dropout=0.0, batch_first=True)
            self.out = nn.Linear(96, VOCAB)

        def forward(self, src: Any, tgt: Any) -> Any:
            n = tgt.shape[1]
            causal = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
            return self.out(self.core(self.src(src), self.tgt(tgt), tgt_mask=causal))

    class SplitAttention(nn.Module):
        """Separate Q/K/V projections, the scale applied to Q, an optional boolean key mask (masked_fill)."""

        def __init__(self, dim: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

        def forward(self, x: Any, keep: Any = None) -> Any:
            b, n, d = x.shape
            h = self.heads

            def split(t: Any) -> Any:
                return t.view(b, n, h, d // h).transpose(1, 2)

            q = split(self.q(x)) / math.sqrt(d // h)
            scores = q @ split(self.k(x)).transpose(2, 3)
            if keep is not None:
                scores = scores.masked_fill(keep[:, None, None, :] == 0, torch.finfo(torch.float32).min)
            ctx = torch.softmax(scores, dim=-1) @ split(self.v(x))
            return self.o(ctx.transpose(1, 2).contiguous().view(b, n, d))

    class SplitBlock(nn.Module):
        def __init__(self, dim: int, heads: int, hidden: int, pre_norm: bool) -> None:
            super().__init__()
            self.pre = pre_norm
            self.attn = SplitAttention(dim, heads)
            self.n1, self.n2 = nn.LayerNorm(dim, eps=1e-12), nn.LayerNorm(dim, eps=1e-12)
            self.ff = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, dim))

        def forward(self, x: Any, keep: Any = None) -> Any:
            if self.pre:
                x = x + self.attn(self.n1(x), keep)
                return x + self.ff(self.n2(x))
            x = self.n1(x + self.attn(x, keep))
            return self.n2(x + self.ff(x))

    class VitP4(nn.Module):
        """ViT on 32x32 images: 4x4 patches (64 tokens), a cls token, dim 128, 4 heads, 3 pre-norm blocks."""

        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, 128, 4, stride=4)
            self.cls = nn.Parameter(torch.randn(1, 1, 128) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, 65, 128) * 0.02)
            self.blocks = nn.ModuleList([SplitBlock(128, 4, 384, True) for _ in range(3)])
            self.norm, self.head = nn.LayerNorm(128), nn.Linear(128, 10)

        def forward(self, x: Any) -> Any:
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x)[:, 0])

    class DistilBertPad(nn.Module):
        """DistilBERT-like: hidden 192, 6 heads, tanh GELU, a 0/1 padding mask applied with masked_fill."""

        def __init__(self) -> None:
            super().__init__()
            self.emb, self.pos = nn.Embedding(VOCAB, 192), nn.Embedding(96, 192)
            self.norm = nn.LayerNorm(192, eps=1e-12)
            self.blocks = nn.ModuleList([SplitBlock(192, 6, 768, False) for _ in range(2)])

        def forward(self, ids: Any, keep: Any) -> Any:
            positions = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
            x = self.norm(self.emb(ids) + self.pos(positions))
            for blk in self.blocks:
                x = blk(x, keep)
            return x[:, 0]

    class MixerBlock(nn.Module):
        def __init__(self, tokens: int, dim: int) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.tok = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens))
            self.ch = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x: Any) -> Any:
            x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
            return x + self.ch(self.n2(x))

    class MlpMixer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, 96, 8, stride=8)
            self.blocks = nn.Sequential(*(MixerBlock(64, 96) for _ in range(3)))
            self.norm, self.head = nn.LayerNorm(96), nn.Linear(96, 10)

        def forward(self, x: Any) -> Any:
            x = self.blocks(self.patch(x).flatten(2).transpose(1, 2))
            return self.head(self.norm(x).mean(1))

    class WindowAttention(nn.Module):
        """Swin-like: 4x4 windows over an 8x8 token map, packed QKV, a learned relative-position bias per head."""

        def __init__(self, dim: int, heads: int, window: int) -> None:
            super().__init__()
            self.heads, self.window = heads, window
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.bias = nn.Parameter(torch.randn(1, heads, window * window, window * window) * 0.02)
            self.scale = (dim // heads) ** -0.5

        def forward(self, x: Any) -> Any:
            b, hh, ww, c = x.shape
            w, h = self.window, self.heads
            x = x.view(b, hh // w, w, ww // w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, c)
            qkv = self.qkv(x).reshape(-1, w * w, 3, h, c // h).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            attn = ((q * self.scale) @ k.transpose(-2, -1) + self.bias).softmax(-1)
            y = self.proj((attn @ v).transpose(1, 2).reshape(-1, w * w, c))
            return y.view(b, hh // w, ww // w, w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hh, ww, c)

    class SwinBlock(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.attn = WindowAttention(dim, 4, 4)
            self.mlp = nn.Sequential(nn.Linear(dim, 3 * dim), nn.GELU(), nn.Linear(3 * dim, dim))

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.n1(x))
            return x + self.mlp(self.n2(x))

    class SwinLike(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, 96, 4, stride=4)
            self.blocks = nn.Sequential(SwinBlock(96), SwinBlock(96))
            self.head = nn.Linear(96, 10)

        def forward(self, x: Any) -> Any:
            x = self.blocks(self.patch(x).permute(0, 2, 3, 1))
            return self.head(x.mean((1, 2)))

    def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, act: Any = nn.ReLU) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout), act())

    class YoloSilu(nn.Module):
        """YOLO-like neck: SiLU convs, a x2 and a x4 nearest Resize into one Concat, Sigmoid heads at two scales."""

        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Sequential(conv_bn(3, 16, 3, 2, nn.SiLU), conv_bn(16, 32, 3, 2, nn.SiLU))
            self.c2 = conv_bn(32, 64, 3, 2, nn.SiLU)
            self.c3 = conv_bn(64, 96, 3, 2, nn.SiLU)
            self.fuse = conv_bn(32 + 64 + 96, 64, 1, 1, nn.SiLU)
            self.det_small, self.det_large = nn.Conv2d(64, 3 * 9, 1), nn.Conv2d(96, 3 * 9, 1)

        def forward(self, x: Any) -> Any:
            p2 = self.c1(x)
            p3 = self.c2(p2)
            p4 = self.c3(p3)
            up3 = F.interpolate(p3, scale_factor=2.0, mode="nearest")
            up4 = F.interpolate(p4, scale_factor=4.0, mode="nearest")
            f = self.fuse(torch.cat([p2, up3, up4], 1))
            small = torch.sigmoid(self.det_small(f)).flatten(2)
            large = torch.sigmoid(self.det_large(p4)).flatten(2)
            return torch.cat([small, large], 2).transpose(1, 2)

    class Swish(nn.Module):
        def forward(self, x: Any) -> Any:
            return x * torch.sigmoid(x)

    class MBConv6(nn.Module):
        """EfficientNet-B0's block: expand 6, BN, Swish by hand, SE squeezing to a quarter of the *input* channels
        through ReLU (not SiLU), and a hard-sigmoid-free ``x * sigmoid`` gate."""

        def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int = 6) -> None:
            super().__init__()
            mid = cin * expand
            layers: list[nn.Module] = []
            if expand != 1:
                layers.append(conv_bn(cin, mid, 1, 1, Swish))
            layers += [
                nn.Conv2d(mid, mid, k, stride, k // 2, groups=mid, bias=False),
                nn.BatchNorm2d(mid),
                Swish(),
            ]
            self.body = nn.Sequential(*layers)
            squeeze = max(1, cin // 4)
            self.se_reduce, self.se_expand = nn.Conv2d(mid, squeeze, 1), nn.Conv2d(squeeze, mid, 1)
            self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            y = self.body(x)
            s = y.mean((2, 3), keepdim=True)
            y = y * torch.sigmoid(self.se_expand(torch.relu(self.se_reduce(s))))
            y = self.project(y)
            return x + y if self.residual else y

    class EfficientNetB0Like(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = conv_bn(3, 16, 3, 2, Swish)
            self.blocks = nn.Sequential(
                MBConv6(16, 16, 3, 1, expand=1),
                MBConv6(16, 24, 3, 2),
                MBConv6(24, 24, 3, 1),
                MBConv6(24, 40, 5, 2),
                MBConv6(40, 40, 5, 1),
                MBConv6(40, 64, 3, 2),
            )
            self.head = nn.Sequential(conv_bn(64, 256, 1, 1, Swish), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.fc = nn.Linear(256, 10)

        def forward(self, x: Any) -> Any:
            return self.fc(self.head(self.blocks(self.stem(x))))

    class ChannelsFirstNorm(nn.Module):
        """ConvNeXt's LayerNorm over channels of an NCHW tensor, written out as the original code does."""

        def __init__(self, dim: int) -> None:
            super().__init__()
            self.weight, self.bias = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim))

        def forward(self, x: Any) -> Any:
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / torch.sqrt(s + 1e-6)
            return self.weight[:, None, None] * x + self.bias[:, None, None]

    class ConvNeXtBlock(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.pw1, self.pw2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(torch.full((dim,), 0.1))

        def forward(self, x: Any) -> Any:
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            y = self.gamma * self.pw2(F.gelu(self.pw1(y)))
            return x + y.permute(0, 3, 1, 2)

    class ConvNeXtOther(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 4, stride=4), ChannelsFirstNorm(32))
            self.s1 = ConvNeXtBlock(32)
            self.down1 = nn.Sequential(ChannelsFirstNorm(32), nn.Conv2d(32, 64, 2, stride=2))
            self.s2 = nn.Sequential(ConvNeXtBlock(64), ConvNeXtBlock(64))
            self.down2 = nn.Sequential(ChannelsFirstNorm(64), nn.Conv2d(64, 128, 2, stride=2))
            self.s3 = ConvNeXtBlock(128)
            self.norm, self.head = nn.LayerNorm(128), nn.Linear(128, 10)

        def forward(self, x: Any) -> Any:
            x = self.s3(self.down2(self.s2(self.down1(self.s1(self.stem(x))))))
            return self.head(self.norm(x.mean((2, 3))))

    class UNetBilinear(nn.Module):
        """Three levels; the decoder upsamples bilinearly, once with align_corners=True and once with False."""

        def __init__(self) -> None:
            super().__init__()

            def double(cin: int, cout: int) -> nn.Module:
                return nn.Sequential(conv_bn(cin, cout), conv_bn(cout, cout))

            self.e1, self.e2, self.e3 = double(3, 16), double(16, 32), double(32, 64)
            self.d2, self.d1 = double(64 + 32, 32), double(32 + 16, 16)
            self.out = nn.Conv2d(16, 1, 1)

        def forward(self, x: Any) -> Any:
            a = self.e1(x)
            b = self.e2(F.max_pool2d(a, 2))
            c = self.e3(F.max_pool2d(b, 2))
            up = F.interpolate(c, scale_factor=2.0, mode="bilinear", align_corners=True)
            d = self.d2(torch.cat([b, up], 1))
            up = F.interpolate(d, scale_factor=2.0, mode="bilinear", align_corners=False)
            return torch.sigmoid(self.out(self.d1(torch.cat([a, up], 1))))

    class VaeDecoder(nn.Module):
        """A latent of 32 to a 64x64 image: Linear, then ConvTranspose kernel 4 stride 2 padding 1, BN, LeakyReLU."""

        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(32, 128 * 4 * 4)

            def up(cin: int, cout: int) -> nn.Module:
                return nn.Sequential(
                    nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2)
                )

            self.body = nn.Sequential(up(128, 64), up(64, 32), up(32, 16))
            self.out = nn.ConvTranspose2d(16, 3, 4, 2, 1)

        def forward(self, z: Any) -> Any:
            return torch.tanh(self.out(self.body(self.fc(z).view(-1, 128, 4, 4))))

    class GatedResidual(nn.Module):
        def __init__(self, ch: int, dilation: int) -> None:
            super().__init__()
            self.pad = 2 * dilation
            self.filt = nn.Conv1d(ch, ch, 3, dilation=dilation)
            self.gate = nn.Conv1d(ch, ch, 3, dilation=dilation)
            self.res, self.skip = nn.Conv1d(ch, ch, 1), nn.Conv1d(ch, ch, 1)

        def forward(self, x: Any) -> tuple[Any, Any]:
            y = F.pad(x, (self.pad, 0))
            z = torch.tanh(self.filt(y)) * torch.sigmoid(self.gate(y))
            return x + self.res(z), self.skip(z)

    class WaveNetLike(nn.Module):
        """Causal dilated 1-D convs (dilations 1..32) with gated tanh*sigmoid units, residual and skip paths."""

        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Conv1d(1, 32, 1)
            self.layers = nn.ModuleList([GatedResidual(32, 2**i) for i in range(6)])
            self.post = nn.Sequential(nn.ReLU(), nn.Conv1d(32, 32, 1), nn.ReLU(), nn.Conv1d(32, 16, 1))

        def forward(self, x: Any) -> Any:
            x = self.inp(x)
            total = 0
            for layer in self.layers:
                x, s = layer(x)
                total = total + s
            return self.post(total)

    class TcnClassifier(nn.Module):
        """A TCN: strided 1-D conv stem, dilated non-causal blocks with BatchNorm and residuals, global max pool."""

        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv1d(40, 64, 5, stride=2, padding=2), nn.BatchNorm1d(64), nn.ReLU())
            blocks = []
            for d in (1, 2, 4, 8):
                blocks.append(nn.Sequential(nn.Conv1d(64, 64, 3, padding=d, dilation=d), nn.BatchNorm1d(64), nn.ReLU()))
            self.blocks = nn.ModuleList(blocks)
            self.out = nn.Linear(64, 12)

        def forward(self, x: Any) -> Any:
            x = self.stem(x)
            for blk in self.blocks:
                x = x + blk(x)
            return self.out(x.amax(2))

    class DlrmBags(nn.Module):
        """DLRM-like: six ``nn.EmbeddingBag`` tables (three sum, three mean) over bags of 5 ids, a dot-product
        interaction between the bags and the bottom MLP's output, and a top MLP."""

        def __init__(self) -> None:
            super().__init__()
            self.tables = nn.ModuleList(
                [nn.EmbeddingBag(VOCAB, 24, mode="sum" if i % 2 == 0 else "mean") for i in range(6)]
            )
            self.bottom = nn.Sequential(nn.Linear(16, 48), nn.ReLU(), nn.Linear(48, 24), nn.ReLU())
            self.top = nn.Sequential(nn.Linear(24 + 21, 64), nn.ReLU(), nn.Linear(64, 1), nn.Sigmoid())

        def forward(self, dense: Any, ids: Any) -> Any:
            d = self.bottom(dense)
            feats = torch.stack([d, *(t(ids[:, i]) for i, t in enumerate(self.tables))], 1)
            inter = feats @ feats.transpose(1, 2)
            rows, cols = torch.triu_indices(7, 7, 1)
            return self.top(torch.cat([d, inter[:, rows, cols]], 1))

    def ids(*shape: int, high: int = VOCAB) -> Any:
        return torch.randint(0, high, (1, *shape))

    return {
        "prenorm_encoder": lambda: (PreNormEncoder(), (ids(48),), ["ids"]),
        "transformer_seq2seq": lambda: (TransformerSeq2Seq(), (ids(20), ids(16)), ["src", "tgt"]),
        "vit_patch4": lambda: (VitP4(), (torch.randn(1, 3, 32, 32),), ["input"]),
        "distilbert_padmask": lambda: (
            DistilBertPad(),
            (ids(96), torch.ones(1, 96, dtype=torch.int64)),
            ["ids", "keep"],
        ),
        "mlp_mixer": lambda: (MlpMixer(), (torch.randn(1, 3, 64, 64),), ["input"]),
        "swin_window": lambda: (SwinLike(), (torch.randn(1, 3, 32, 32),), ["input"]),
        "yolo_silu": lambda: (YoloSilu(), (torch.randn(1, 3, 128, 128),), ["input"]),
        "efficientnet_b0_like": lambda: (EfficientNetB0Like(), (torch.randn(1, 3, 96, 96),), ["input"]),
        "convnext_cf": lambda: (ConvNeXtOther(), (torch.randn(1, 3, 64, 64),), ["input"]),
        "unet_bilinear": lambda: (UNetBilinear(), (torch.randn(1, 3, 64, 64),), ["input"]),
        "vae_decoder": lambda: (VaeDecoder(), (torch.randn(1, 32),), ["z"]),
        "wavenet_like": lambda: (WaveNetLike(), (torch.randn(1, 1, 4000),), ["input"]),
        "tcn_classifier": lambda: (TcnClassifier(), (torch.randn(1, 40, 200),), ["input"]),
        "dlrm_bags": lambda: (DlrmBags(), (torch.randn(1, 16), ids(6, 5)), ["dense", "ids"]),
    }


def build(name: str) -> onnx.ModelProto:
    """The named held-out model, exported from PyTorch (seeded weights, a dynamic batch axis)."""
    import torch

    torch.manual_seed(1)
    module, example, names = _modules()[name]()
    # the fused inference kernels of nn.TransformerEncoderLayer/nn.MultiheadAttention have no ONNX export: users
    # exporting these modules switch them off, and the exporter then traces the plain ops
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        return export_module(module, example, names)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
