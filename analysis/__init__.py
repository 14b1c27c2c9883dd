"""Model analysis that the planner, the performance models and the benchmarks share, without the runtime.

:mod:`analysis.modelinfo` counts what an ONNX graph costs (FLOPs, bytes, parameters per op class);
:mod:`analysis.units` defines kernel units; :mod:`analysis.unitgraph` cuts a graph into them.
It imports nothing else of ours but :mod:`apperrors`.
"""
