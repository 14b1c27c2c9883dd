"""``python -m tests.fuzz onnx --examples 5000`` (or ``spec``): a larger fuzz run, counts by outcome."""

from __future__ import annotations

import importlib
import sys

#: Subcommand -> module with a ``main(argv) -> int``; a module another branch adds may be absent here.
COMMANDS = {"onnx": "tests.fuzz.onnx_models", "spec": "tests.fuzz.specs"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m tests.fuzz {{{','.join(COMMANDS)}}} [--examples N] [--seed S]", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(COMMANDS[argv[0]])
    except ModuleNotFoundError as exc:
        print(f"error: fuzzer {argv[0]!r} is not available here ({exc})", file=sys.stderr)
        return 2
    return int(module.main(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
