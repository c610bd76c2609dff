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

It also gives Numba a last place to cache in. Numba caches beside the source (``__pycache__``)
or in the user's cache directory (``~/.cache/numba``), and where neither is writable (a
read-only installation, a container image, a job whose ``HOME`` is not mounted) it refuses to
define a ``cache=True`` function at all: ``RuntimeError: cannot cache function ...: no locator
available``, on every import of a kernel module. There the cache goes to a private directory of
this user under the temporary directory (``sparcml-numba-UID``, mode 0700, used only if this
user owns it and nobody else can write it: a cache file is code that gets loaded), else to a
directory of this process removed at exit; with one warning naming ``NUMBA_CACHE_DIR``, which
chooses the place instead.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import stat
import tempfile
import threading
import warnings

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


_fallback_root: str | None = None


def _private_root() -> str:
    """The fallback cache's root: this user's ``sparcml-numba-UID`` under the temporary
    directory when it is a directory this user owns that no one else can write, else a fresh
    directory of this process (removed at exit). Warns once, when first used."""
    global _fallback_root
    with _LOCK:
        if _fallback_root is not None:
            return _fallback_root
        root = os.path.join(tempfile.gettempdir(), f"sparcml-numba-{os.getuid()}")
        try:
            os.mkdir(root, 0o700)
        except FileExistsError:
            pass
        except OSError:
            root = None
        if root is not None:
            st = os.lstat(root)
            if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
                    or st.st_mode & 0o022):
                root = None  # someone else's, or a link: never load code from it
        if root is None:
            root = tempfile.mkdtemp(prefix="sparcml-numba-")
            atexit.register(shutil.rmtree, root, ignore_errors=True)
        _fallback_root = root
    warnings.warn(
        f"Numba can write its kernel cache neither beside the installed sources nor in the "
        f"user's cache directory (read-only installation, or HOME not writable); caching in "
        f"{root} instead. Set NUMBA_CACHE_DIR to a writable directory to choose the place.",
        RuntimeWarning, stacklevel=1)
    return root


def _fallback_locator(caching):
    """A Numba cache locator tried after all of Numba's own (see the module docstring)."""

    class SparcmlPrivateCacheLocator(caching.UserWideCacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(_private_root(),
                                            self.get_suitable_cache_subpath(py_file))

    return SparcmlPrivateCacheLocator


def guard_numba_cache() -> None:
    """Make saving to Numba's on-disk cache safe between processes, and give it a private
    directory where it has no writable place (idempotent; imports Numba; see the module
    docstring). sparcml calls it before defining its kernels; call it before your own
    ``cache=True`` functions are first compiled to guard them too (it is process-wide)."""
    global _installed
    with _LOCK:
        if _installed:
            return
        from numba.core import caching

        caching.CacheImpl._locator_classes.append(_fallback_locator(caching))
        if fcntl is not None:
            save = caching.IndexDataCacheFile.save

            @functools.wraps(save)
            def locked_save(self, key, data):
                with _exclusive(self._index_path + ".lock"):
                    return save(self, key, data)

            locked_save.sparcml_guarded = True
            caching.IndexDataCacheFile.save = locked_save
        _installed = True
