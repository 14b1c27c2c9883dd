"""The fit leaves out rows LoadGen judged INVALID for more than their length and rows flagged busy (schema v4), unless
asked to keep them."""

from __future__ import annotations

from perfmodels.fit import flagged, training_rows
from perfmodels.results_db import to_frame
from tests.rows import fit_row


def measured(model: str, **fields: object) -> dict[str, object]:
    return fit_row(model, **fields)


def test_invalid_and_busy_rows_are_left_out_of_the_fit_by_default():
    frame = to_frame(
        [
            measured("valid", driver="loadgen", verdict="VALID"),
            measured("invalid", driver="loadgen", verdict="INVALID", verdict_reason="latency bound not met"),
            measured("busy", driver="loadgen", verdict="VALID", flags="busy", other_cpu=1.0),
            measured("old", driver="harness"),  # a row from before verdicts: judged as before
        ]
    )
    assert flagged(frame).tolist() == [False, True, True, False]
    assert sorted(training_rows(frame)["model"]) == ["old", "valid"]
    assert sorted(training_rows(frame, include_flagged=True)["model"]) == ["busy", "invalid", "old", "valid"]


def test_a_run_shorter_than_mlperfs_rules_is_a_measurement_and_one_that_failed_otherwise_is_not():
    """A recording stops after a few queries on purpose: LoadGen calls that INVALID (early stopping, minimum duration
    or query count not met), and the fit keeps the row. A latency bound missed, an error, or no reason: left out."""
    short = "early stopping not met; (* Only processed 5 queries. * Need to process at least 64 queries ...)"
    frame = to_frame(
        [
            measured("few-queries", driver="loadgen", verdict="INVALID", verdict_reason=short),
            measured("short", driver="loadgen", verdict="INVALID", verdict_reason="min duration not met; Ending early"),
            measured("bound", driver="loadgen", verdict="INVALID", verdict_reason="latency bound not met; " + short),
            measured("error", driver="loadgen", verdict="INVALID", verdict_reason="Multiple query completions"),
            measured("unsaid", driver="loadgen", verdict="INVALID"),
        ]
    )
    assert flagged(frame).tolist() == [False, False, True, True, True]
    assert sorted(training_rows(frame)["model"]) == ["few-queries", "short"]
