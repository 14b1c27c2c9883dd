"""The spec the compiler-route tests plan (tests/optimiser/test_engine_routes.py renders it, and
tests/builders/realcomp/test_engine_images.py builds and runs its image): the digits MLP on onnxruntime, with the
graph compiler ``{compiler}`` required."""

COMPILER_ROUTE_SPEC = """\
# the digits MLP compiled by {compiler}: the image compiles it in the build stage and runs it with --engine {compiler}
name: digits-{compiler}
application:
  type: inference
  model: {{onnx: digits_mlp.onnx}}
  framework: onnxruntime
target:
  cpu: {{arch: x86_64, model: local}}
  scheduler: none
container:
  formats: [docker]
optimisation:
  allow: {{compilers: [{compiler}], precisions: [fp32]}}
  deny: {{compilers: [none]}}
"""
