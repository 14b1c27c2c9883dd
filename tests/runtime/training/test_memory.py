"""The trainer keeps freed memory in the process (glibc's trim threshold), so steps reuse warm pages."""

from __future__ import annotations

import platform

from runtime.training.memory import retain_freed_memory


def test_freed_memory_is_kept_where_the_c_library_is_glibc() -> None:
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert retain_freed_memory() is glibc and retain_freed_memory() is glibc  # once per process, then a no-op
