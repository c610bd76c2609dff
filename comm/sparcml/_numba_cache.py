"""Numba's on-disk kernel cache made safe for processes that compile at the same time.

Numba caches each ``cache=True`` function in an index file (signature -> data file name) and
numbered data files beside it. Saving a new signature reads the index, picks the first free
number, writes the index, then the data, with no lock (numba/numba#10128): two processes that
compile two signatures of one kernel at once (the ranks of a job or two jobs sharing an
installation, one in float32 and one in float64, say) both pick number 1, and the index can end
up naming the other signature's machine code. Every later run then fails in that kernel with
``TypeError: can't unbox array`` (or worse) until the cache files are deleted.

:func:`guard_numba_cache` holds an exclusive ``flock`` on ``INDEX.lock`` (beside the index) for
the whole of each save, so the read-pick-write sequences of two processes never interleave.
Loading needs no lock: the index and data files are each replaced atomically (a temporary file
renamed), and an index entry whose data file is not written yet is a cache miss (a compile).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: Numba's own behaviour
    fcntl = None

__all__ = ["guard_numba_cache"]

_LOCK = threading.Lock()
_installed = False


@contextlib.contextmanager
def _exclusive(path: str):
    """An exclusive advisory lock on ``path`` for the block (nothing when it cannot be
    opened: the save then fails or succeeds as Numba's own would)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (closing releases the lock)


def guard_numba_cache() -> None:
    """Make saving to Numba's on-disk cache safe between processes (idempotent; imports
    Numba). sparcml calls it before defining its kernels; call it before your own
    ``cache=True`` functions are first compiled to guard them too (it is process-wide)."""
    global _installed
    with _LOCK:
        if _installed or fcntl is None:
            return
        from numba.core import caching

        save = caching.IndexDataCacheFile.save

        @functools.wraps(save)
        def locked_save(self, key, data):
            with _exclusive(self._index_path + ".lock"):
                return save(self, key, data)

        locked_save.sparcml_guarded = True
        caching.IndexDataCacheFile.save = locked_save
        _installed = True
