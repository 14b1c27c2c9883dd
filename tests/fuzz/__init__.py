"""Fuzzers: hostile specs (``specs``) and mutated ONNX models (``onnx_models``), run by ``python -m tests.fuzz``."""
