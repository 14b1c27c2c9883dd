"""Which shipped host stands for this one: itself, else one of its CPU name, else the most measured; and a graph
compiler that this host's rows never measured is carried from a host that measured it, never priced as its
framework here."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import perfmodels.fitted as fitted
from perfmodels.calibration import Calibration
from perfmodels.features import Device, Route
from perfmodels.fit import FitResult, GroupFit, RouteKey
from perfmodels.fitted import FittedModel
from perfmodels.targets import cpu_name, nearest_host

X86 = ("avx2", "fma", "avx512f")


def test_a_host_stands_for_itself_else_for_one_of_its_cpu_name_else_the_most_measured_does() -> None:
    measured = ["xeon-2c"] * 3 + ["amd-epyc-2c"]
    assert nearest_host("amd-epyc-2c", measured) == "amd-epyc-2c"
    assert nearest_host("amd-epyc-4c", measured) == "amd-epyc-2c"
    assert nearest_host("graviton-2c", measured) == "xeon-2c"
    assert nearest_host("graviton-2c", []) is None


def test_a_cpu_name_is_the_key_without_its_core_count() -> None:
    assert cpu_name("intel-r-xeon-r-processor-2c") == "intel-r-xeon-r-processor"
    assert cpu_name("amd-epyc-16c") == "amd-epyc"
    assert cpu_name("odd") == "odd" and cpu_name("odd-key") == "odd-key"


def _group(target: str, compiler: str) -> GroupFit:
    return GroupFit(
        target, RouteKey("onnxruntime", compiler, "NCHW", "fp32"), 2, (1.0,), 300e9, 24e9, 40, 30e9, ("m",),
        ("cnn", "mlp", "transformer"), 0.1, cpu_flags=X86,
    )


class _Model(FittedModel):
    """Calibrated against the hosts in ``calibrated`` only."""

    def __init__(self, result: FitResult, calibrated: tuple[str, ...]) -> None:
        super().__init__(result, store=None if not calibrated else fitted.Path("store.csv"))
        self.calibrated = calibrated

    def calibration(self, source: str | None = None) -> Calibration | None:
        source = source or (self.calibrated[0] if self.calibrated else None)
        if source not in self.calibrated:
            return None
        return Calibration("amd-epyc-2c", str(source), 1, {}, {}, ())


def _route(compiler: str) -> Route:
    return Route("onnxruntime", compiler, (), "fp32", "NCHW", 0.5)


LOCAL = Device("local", "cpu", {"fp32": 200e9}, 30e9, arch="x86_64")
INFERENCE = SimpleNamespace(mode="inference")
GROUPS = FitResult((_group("amd-epyc-2c", "none"), _group("xeon-2c", "none"), _group("xeon-2c", "tvm")))


@pytest.fixture(autouse=True)
def _on_amd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fitted, "local_target_key", lambda: "amd-epyc-2c")
    monkeypatch.setattr(fitted, "usable_cores", lambda: 2)


def test_a_measured_host_plans_its_own_routes_on_its_own_rows() -> None:
    model = _Model(GROUPS, ("amd-epyc-2c", "xeon-2c"))
    group = model.anchor(INFERENCE, _route("none"), LOCAL)  # type: ignore[arg-type]
    assert group is not None and group.target == "amd-epyc-2c" and group.route.compiler == "none"


def test_a_compiler_only_another_host_measured_is_carried_from_it_through_the_calibration_against_it() -> None:
    model = _Model(GROUPS, ("amd-epyc-2c", "xeon-2c"))
    group = model.anchor(INFERENCE, _route("tvm"), LOCAL)  # type: ignore[arg-type]
    assert group is not None and group.target == "xeon-2c" and group.route.compiler == "tvm"


def test_without_a_calibration_against_that_host_the_compiler_is_left_to_the_descriptors() -> None:
    """Not priced as this host's framework with the compiler's speed-up unapplied: the descriptors carry the
    measured compiler instead (``_descriptor_carried``, which takes a host that measured the compiler first)."""
    for calibrated in ((), ("amd-epyc-2c",)):
        model = _Model(GROUPS, calibrated)
        assert model.anchor(INFERENCE, _route("tvm"), LOCAL) is None  # type: ignore[arg-type]


def test_a_compiler_nobody_measured_stands_on_this_hosts_framework() -> None:
    model = _Model(GROUPS, ("amd-epyc-2c", "xeon-2c"))
    group = model.anchor(INFERENCE, _route("iree"), LOCAL)  # type: ignore[arg-type]
    assert group is not None and group.target == "amd-epyc-2c" and group.route.compiler == "none"


class _TrainingModel(_Model):
    """Inference swept on both hosts, training measured on the Xeon only."""

    def units(self) -> SimpleNamespace:  # type: ignore[override]
        keys = [("amd-epyc-2c", "onnxruntime", "none", "NCHW", "fp32", 2)] * 3
        return SimpleNamespace(keys=lambda: [*keys, ("xeon-2c", "onnxruntime", "none", "NCHW", "fp32", 2)])

    def training(self) -> SimpleNamespace:  # type: ignore[override]
        return SimpleNamespace(targets=lambda: {"xeon-2c"})

    def _from_store(self, store: object, name: str, compute: object) -> tuple[float, float, int]:
        return (100.0, 20.0, 2)  # the store's probes


def test_training_steps_are_carried_through_the_calibration_against_the_host_that_measured_training() -> None:
    """This host's inference plans stand on its own rows, but its training steps on the Xeon's: the calibration
    that carries them must compare this host with the Xeon, not with itself."""
    model = _TrainingModel(GROUPS, ("amd-epyc-2c", "xeon-2c"))
    assert model._calibration_source(model.units()) == "amd-epyc-2c"  # type: ignore[arg-type]
    host = model._training_calibration()
    assert host is not None and host.calibration.source == "xeon-2c"
