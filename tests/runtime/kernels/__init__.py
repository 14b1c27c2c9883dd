"""Tests for the element-wise, activation, logic, reduction, cast, quantization and small math kernels."""
