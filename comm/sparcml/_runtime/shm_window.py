"""A shared-memory window on the ranks of one node: a slot per rank, grown as needed.

Used where ranks of one node exchange through memory instead of MPI messages (the node phases
of :mod:`sparcml._collectives.hierarchical`, the one-node exchanges of :mod:`sparcml._topk.node_exchange`): MPI's
shared-memory transport copies a large message in chunks through cells both processes must
poll, and with more ranks than cores every chunk waits for the other process to be scheduled;
through a window the writer copies once, the readers read in place after one barrier.

Contract: slot sizes come from quantities every rank of the node agrees on, so every rank grows
the window at the same call (``MPI.Win.Allocate_shared`` is collective) without exchanging
sizes. A slot is written only by its owner and read by the others after :meth:`barrier`; the
caller guarantees that nobody rewrites a slot while another rank still reads it (a collective
step in between).
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings

import numpy as np
from mpi4py import MPI

__all__ = ["SharedWindow", "SharedMemoryWarning"]


class SharedWindow:
    """The window: ``views[r]`` is rank r's slot (uint8), readable by every rank of the node;
    rank 0's slot and the others' may differ in size (``sizes``)."""

    def __init__(self):
        self.win = None
        self.sizes = (0, 0)  # (rank 0's slot, the others')
        self.views: list[np.ndarray] = []
        if threading.current_thread() is threading.main_thread():
            _remember(self)

    def ensure(self, node, first_bytes: int, other_bytes: int) -> bool:
        """Grow to at least ``first_bytes`` for node rank 0's slot and ``other_bytes`` for
        the others' (collective on ``node``, a context, when it grows: every rank passes the
        same sizes). Grows by at least 1.25x, never shrinks; contents are lost on growth.

        Returns False, on every rank of the node alike and with one warning per process,
        when the node's shared memory (``/dev/shm``) has no room for the grown window: a
        container's small ``/dev/shm`` (Docker's default is 64 MB) would otherwise kill the
        ranks with SIGBUS at the first write. The caller then exchanges through messages;
        the window keeps its old size."""
        if first_bytes <= self.sizes[0] and other_bytes <= self.sizes[1]:
            return True
        old = self.sizes
        grow = [(max(need, int(have * 1.25), 1 << 12) + 7) & ~7
                for need, have in zip((first_bytes, other_bytes), old)]
        total = grow[0] + (node.size - 1) * grow[1]
        held = old[0] + (node.size - 1) * old[1]  # freed before the new one is allocated
        free = _shm_free_bytes()
        fits = np.array([free is None or free + held >= total + _SHM_MARGIN * node.size],
                        np.int32)
        agreed = np.empty_like(fits)
        node.waiter.collective(node.comm, "Allreduce", fits, agreed, MPI.MIN)
        if not agreed[0]:
            if node.rank == 0:  # one warning per node, not one per rank
                _warn_once(free, total)
            return False
        self.free()
        mine = grow[0] if node.rank == 0 else grow[1]
        win = MPI.Win.Allocate_shared(mine, 1, comm=node.comm)
        win.Lock_all(MPI.MODE_NOCHECK)
        self.views = []
        for r in range(node.size):
            mem, _ = win.Shared_query(r)
            self.views.append(np.frombuffer(mem, np.uint8, count=grow[0] if r == 0 else grow[1]))
        self.win, self.sizes = win, (grow[0], grow[1])
        return True

    def barrier(self, node) -> None:
        """Make every slot's writes visible to the node's ranks (collective on the node)."""
        self.win.Sync()
        node.waiter.collective(node.comm, "Barrier")
        self.win.Sync()

    def free(self) -> None:
        if self.win is not None:
            self.views = []
            self.win.Unlock_all()
            self.win.Free()
            self.win, self.sizes = None, (0, 0)


# where MPICH and Open MPI back MPI.Win.Allocate_shared on Linux; per rank, room for the
# library's own page rounding and bookkeeping beside the slots
_SHM_DIR = "/dev/shm"
_SHM_MARGIN = 1 << 20
_warned = False


def _shm_free_bytes() -> int | None:
    """Bytes free in the node's shared-memory file system, None where there is none to ask."""
    try:
        st = os.statvfs(_SHM_DIR)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _warn_once(free: int | None, total: int) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    warnings.warn(
        f"sparcml: {_SHM_DIR} has {free / 2**20:.0f} MiB free but the node's shared-memory "
        f"window needs {total / 2**20:.0f} MiB; exchanging through MPI messages instead "
        f"(same results, slower with more ranks than cores). Give the container a larger "
        f"{_SHM_DIR} (docker run --shm-size=1g) or pass Options(node_shm=False) "
        f"(SPARCML_NODE_SHM=0) to skip the window", SharedMemoryWarning, stacklevel=3)


class SharedMemoryWarning(RuntimeWarning):
    """The node's shared memory is too small for a window: sparcml used messages instead."""


_MAIN_THREAD_WINDOWS: list[SharedWindow] = []


def _remember(window: SharedWindow) -> None:
    """Windows must be freed before MPI_Finalize (MPICH's ofi netmod fails to close its fabric
    otherwise), and COMM_WORLD's attributes, where the contexts live, are never deleted. So
    the main thread's windows are freed at exit, in the order they were made, which is the
    same on every rank (Win_free is collective); a non-blocking engine's thread frees its own
    when it closes (also at exit, before finalize)."""
    if not _MAIN_THREAD_WINDOWS:
        atexit.register(_free_main_thread_windows)
    _MAIN_THREAD_WINDOWS.append(window)


def _free_main_thread_windows() -> None:
    if MPI.Is_finalized():
        return
    for window in _MAIN_THREAD_WINDOWS:
        window.free()
