"""What each round of the kernel-unit sweep buys: held-out accuracy with the first N rounds' unit rows.

    python -m benchmarks.sweep_rounds DB [--rounds 1 2]

``DB`` is a database recorded with every round (``appopt bench record-default -o DB``, or the shipped one extended
with ``appopt bench units --new --db DB``). For each ``--rounds`` value the unit-sweep rows of later rounds are left
out and ``perfmodels.evaluate.leave_one_architecture_out`` scores the models fitted on what remains, so the rounds
are compared on the same recording of the same machine (two recordings of two hosts are no comparison: their
kernels differ by up to 1.5x).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pandas as pd

from analysis.units import encode_units
from benchmarks.unit_sweep import SWEEP_ROUNDS, sample_rounds
from perfmodels.evaluate import leave_one_architecture_out
from perfmodels.results_db import ResultsSchemaError, read_results
from perfmodels.unitfit import UNIT_FAMILY


def rows_of_rounds(frame: pd.DataFrame, rounds: int) -> pd.DataFrame:
    """``frame`` without the unit-sweep rows of rounds after the first ``rounds``."""
    later = {encode_units([u]) for round_ in sample_rounds()[rounds:] for u in round_}
    return frame[(frame["family"] != UNIT_FAMILY) | ~frame["units"].isin(later)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_rounds", description=__doc__.split("\n")[0])
    parser.add_argument("db", help="a database recorded with every sweep round")
    parser.add_argument("--rounds", type=int, nargs="+", default=list(range(1, len(SWEEP_ROUNDS) + 1)))
    args = parser.parse_args(argv)
    bad = [n for n in args.rounds if not 1 <= n <= len(SWEEP_ROUNDS)]
    if bad:
        parser.error(f"--rounds: {bad[0]} is not between 1 and {len(SWEEP_ROUNDS)}")
    try:
        frame = read_results(args.db)
    except (OSError, ResultsSchemaError) as error:
        print(error, file=sys.stderr)
        return 1
    for n in args.rounds:
        rows = rows_of_rounds(frame, n)
        print(f"first {n} round(s): {int((rows['family'] == UNIT_FAMILY).sum())} unit-sweep rows")
        for line in leave_one_architecture_out(rows).lines()[1:5]:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
