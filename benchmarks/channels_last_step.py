"""PyTorch's training step in NCHW against channels-last (NHWC), in alternating runs of one process.

Two hand-built nets (a ResNet-style stack of 3x3 convolutions, and a depthwise-separable one of MobileNetV2's
inverted residuals), SGD with momentum, the median of ``--steps`` timed steps after three warm-ups, per layout and
round; prints the medians in milliseconds. The figures of 2026-11-28 are in docs/decisions.md.

    python -m benchmarks.channels_last_step --threads 2 --rounds 2
"""

from __future__ import annotations

import argparse
import time
from typing import Any


def _net(depthwise: bool) -> Any:
    from torch import nn

    def block(c_in: int, c_out: int) -> nn.Module:
        if depthwise:
            wide = c_in * 4
            return nn.Sequential(
                nn.Conv2d(c_in, wide, 1, bias=False), nn.BatchNorm2d(wide), nn.ReLU6(),
                nn.Conv2d(wide, wide, 3, 2, 1, groups=wide, bias=False), nn.BatchNorm2d(wide), nn.ReLU6(),
                nn.Conv2d(wide, c_out, 1, bias=False), nn.BatchNorm2d(c_out),
            )  # fmt: skip
        return nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, 2, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
        )  # fmt: skip

    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU()]
    channels = 32
    for out in (32, 64, 128, 256):
        layers.append(block(channels, out))
        channels = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))


def step_ms(depthwise: bool, size: int, batch: int, channels_last: bool, steps: int) -> float:
    """The median step of a fresh seeded net in one layout, in milliseconds."""
    import torch

    torch.manual_seed(0)
    model = _net(depthwise)
    x, y = torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), 0.01, momentum=0.9)

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    for name, depthwise, size, batch in (("resnet-style", False, 112, 8), ("depthwise-separable", True, 112, 8),
                                         ("resnet-style", False, 56, 32)):  # fmt: skip
        medians: dict[str, list[float]] = {"NCHW": [], "NHWC": []}
        for _ in range(args.rounds):
            for layout in medians:
                medians[layout].append(step_ms(depthwise, size, batch, layout == "NHWC", args.steps))
        shown = "  ".join(f"{k} " + ", ".join(f"{v:.1f}" for v in vs) for k, vs in medians.items())
        print(f"{name} {size}x{size} b{batch}, {args.threads} thread(s): {shown} ms", flush=True)


if __name__ == "__main__":
    main()
