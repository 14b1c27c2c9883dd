"""Fuzzing: hypothesis strategies run a bounded, seeded number of examples in the suite; ``python -m tests.fuzz``
runs larger campaigns and prints counts by outcome."""
