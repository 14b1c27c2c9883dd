"""appopt's own ONNX runtime: load, check, optimise and run a model with NumPy kernels.

>>> from runtime import compile_model
>>> exe = compile_model("model.onnx", threads=2)   # doctest: +SKIP
>>> outputs = exe.run({"input": x})                  # doctest: +SKIP
"""

from __future__ import annotations

from runtime.errors import KernelError, ModelCheckError, RuntimeModelError, UnsupportedOpError
from runtime.executor import CompileOptions, Executable, compile_model

__version__ = "0.1.0"

__all__ = [
    "CompileOptions",
    "Executable",
    "KernelError",
    "ModelCheckError",
    "RuntimeModelError",
    "UnsupportedOpError",
    "__version__",
    "compile_model",
]
