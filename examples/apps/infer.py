"""Run a named architecture's inference in PyTorch on synthetic inputs and report throughput.

The examples' images run this (``application.command``), so the image does the example's job: the model runs on its
framework at the plan's precision (``APPOPT_PRECISION``: bf16/fp16 through autocast) and layout (``APPOPT_LAYOUT``
NHWC: channels_last for the CNNs). Under ``mpirun``/``srun`` each rank runs its share of ``--samples``.

    python3 infer.py --arch bert_base --batch-size 32 --batches 10

``--seed`` fixes the random weights and ``--save-output FILE.json`` writes the last batch's outputs, so two
machines (x86 and arm64 under emulation) can be compared on the same model.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from models import ARCHITECTURES, build, distributed_rank, synthetic_batch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", required=True, choices=ARCHITECTURES)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--batches", type=int, default=10, help="timed batches (after one warm-up batch)")
    parser.add_argument("--samples", type=int, default=0, help="samples in all, shared by the ranks (overrides "
                        "--batches)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--precision", default=os.environ.get("APPOPT_PRECISION", "fp32"))
    parser.add_argument("--layout", default=os.environ.get("APPOPT_LAYOUT", "NCHW"))
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: OMP_NUM_THREADS)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random weights (default: unseeded)")
    parser.add_argument("--save-output", default="", help="write rank 0's last outputs here as JSON (shape, values)")
    args = parser.parse_args(argv)

    rank, world, local_rank = distributed_rank()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    if args.seed is not None:
        torch.manual_seed(args.seed)
    model = build(args.arch).eval().to(device)
    inputs, _ = synthetic_batch(args.arch, args.batch_size, image_size=args.image_size, seq_len=args.seq_len,
                                seed=rank)
    inputs = inputs.to(device)
    channels_last = args.layout.upper() == "NHWC" and inputs.dim() == 4
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    batches = args.batches
    if args.samples:
        batches = max(1, -(-args.samples // (args.batch_size * world)))
    dtype = DTYPES.get(args.precision)
    print(f"infer: {args.arch} on PyTorch {torch.__version__} ({device}, {torch.get_num_threads()} threads), "
          f"{args.precision}{' channels_last' if channels_last else ''}, batch {args.batch_size}, "
          f"rank {rank}/{world}", flush=True)
    with torch.inference_mode(), torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        model(inputs)  # warm-up
        started = time.perf_counter()
        for _ in range(batches):
            logits = model(inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
    print(f"infer: output {tuple(logits.shape)} {str(logits.dtype).replace('torch.', '')}, finite: "
          f"{bool(torch.isfinite(logits.float()).all())}")
    if args.save_output and rank == 0:
        with open(args.save_output, "w", encoding="utf-8") as out:
            json.dump({"shape": list(logits.shape), "values": logits.float().cpu().flatten().tolist()}, out)
    print(f"infer: {batches} batches in {seconds:.3f} s: {batches * args.batch_size / seconds:.1f} samples/s, "
          f"{1e3 * seconds / batches:.2f} ms per batch")


if __name__ == "__main__":
    main()
