"""The test every kernel test module starts with: each of its ops passes the ONNX backend node cases."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest


def backend_cases_test(ops: Sequence[str]) -> Callable[..., None]:
    """A ``test_backend_cases_pass`` over ``ops`` (uses conftest's ``backend_failures``); assign it to that name in
    the test module so pytest collects it there::

        test_backend_cases_pass = backend_cases_test(["Relu", "Sigmoid"])
    """

    @pytest.mark.parametrize("op", list(ops))
    def test_backend_cases_pass(op: str, backend_failures: Any) -> None:
        count, failures = backend_failures(op)
        assert count > 0, f"no backend cases found for {op}"
        assert not failures, "\n".join(failures)

    return test_backend_cases_pass
