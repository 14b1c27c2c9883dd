"""``python -m tests.fuzz spec --examples 10000`` (or ``onnx``): run a fuzzer at scale and print counts by outcome.

Each subcommand lives in its own module (``tests/fuzz/specs.py``, ``tests/fuzz/onnx_models.py``) and exposes
``main(argv) -> int``; a module that is absent is reported, not a traceback. Exit status 1 when any bad outcome.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = {"spec": "tests.fuzz.specs", "onnx": "tests.fuzz.onnx_models"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SUBCOMMANDS:
        print(f"usage: python -m tests.fuzz {{{'|'.join(SUBCOMMANDS)}}} [--examples N] [--seed S]", file=sys.stderr)
        return 2
    name = SUBCOMMANDS[argv[0]]
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        print(f"error: {name} is not in this checkout", file=sys.stderr)
        return 2
    return int(module.main(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
