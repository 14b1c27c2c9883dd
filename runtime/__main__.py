"""``python -m runtime``: the runtime's own command line, for images that carry the runtime without appopt.

    python -m runtime compile MODEL.onnx -o OUT [--engine appopt|openvino|tvm|iree] [--trials N]
    python -m runtime train MODEL.onnx --data FILE.npz -o TRAINED.onnx [--epochs N] [--checkpoint DIR --resume]
                            [--engine appopt|torch|torch-inductor|tensorflow|tensorflow-xla] ...
    python -m runtime train --arch resnet50 (--data FILE.npz | --synthetic N) -o TRAINED.onnx [--classes N]
                            [--image-size S] ...
    python -m runtime run MODEL_OR_OUT [--input name=file.npy ...] [--random] [--repeat N] [--threads N]
                          [--profile] [--engine appopt|onnxruntime|openvino|tvm|iree|jax]
    python -m runtime passes          (the graph passes in running order, each with why it sits there)

Only argparse and the runtime's own dependencies: this is what runs inside the built images.
"""

from __future__ import annotations

import argparse
import sys

from runtime.engines import compiled_engines, engine_names
from runtime.errors import RuntimeModelError


def _parser() -> argparse.ArgumentParser:
    from runtime.training.config import ENGINES  # (the trainers themselves are imported when one is asked for)

    parser = argparse.ArgumentParser(prog="python -m runtime", description="appopt's ONNX compiler and runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="check, optimise and save a model for fast start-up")
    comp.add_argument("model", help="an ONNX file")
    comp.add_argument("-o", "--out", required=True, help="output directory")
    comp.add_argument("--disable", action="append", default=[], help="a graph pass to switch off (repeatable)")
    comp.add_argument(
        "--engine", default="appopt", choices=["appopt", *compiled_engines()],
        help="whose artefact to write: this runtime's (default), OpenVINO IR, a TVM library or an IREE .vmfb",
    )
    comp.add_argument(
        "--trials", type=int, default=None, metavar="N",
        help="--engine tvm: search schedules with MetaSchedule over N trials first (the tuned route's build stage)",
    )
    comp.add_argument(
        "--batch", type=int, default=None, metavar="B",
        help="with --trials: the batch the search's static shapes fix (the plan's batch; default 1)",
    )
    run = sub.add_parser("run", help="run a model or a compiled directory and print output summaries and latency")
    run.add_argument("model", help="an ONNX file or a directory written by 'compile'")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input (repeatable)")
    run.add_argument("--random", action="store_true", help="fill inputs not given with seeded random data")
    run.add_argument("--repeat", type=int, default=1, help="runs to time (default 1)")
    run.add_argument("--threads", type=int, default=None, help="threads for kernels and BLAS")
    run.add_argument("--profile", action="store_true", help="print where the time goes, per op type and node")
    run.add_argument(
        "--engine", default="appopt", choices=list(engine_names()), help="what runs the model (default: appopt)"
    )
    train = sub.add_parser("train", help="train a model on arrays from an .npz file and write the trained model")
    train.add_argument("model", nargs="?", default=None, help="an ONNX file (or --arch NAME)")
    train.add_argument("--arch", default=None, help="a built-in architecture to build and train instead of a file")
    train.add_argument("--classes", type=int, default=1000, help="--arch: number of classes (default 1000)")
    train.add_argument(
        "--image-size", type=int, default=224, help="--arch: image height and width, or a BERT's sequence length (224)"
    )
    train.add_argument("--data", default=None, help="FILE.npz with x_train/y_train (+ x_test/y_test) or x/y")
    train.add_argument(
        "--synthetic", type=int, default=None, metavar="N",
        help="--arch without data: train on N seeded synthetic samples (a smoke and throughput run)",
    )
    train.add_argument("-o", "--out", required=True, help="where to write the trained ONNX model")
    train.add_argument("--epochs", type=int, default=10)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--lr", type=float, default=None, help="learning rate (default 0.05 sgd, 1e-3 adam)")
    train.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    train.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    train.add_argument(
        "--layout", default=None, choices=["NCHW", "NHWC"],
        help="4-D activations' memory layout (default: the engine's own; NHWC: PyTorch's channels_last)",
    )  # fmt: skip
    train.add_argument("--checkpoint", default=None, help="directory for atomic checkpoints (after every epoch)")
    train.add_argument("--resume", action="store_true", help="continue from --checkpoint when it holds one")
    train.add_argument("--threads", type=int, default=None)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument(
        "--engine", default="appopt", choices=list(ENGINES), help="who trains (default: this runtime)"
    )
    sub.add_parser("passes", help="list the graph passes in running order, each with why it sits there")
    return parser


def _train(args: argparse.Namespace) -> None:
    from runtime.training.run import model_and_data, train_to_file, training_config

    config = training_config(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        optimizer=args.optimizer,
        precision=args.precision,
        layout=args.layout,
        checkpoint=args.checkpoint,
        threads=args.threads,
        seed=args.seed,
    )
    model, data = model_and_data(
        args.model, args.arch, args.data, args.synthetic, args.classes, args.image_size, args.seed
    )
    train_to_file(
        model,
        data,
        args.out,
        config,
        resume=args.resume,
        echo=lambda line: print(line, flush=True),
        engine=args.engine,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from runtime import tools

    try:
        if args.command == "passes":
            from runtime.passes.pipeline import describe

            print("\n".join(describe()))
            return 0
        if args.command == "train":
            _train(args)
            return 0
        if args.command == "compile":
            manifest = tools.compile_to_dir(args.model, args.out, disable=args.disable, engine=args.engine,
                                            trials=args.trials, batch=args.batch)
            lines = tools.format_compile(manifest, args.out)
        else:
            report = tools.run_model(
                args.model,
                args.input,
                args.random,
                args.repeat,
                args.threads,
                profile=args.profile,
                engine=args.engine,
            )
            lines = tools.format_run(report)
    except RuntimeModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
