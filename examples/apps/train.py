"""Train a named architecture in PyTorch: on arrays from an .npz file, or on synthetic data when none is given.

The ResNet-50 example's image runs this (``application.command``). Under ``srun`` (one task per GPU) the ranks train
one model together with DistributedDataParallel (NCCL on GPUs, gloo on CPUs), each on its share of the global batch.
Every epoch ends with an atomic checkpoint; ``--resume`` continues from it (a preempted job resubmitted).

    python3 train.py --arch resnet50 --epochs 90 --batch-size 256
    python3 train.py --arch resnet18 --data shards.npz      # x: (N, 3, H, W) or (N, H, W, 3), y: (N,)
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from models import ARCHITECTURES, build, distributed_rank, num_classes_of, synthetic_batch
from torch import nn

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def load_data(path: str | None, arch: str, samples: int, image_size: int, seq_len: int
              ) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(x, y, where they came from): the .npz arrays, or a seeded synthetic set of ``samples``."""
    if not path:
        x, y = synthetic_batch(arch, samples, image_size=image_size, seq_len=seq_len)
        return x, y, f"synthetic ({samples} samples; pass --data FILE.npz for real data)"
    import numpy as np  # only for --data: the image's PyTorch needs no NumPy otherwise

    if not os.path.isfile(path):
        raise SystemExit(f"train.py: --data {path!r}: no such file (an .npz with x and y arrays)")
    with np.load(path) as arrays:
        names = [n for n in ("x_train", "x") if n in arrays]
        if not names:
            raise SystemExit(f"train.py: --data {path!r}: no x_train or x array")
        x, y = np.asarray(arrays[names[0]]), np.asarray(arrays[names[0].replace("x", "y")])
    tensor = torch.from_numpy(x)
    if tensor.dim() == 4 and tensor.shape[-1] == 3:
        tensor = tensor.permute(0, 3, 1, 2)  # NHWC files -> the model's NCHW
    if not tensor.is_floating_point() and arch != "bert_base":
        tensor = tensor.float() / 255.0
    return tensor.contiguous(), torch.from_numpy(y).long(), path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", required=True, choices=ARCHITECTURES)
    parser.add_argument("--data", default=None, help="an .npz file with x/y (or x_train/y_train) arrays")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=0, help="stop after this many steps in all (0: no limit)")
    parser.add_argument("--batch-size", type=int, default=32, help="the global batch, split across the ranks")
    parser.add_argument("--synthetic-samples", type=int, default=0, help="synthetic set size (default 4 batches)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--precision", default=os.environ.get("APPOPT_PRECISION", "fp32"))
    parser.add_argument("--layout", default=os.environ.get("APPOPT_LAYOUT", "NCHW"), help="NHWC: channels_last")
    parser.add_argument("--checkpoint", default="checkpoints", help="directory for the per-epoch checkpoint")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint when it holds one")
    parser.add_argument("-o", "--out", default=None, help="the trained weights (default: trained-ARCH.pt)")
    args = parser.parse_args(argv)

    rank, world, local_rank = distributed_rank()
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", os.environ.get("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"))
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = build(args.arch).to(device)
    channels_last = args.layout.upper() == "NHWC" and args.arch != "bert_base"
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    per_rank = max(1, args.batch_size // world)
    x, y, source = load_data(args.data, args.arch, args.synthetic_samples or 4 * per_rank * world,
                             args.image_size, args.seq_len)
    if int(y.max()) >= num_classes_of(args.arch):
        raise SystemExit(f"train.py: labels go up to {int(y.max())}; {args.arch} has {num_classes_of(args.arch)}")
    checkpoint = Path(args.checkpoint) / "last.pt"
    start_epoch = 0
    if args.resume and checkpoint.is_file():
        state = torch.load(checkpoint, map_location=device)
        _unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"]
    dtype = DTYPES.get(args.precision)
    scaler = torch.amp.GradScaler(enabled=cuda and dtype is torch.float16)
    if rank == 0:
        print(f"train: {args.arch} on PyTorch {torch.__version__} ({device}), {args.precision}"
              f"{' channels_last' if channels_last else ''}, global batch "
              f"{per_rank * world} over {world} rank(s), data: {source}", flush=True)
        if start_epoch:
            print(f"train: resumed from {checkpoint} after epoch {start_epoch}")
    shard = torch.arange(rank, len(x), world)  # each rank's samples
    steps_per_epoch = max(1, len(shard) // per_rank)
    step = 0
    for epoch in range(start_epoch, args.epochs):
        model.train()
        order = shard[torch.randperm(len(shard), generator=torch.Generator().manual_seed(epoch))]
        started, total, done = time.perf_counter(), 0.0, 0
        for i in range(steps_per_epoch):
            batch = order[i * per_rank:(i + 1) * per_rank]
            inputs, labels = x[batch].to(device), y[batch].to(device)
            if channels_last:
                inputs = inputs.contiguous(memory_format=torch.channels_last)
            with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                loss = loss_fn(model(inputs), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total += loss.item()
            done += 1
            step += 1
            if rank == 0:
                print(f"train: epoch {epoch + 1}/{args.epochs} step {i + 1}/{steps_per_epoch} loss {loss.item():.4f}",
                      flush=True)
            if args.steps and step >= args.steps:
                break
        if rank == 0:
            seconds = time.perf_counter() - started
            print(f"train: epoch {epoch + 1} mean loss {total / done:.4f}, "
                  f"{done * per_rank * world / seconds:.1f} samples/s")
            _save({"model": _unwrap(model).state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1},
                  checkpoint)
        if args.steps and step >= args.steps:
            break
    if rank == 0:
        out = Path(args.out or f"trained-{args.arch}.pt")
        _save(_unwrap(model).state_dict(), out)
        print(f"train: wrote {out} and checkpoint {checkpoint}")
    if world > 1:
        dist.destroy_process_group()


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _save(state: object, path: Path) -> None:
    """Write atomically: a preempted job never leaves half a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
