"""The fit leaves out rows LoadGen judged INVALID and rows flagged busy (schema v4), unless asked to keep them."""

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
            measured("invalid", driver="loadgen", verdict="INVALID", verdict_reason="min duration not met"),
            measured("busy", driver="loadgen", verdict="VALID", flags="busy", other_cpu=1.0),
            measured("old", driver="harness"),  # a row from before verdicts: judged as before
        ]
    )
    assert flagged(frame).tolist() == [False, True, True, False]
    assert sorted(training_rows(frame)["model"]) == ["old", "valid"]
    assert sorted(training_rows(frame, include_flagged=True)["model"]) == ["busy", "invalid", "old", "valid"]
