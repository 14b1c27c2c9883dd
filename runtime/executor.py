"""Compile a model into an executable plan and run it: the public face of the runtime core.

The work lives in one module per job; this module re-exports their public names so ``runtime.executor`` stays the
place callers import from:

* ``runtime.compile``: the compile pipeline (``compile_model``, ``compile_proto``) and ``Executable``;
* ``runtime.plan``: the interpreter (``Plan``), walking steps over a name -> value map;
* ``runtime.static_plan``: memory-planned execution for a recorded input signature;
* ``runtime.threads``: the compiled kernels' pool and the BLAS/OpenMP caps around a run;
* ``runtime.steps``: compile options, kernel lookup, steps and the checks both executions share;
* ``runtime.op_traits``: the op tables derived from kernel traits.

Example::

    exe = compile_model("model.onnx", threads=2)
    outputs = exe.run({"input": x})            # {output name: array}
"""

from __future__ import annotations

from runtime.compile import Executable, compile_model, compile_proto, specialise_input_shapes
from runtime.op_traits import BLAS_OPS, SIZE_CREATING_OPS, VIEW_OPS
from runtime.plan import Plan
from runtime.static_plan import MAX_STATIC_PLANS
from runtime.steps import CompileOptions, has_kernel, resolve_kernel
from runtime.threads import available_cpus, limit_threads, native_threads

__all__ = [
    "BLAS_OPS",
    "MAX_STATIC_PLANS",
    "SIZE_CREATING_OPS",
    "VIEW_OPS",
    "CompileOptions",
    "Executable",
    "Plan",
    "available_cpus",
    "compile_model",
    "compile_proto",
    "has_kernel",
    "limit_threads",
    "native_threads",
    "resolve_kernel",
    "specialise_input_shapes",
]
