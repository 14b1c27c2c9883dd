"""Which host a measurement came from: target keys, kernel ISA flags, and plans that say when this host differs."""

from __future__ import annotations

import onnx

from perfmodels.targets import host_difference, kernel_flags, target_key


def test_target_key_is_a_slug_of_model_and_cores():
    assert target_key("Intel(R) Xeon(R) Processor", 2) == "intel-r-xeon-r-processor-2c"


def test_kernel_flags_keep_only_the_vector_isa_that_kernels_use():
    flags = ["fpu", "vme", "avx2", "fma", "sse4_2", "avx512f", "amx_tile", "sve", "asimdhp", "ht"]
    assert kernel_flags(flags) == ("amx_tile", "asimdhp", "avx2", "avx512f", "fma", "sse4_2", "sve")


def test_host_difference_names_what_either_host_lacks():
    assert host_difference(["avx512f", "fma"], ["fma", "avx512f", "ht"]) == ""
    assert host_difference(["avx512f", "amx_int8", "amx_tile"], ["avx512f"]) == (
        "measured with amx_int8, amx_tile, which this CPU lacks"
    )
    assert host_difference(["avx2"], ["avx2", "avx512f"]) == "this CPU also has avx512f"


def test_a_local_plan_says_when_its_measurements_come_from_a_host_with_another_isa(tmp_path, monkeypatch):
    import perfmodels.fitted as fitted
    from benchmarks.models.transformer import mlp
    from optimiser.planner import make_plan
    from optimiser.spec import parse_spec
    from perfmodels.fitted import load_default_model
    from perfmodels.results_db import DEFAULT_DB, read_results
    from tests.perfmodels.test_default_model import SPEC, measured_target

    shipped = read_results(DEFAULT_DB)
    target, cores = measured_target(shipped)
    measured_flags = str(shipped[shipped["target"] == target]["cpu_flags"].dropna().mode().iloc[0]).split()
    monkeypatch.setattr(fitted, "local_target_key", lambda: target)
    monkeypatch.setattr(fitted, "usable_cores", lambda: cores)
    onnx.save(mlp(sizes=(64, 128, 64, 10)), str(tmp_path / "digits.onnx"))
    spec = parse_spec(SPEC.format(name="digits", file="digits.onnx", batch=1), base_dir=tmp_path)
    model = load_default_model()

    monkeypatch.setattr(fitted, "local_kernel_flags", lambda: kernel_flags(measured_flags))
    same = make_plan(spec, model=model).choice.prediction
    assert same.basis.startswith(f"fitted:{target}") and "another host" not in same.basis

    lacking = [f for f in measured_flags if f != "avx512f"]
    monkeypatch.setattr(fitted, "local_kernel_flags", lambda: kernel_flags(lacking))
    other = make_plan(spec, model=model).choice.prediction
    assert other.basis.startswith(f"fitted:{target}")
    assert other.basis.endswith("(another host: measured with avx512f, which this CPU lacks)")
    assert other.step_seconds == same.step_seconds  # said, not silently changed
