"""Where a measurement was made: host, CPU, cores, accelerator, BLAS, library versions and the appopt revision.

Collected once per process (it shells out to git and reads /proc) and stamped on every row the harness writes.
"""

from __future__ import annotations

import functools
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from perfmodels.targets import cpu_model_and_flags, target_key, usable_cores

#: ISA flags that matter to DL kernels (the rest of /proc/cpuinfo's flags are noise for our purposes).
_INTERESTING_FLAGS = re.compile(r"^(fma|avx|avx2|avx512\w*|avx_vnni|amx\w*|sve\w*|asimd\w*|neon|f16c|sse4_2)$")


@dataclass(frozen=True)
class Provenance:
    host: str
    cpu_model: str
    cpu_flags: str
    cores: int
    accelerator: str
    blas: str
    appopt_revision: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def target(self) -> str:
        """The key performance models are fitted per: the CPU model and core count (see ``target_key``)."""
        return target_key(self.cpu_model, self.cores)


def blas_in_use() -> str:
    """BLAS libraries NumPy (and anything else loaded) uses, via threadpoolctl: ``openblas 0.3.31 SkylakeX``."""
    try:
        import numpy  # noqa: F401  (load NumPy's BLAS so threadpoolctl can see it)
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    seen = []
    for info in threadpool_info():
        if info.get("user_api") != "blas":
            continue
        text = " ".join(str(info.get(k) or "") for k in ("internal_api", "version", "architecture")).strip()
        if text not in seen:
            seen.append(text)
    return "; ".join(seen) or "none found"


def accelerator() -> str:
    """``none`` unless an NVIDIA GPU answers nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return "none"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return ", ".join(names) if out.returncode == 0 and names else "none"


def appopt_revision() -> str:
    """The git commit of this checkout (``+dirty`` with local changes), else the installed package version."""
    repo = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
        )
        if rev.returncode == 0:
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=repo,
                capture_output=True,
                text=True,
                timeout=10,
            )
            return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        import importlib.metadata

        return "appopt-" + importlib.metadata.version("appopt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=1)
def collect() -> Provenance:
    model, flags = cpu_model_and_flags()
    return Provenance(
        host=platform.node() or "unknown",
        cpu_model=model,
        cpu_flags=" ".join(f for f in flags if _INTERESTING_FLAGS.match(f)),
        cores=usable_cores(),
        accelerator=accelerator(),
        blas=blas_in_use(),
        appopt_revision=appopt_revision(),
    )
