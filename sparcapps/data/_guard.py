"""sparcml's Numba cache guard for the data kernels, in the processes that use sparcml."""

from __future__ import annotations

import sys

__all__ = ["guard_numba_cache_with_sparcml"]


def guard_numba_cache_with_sparcml() -> None:
    """:func:`sparcml.guard_numba_cache` (cache saves locked between processes, and a private
    cache directory where Numba has no writable one) when this process has imported sparcml:
    the applications, which import it first, run the data kernels under it. The data tools
    alone (``sparc-data``) do not import sparcml, which needs an MPI library."""
    sparcml = sys.modules.get("sparcml")
    if sparcml is not None:
        sparcml.guard_numba_cache()
