"""ARM routes: the Arm Compute Library route installs Debian's packages, and the report says that no ARM route was
measured on this machine (every ARM prediction here is a prior)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from optimiser.catalog import load_catalog

SPEC = """\
name: a64fx-armcl
application:
  type: inference
  model: {architecture: resnet18}
  batch_size: 64
target:
  platform: hpc
  cpu: {arch: aarch64, model: a64fx, cores: 48}
  scheduler: pbs
container:
  formats: [docker, singularity]
optimisation:
  allow: {libraries: [LIBS]}
"""
ARM_PACKAGES = "libarm-compute20 libarmnn22 libarmnntfliteparser22"


def _plan(tmp_path: Path, libraries: str) -> Path:
    (tmp_path / "app.yaml").write_text(SPEC.replace("LIBS", libraries))
    result = CliRunner().invoke(app, ["plan", str(tmp_path / "app.yaml"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    return tmp_path / "out"


def test_the_arm_compute_library_route_installs_debians_packages(tmp_path: Path) -> None:
    out = _plan(tmp_path, "armcl")
    assert f"apt-get install -y --no-install-recommends {ARM_PACKAGES}" in (out / "Dockerfile").read_text()
    assert f"apt-get install -y --no-install-recommends {ARM_PACKAGES}" in (out / "Singularity.def").read_text()


def test_armpl_has_no_debian_package_so_it_installs_nothing() -> None:
    libraries = load_catalog().libraries
    assert libraries["armpl"].install.for_key("cpu-aarch64").apt == []
    assert libraries["armcl"].install.for_key("cpu-aarch64").apt == ARM_PACKAGES.split()


def test_the_report_says_no_arm_route_was_measured_here(tmp_path: Path) -> None:
    report = (_plan(tmp_path, "armcl") / "plan.md").read_text()
    assert "ARM routes measured on this machine: none;" in report
    assert "ranked on priors" in report
