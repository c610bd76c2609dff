"""Atomic file writes: a temporary file beside the target, renamed onto it only on success.

A writer that is killed (SIGKILL, power loss, node failure) leaves at most a temporary file
``.{name}.tmp-{pid}`` beside ``name``; the target itself is always either the old complete
file or the new complete one, never a half-written one. The next writer of the same target
removes the temporary files of writers that are gone (:func:`clean_stale_temps`).

Use::

    from sparcapps.atomicfile import atomic_write

    with atomic_write("model.h5") as tmp:       # tmp: Path(".model.h5.tmp-4242")
        with h5py.File(tmp, "w") as f:
            ...                                 # an exception here removes tmp
    # here model.h5 is the new file (fsync'ed, then renamed over the old one)

Limits: liveness is judged by PID on the calling host. On a file system shared by several
hosts, a temporary file of a live writer on another host with a PID that is dead here would
be removed; write each target from one host (as rank 0 does for checkpoints).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
from pathlib import Path
from typing import Iterator

__all__ = ["temp_path_for", "clean_stale_temps", "atomic_write"]

_SUFFIX = ".tmp-"


def temp_path_for(path: str | os.PathLike) -> Path:
    """The temporary file of ``path`` for this process: ``.{name}.tmp-{pid}`` in the same
    directory (same file system, so the final ``os.replace`` is atomic)."""
    path = Path(path)
    return path.with_name(f".{path.name}{_SUFFIX}{os.getpid()}")


def _pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (a zombie counts as alive)."""
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:      # exists, owned by another user
        return True
    except OverflowError:        # not a PID this system can have
        return False
    return True


def clean_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of ``path`` (see :func:`temp_path_for`) whose writer PID is
    not alive on this host; returns the removed paths.

    Never removes the file of a live PID (this process's included), nor any other file. A
    missing directory is not an error (nothing to clean).
    """
    path = Path(path)
    prefix = f".{path.name}{_SUFFIX}"
    pattern = re.compile(re.escape(prefix) + r"(\d{1,10})")
    removed: list[Path] = []
    if not path.parent.is_dir():
        return removed
    for cand in path.parent.glob(glob.escape(prefix) + "*"):
        m = pattern.fullmatch(cand.name)
        if m is None or _pid_alive(int(m.group(1))):
            continue
        with contextlib.suppress(FileNotFoundError):   # another cleaner got there first
            cand.unlink()
            removed.append(cand)
    return removed


def _fsync_path(path: Path, *, directory: bool = False) -> None:
    """Flush ``path`` (a file, or a directory's entries) to stable storage, where supported."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if directory:            # some platforms cannot open a directory: skip, not fail
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[Path]:
    """Context manager: yields the temporary path to write; on a normal exit the file is
    fsync'ed and ``os.replace``-d onto ``path``; on an exception it is removed and the
    exception propagates (``path`` is untouched).

    Before yielding, stale temporary files of ``path`` (dead writers) are removed. Raises
    ``FileNotFoundError`` if the directory of ``path`` does not exist and ``IsADirectoryError``
    if ``path`` is a directory; the body must create the temporary file.
    """
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        raise FileNotFoundError(f"directory {parent} does not exist (writing {path})")
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, expected a file path")
    clean_stale_temps(path)
    tmp = temp_path_for(path)
    try:
        yield tmp
        if not tmp.is_file():
            raise FileNotFoundError(f"atomic_write: the body did not create {tmp}")
        _fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_path(parent, directory=True)
