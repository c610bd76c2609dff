"""Which threads are simulated ranks, and the compute their clocks are credited or spared.

Package-internal. Under ``compute="model"`` (the default) a rank's compute is the modeled cost
of the kernels it ran (:func:`charge_work`, :mod:`sparcml.sim._model_ops`) plus a calibrated
cost per communicator call; :func:`charge` and :func:`discount` then do nothing. Under
``compute="measured"``, a rank's compute is the thread CPU time it spends between two calls into its
communicator (:meth:`sparcml.sim._world.World.enter`), corrected by a per-thread *credit*:
plus the CPU time of a computation another rank made for it (a memo hit of
:mod:`sparcml.sim._sharing`), minus the simulator's own work done in the rank's thread (its
bookkeeping, a copy that stands for a transfer, a garbage collection of the heap all ranks
share). Nothing here imports another module of the simulator, so the communicator, the world
and the sharing operations all build on it without a cycle.
"""

from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager, nullcontext

__all__ = ["rank_scope", "sharing", "credit_of", "charge", "discount", "gc_pauses_discounted",
           "modeled", "charge_work", "helper_scope"]

_local = threading.local()


def sharing() -> bool:
    """Whether this thread is a simulated rank of a run that shares memory."""
    return getattr(_local, "share", False)


def credit_of() -> float:
    """Compute seconds this rank thread was spared by memo hits since the last call; reset."""
    c = getattr(_local, "credit", 0.0)
    _local.credit = 0.0
    return c


def modeled() -> bool:
    """Whether this thread is a simulated rank whose compute is modeled (``compute="model"``:
    kernel rates times work, :mod:`sparcml.sim._rates`), not measured."""
    return getattr(_local, "model", False)


def charge_work(seconds: float) -> None:
    """Add the modeled ``seconds`` of a kernel to this thread's rank compute."""
    _local.credit = getattr(_local, "credit", 0.0) + seconds


def charge(seconds: float) -> None:
    """Add ``seconds`` to this thread's rank compute (a computation made for it elsewhere);
    nothing under modeled compute (the kernel's modeled cost is charged instead)."""
    if getattr(_local, "model", False):
        return
    _local.credit = getattr(_local, "credit", 0.0) + seconds


def discount(seconds: float) -> None:
    """Take ``seconds`` of this thread's CPU time off its rank's compute (simulator work);
    nothing under modeled compute (thread time is not charged at all)."""
    if getattr(_local, "model", False):
        return
    _local.credit = getattr(_local, "credit", 0.0) - seconds


@contextmanager
def rank_scope(share: bool, model: bool = False):
    """Mark the current thread as a simulated rank (sharing on or off, compute modeled or
    measured)."""
    _local.share = bool(share)
    _local.model = bool(model)
    _local.credit = 0.0
    _local.rank = True
    try:
        yield
    finally:
        _local.share = False
        _local.rank = False
        _local.model = False


def helper_scope():
    """For a thread that a simulated rank starts to work for it (its non-blocking engine):
    a context manager, entered in that thread, under which its compute is accounted as the
    rank's is (modeled or measured; without sharing: the memoized operations are the rank
    threads'). Outside a rank: does nothing. Without it the helper's kernels went uncharged
    and, under modeled compute, its receives' measured copy time was taken off the rank's
    clock, which made modeled times depend on the machine's timing."""
    if not getattr(_local, "rank", False):
        return nullcontext()
    return rank_scope(False, model=getattr(_local, "model", False))


def _gc_phase(phase: str, info: dict) -> None:
    # Python's cyclic collector runs in whichever thread allocates past its threshold, and
    # scans the one heap that all P simulated ranks share: a pause that grows with P (100 ms
    # and more at P = 128) and lands on a random rank. A real rank's heap is its own and small,
    # so the pause is simulator work: taken off the rank's compute.
    if not getattr(_local, "rank", False):
        return
    if phase == "start":
        _local.gc_start = time.thread_time()
    elif getattr(_local, "gc_start", None) is not None:
        discount(time.thread_time() - _local.gc_start)
        _local.gc_start = None


@contextmanager
def gc_pauses_discounted():
    """While active, garbage collections in rank threads are not charged as compute."""
    gc.callbacks.append(_gc_phase)
    try:
        yield
    finally:
        gc.callbacks.remove(_gc_phase)
