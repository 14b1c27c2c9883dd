"""The examples' named architectures in plain PyTorch (no torchvision or transformers, no downloaded weights).

ResNet-18/50 (He et al. 2015, torchvision's layout) and BERT-base (Devlin et al. 2018: 12 layers, hidden 768,
12 heads, feed-forward 3072, vocabulary 30522), randomly initialised: the examples measure and train the
architecture, they do not ship pretrained weights. ``synthetic_batch`` makes inputs of the right shape.
"""

from __future__ import annotations

import torch
from torch import nn

ARCHITECTURES = ("resnet18", "resnet50", "bert_base")


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (self.downsample(x) if self.downsample is not None else x))


def _shortcut(inplanes: int, planes: int, stride: int) -> nn.Module | None:
    if stride == 1 and inplanes == planes:
        return None
    return nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))


class ResNet(nn.Module):
    def __init__(self, block: type[BasicBlock | Bottleneck], layers: list[int], num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        stages, inplanes = [], 64
        for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers, strict=True)):
            for j in range(blocks):
                stages.append(block(inplanes, planes, 2 if i > 0 and j == 0 else 1))
                inplanes = planes * block.expansion
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inplanes, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


class Bert(nn.Module):
    """BERT encoder with a pooled classification head (sequence classification)."""

    def __init__(self, vocab: int = 30522, hidden: int = 768, layers: int = 12, heads: int = 12, ff: int = 3072,
                 max_len: int = 512, num_classes: int = 2) -> None:
        super().__init__()
        self.words = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(max_len, hidden)
        self.types = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        layer = nn.TransformerEncoderLayer(hidden, heads, ff, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pooler = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.norm(self.words(tokens) + self.positions(positions) + self.types(torch.zeros_like(tokens)))
        return self.classifier(self.pooler(self.encoder(x)[:, 0]))


def build(arch: str, num_classes: int | None = None) -> nn.Module:
    """A randomly initialised ``arch`` (one of :data:`ARCHITECTURES`)."""
    if arch == "resnet18":
        return ResNet(BasicBlock, [2, 2, 2, 2], num_classes or 1000)
    if arch == "resnet50":
        return ResNet(Bottleneck, [3, 4, 6, 3], num_classes or 1000)
    if arch == "bert_base":
        return Bert(num_classes=num_classes or 2)
    raise SystemExit(f"--arch {arch!r}: expected one of {', '.join(ARCHITECTURES)}")


def num_classes_of(arch: str) -> int:
    return 2 if arch == "bert_base" else 1000


def synthetic_batch(arch: str, batch: int, *, image_size: int = 224, seq_len: int = 128,
                    seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels) of the shapes ``arch`` takes, from a seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes_of(arch), (batch,), generator=generator)
    if arch == "bert_base":
        return torch.randint(0, 30522, (batch, seq_len), generator=generator), labels
    return torch.randn(batch, 3, image_size, image_size, generator=generator), labels


def distributed_rank() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun, Slurm (srun) or Open MPI / MPICH (mpirun); (0, 1, 0) alone."""
    import os

    for rank_key, size_key, local_key in (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                                          ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
                                          ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK"),
                                          ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID")):
        if rank_key in os.environ and size_key in os.environ:
            return int(os.environ[rank_key]), int(os.environ[size_key]), int(os.environ.get(local_key, "0"))
    return 0, 1, 0
