"""Wheels for another CPU: dependencies follow the target's environment markers, not this host's.

pip reads the wheels from a local directory here (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``), so no index is asked.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from builders.wheelhouse import WheelhouseError, download_for_target, target_environment


def _wheel(directory: Path, name: str, version: str, *requires: str, tag: str = "py3-none-any") -> None:
    """A minimal wheel whose METADATA lists ``requires`` (nothing to import: pip only downloads it)."""
    info = f"{name}-{version}.dist-info"
    metadata = "".join(
        [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", *(f"Requires-Dist: {r}\n" for r in requires)]
    )
    with zipfile.ZipFile(directory / f"{name}-{version}-{tag}.whl", "w") as archive:
        archive.writestr(f"{name}/__init__.py", "")
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n")
        archive.writestr(f"{info}/RECORD", "")


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A find-links directory shaped like PyPI's torch: x86-only CUDA requirements, an extra, a shared dependency."""
    links = tmp_path / "links"
    links.mkdir()
    _wheel(links, "fakeframework", "2.0", "fakecuda==1.0; platform_machine == 'x86_64'",
           "fakesympy>=1.0", "fakefsspec[http]", "fakeold; python_version < '3.10'")  # fmt: skip
    _wheel(links, "fakesympy", "1.1", "fakempmath")
    _wheel(links, "fakempmath", "1.3")
    _wheel(links, "fakefsspec", "0.8", "fakeaiohttp; extra == 'http'", "fakempmath")
    _wheel(links, "fakeaiohttp", "3.0")
    # on this host pip itself would want fakecuda, which has no aarch64 wheel (as nvidia-cudnn-cu12 has none)
    _wheel(links, "fakecuda", "1.0", tag="py3-none-manylinux_2_28_x86_64")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return links


def test_dependencies_follow_the_targets_markers_and_extras(local_index: Path, tmp_path: Path) -> None:
    house = download_for_target(["fakeframework==2.0"], tmp_path / "house", python_version="3.11", arch="aarch64")
    assert house.wheels == (
        "fakeaiohttp-3.0-py3-none-any.whl", "fakeframework-2.0-py3-none-any.whl", "fakefsspec-0.8-py3-none-any.whl",
        "fakempmath-1.3-py3-none-any.whl", "fakesympy-1.1-py3-none-any.whl",
    )  # fmt: skip
    assert sorted(p.name for p in house.path.glob("*.whl")) == list(house.wheels)


def test_a_conflicting_pin_or_a_missing_wheel_is_one_line(local_index: Path, tmp_path: Path) -> None:
    _wheel(local_index, "fakepinned", "1.0", "fakempmath==9.9")
    with pytest.raises(WheelhouseError) as info:
        download_for_target(["fakempmath", "fakepinned"], tmp_path / "a", arch="aarch64")
    assert info.value.lines == ("wheelhouse: fakempmath==9.9 conflicts with fakempmath==1.3 already chosen",)
    with pytest.raises(WheelhouseError, match=r"requirement fakemissing==1\.0") as info:
        download_for_target(["fakemissing==1.0"], tmp_path / "b", arch="aarch64")
    assert len(info.value.lines) == 1 and "\n" not in info.value.lines[0]


def test_target_environment_is_the_images_not_the_hosts() -> None:
    env = target_environment("arm64", "3.12")
    assert (env["platform_machine"], env["python_version"], env["sys_platform"]) == ("aarch64", "3.12", "linux")
    with pytest.raises(WheelhouseError, match="arch 'sparc'"):
        target_environment("sparc")
