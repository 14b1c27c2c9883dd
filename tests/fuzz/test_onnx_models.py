"""Mutated ONNX models end in success or the runtime's own one-line error: never a crash, hang or traceback.

A few hundred seeded examples (hypothesis, derandomised) run through one watched worker process; ``python -m
tests.fuzz onnx --examples 5000`` runs a larger campaign.
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.onnx_models import ACCEPTABLE, Worker, check_example, make_example, seed_models

EXAMPLES = 300
SEEDS = seed_models()
COUNTS: Counter[str] = Counter()


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    # a Loop whose trip count was mutated to INT64_MAX stops at the iteration cap: a lower cap keeps those
    # examples fast here (the default's seconds times two runs would dominate the campaign)
    w = Worker(env={"APPOPT_MAX_LOOP_ITERATIONS": "5000"})
    try:
        yield w
    finally:
        w.close()


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="appopt-fuzz-") as tmp:
        yield Path(tmp)


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.randoms(use_true_random=False))
def test_mutated_models_are_run_or_refused_in_one_line(worker: Worker, scratch: Path, rng: random.Random) -> None:
    example = make_example(rng, SEEDS)
    outcome, detail = check_example(worker, example, scratch)
    COUNTS[outcome] += 1
    assert outcome in ACCEPTABLE, f"{outcome}: seed {example.seed!r} after {example.mutations}: {detail}"


def test_the_fuzzer_reaches_both_outcomes() -> None:
    """The campaign above must not be all refusals (mutations too destructive) nor all successes (too timid)."""
    if sum(COUNTS.values()) < EXAMPLES // 2:
        pytest.skip("test_mutated_models_are_run_or_refused_in_one_line did not run first: no campaign to count")
    assert COUNTS["ok"] >= EXAMPLES // 20 and COUNTS["refused"] >= EXAMPLES // 5, dict(COUNTS)


FAKE_WORKER = """
import json, os, signal, sys, time
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    path = json.loads(line)["path"]
    if path.endswith("segv"):
        os.kill(os.getpid(), signal.SIGSEGV)
    if path.endswith("sleep"):
        time.sleep(60)
    print(json.dumps({"outcome": "refused", "detail": path}), flush=True)
"""


def test_the_watchdog_tells_a_crash_and_a_hang_from_a_refusal(tmp_path: Path) -> None:
    w = Worker(timeout=2, code=FAKE_WORKER)
    try:
        assert w.run(tmp_path / "fine", False, None)[0] == "refused"
        outcome, detail = w.run(tmp_path / "segv", False, None)
        assert (outcome, detail) == ("crash", "worker exited with -11 (signal 11)")
        assert w.run(tmp_path / "sleep", False, None)[0] == "hang"
        assert w.run(tmp_path / "fine", False, None)[0] == "refused"  # restarted after each
    finally:
        w.close()
