"""The one reduction of the agreement layout: a persistent ``MPI_Allreduce`` per communicator.

Every sparcml call's agreement (:func:`sparcml._runtime.agreement.agree`, ``agree_kept``) and
every persistent plan's identity check (:class:`sparcml._collectives.plan_identity.
PlanIdentity`) reduce one fixed-size int64 array with MAX, led by a signature of the call:
ranks in different calls at the same point meet in that one reduction and raise the same
error. :func:`reduce_max` is that reduction for all of them. On an MPI-4 library it is one
persistent request per communicator (``comm.Allreduce_init`` on two kept buffers, made at the
communicator's first agreement: every rank's first agreement on a communicator is the same
point of its collective order), started and completed per call: a few microseconds less than
a blocking ``Allreduce`` of the same 288 bytes (MPICH, BENCHMARKS "Latency with persistent
plans"). MPI does not match a persistent collective with a blocking or non-blocking one, so
every site goes through here: one path per communicator, never a mix.

- Completion: a blocking ``Wait`` when the waiter spins, the waiter's yielding wait when it
  yields (the same request either way, so ranks that wait differently still match).
- Fallback: where ``Allreduce_init`` is missing (mpi4py built against MPI-3: it raises
  ``NotImplementedError``) or refused (``MPI.Exception``, e.g. ``MPI_ERR_UNSUPPORTED_OPERATION``),
  the communicator keeps the blocking ``Allreduce`` / non-blocking ``Iallreduce`` for good. The
  choice is made once per communicator, at its first agreement, and the ranks agree on it in a
  one-integer ``Allreduce`` (MIN) right after trying, so that it never depends on one rank's
  outcome. A simulated communicator (:mod:`sparcml.sim`) always takes the fallback.
- Lifetime: the request is kept as an attribute of its communicator. MPICH holds a
  communicator while a request on it exists and runs its attributes' delete callbacks only
  when the last hold goes, so a callback cannot free the request: whoever frees a communicator
  that agreements ran on calls :func:`release` first (sparcml's duplicate, when the user's
  communicator is freed: :mod:`sparcml._runtime.context`; a communication thread's context,
  when its thread ends). The requests still alive at exit are freed by an ``atexit`` hook
  registered when this module is imported, after ``mpi4py.MPI`` (atexit runs last-in
  first-out, and mpi4py's ``MPI_Finalize`` comes after every Python exit hook): MPICH warns at
  ``MPI_Finalize`` about each persistent request still allocated on a communicator it frees.
  Agreements run on sparcml's own communicators only (a context's duplicate), never on a
  user's: a user's ``comm.Free()`` needs nothing from here.
"""

from __future__ import annotations

import atexit
import threading

import numpy as np
from mpi4py import MPI

__all__ = ["reduce_max", "release"]

# tests switch this off to run the fallback on real MPI (read at a communicator's first
# agreement only: set it before that)
_use_persistent = True


class _Reduction:
    """One communicator's agreement reduction: its persistent request (None: the fallback)
    and the kept send and receive buffers."""

    __slots__ = ("request", "send", "received")

    def __init__(self, request, send: np.ndarray, received: np.ndarray):
        self.request = request
        self.send = send
        self.received = received

    def free(self) -> None:
        request, self.request = self.request, None
        _live.pop(id(self), None)
        if request is not None and not MPI.Is_finalized():
            try:
                request.Free()
            except MPI.Exception:  # pragma: no cover - freeing during finalize
                pass


_keyval = None
_keyval_lock = threading.Lock()
_live: dict[int, _Reduction] = {}  # the reductions with a request still allocated
_last = (None, None)  # (a communicator, its reduction): the latest lookup's


def _delete(comm, keyval, reduction):  # MPI: the communicator's last hold went
    reduction.free()


def release(comm) -> None:
    """Free ``comm``'s persistent request, if it has one (before ``comm.Free()``: see the
    module docstring). Local; ``comm`` must see no agreement afterwards."""
    global _last
    if _last[0] is comm:
        _last = (None, None)
    if _keyval is None or not isinstance(comm, MPI.Comm) or comm == MPI.COMM_NULL \
            or MPI.Is_finalized():
        return
    reduction = comm.Get_attr(_keyval)
    if reduction is not None:
        reduction.free()


def _free_all() -> None:
    for reduction in list(_live.values()):
        reduction.free()


atexit.register(_free_all)  # after mpi4py.MPI's import above: runs before MPI_Finalize


def _create(comm, template: np.ndarray) -> _Reduction:
    """The reduction of ``comm`` (collective: every rank's first agreement on ``comm``)."""
    send, received = np.zeros_like(template), np.zeros_like(template)
    request = None
    if _use_persistent:
        try:
            request = comm.Allreduce_init(send, received, MPI.MAX)
        except (NotImplementedError, AttributeError, MPI.Exception):
            request = None
    # every rank takes the persistent path or none does (one library, but never a per-rank
    # outcome): decided here, before any agreement starts
    everyone = np.array([0 if request is None else 1], np.int64)
    comm.Allreduce(MPI.IN_PLACE, everyone, op=MPI.MIN)
    if request is not None and not everyone[0]:
        request.Free()
        request = None
    reduction = _Reduction(request, send, received)
    if request is not None:
        _live[id(reduction)] = reduction
    return reduction


def _reduction(comm, template: np.ndarray) -> _Reduction | None:
    """``comm``'s reduction, made at its first agreement (buffers shaped as ``template``: every
    agreement array has the same layout); None for a simulated communicator."""
    global _keyval, _last
    last = _last
    if last[0] is comm:
        return last[1]
    if not isinstance(comm, MPI.Comm):
        return None
    if _keyval is None:
        with _keyval_lock:
            if _keyval is None:
                _keyval = MPI.Comm.Create_keyval(delete_fn=_delete)
    reduction = comm.Get_attr(_keyval)
    if reduction is None:
        reduction = _create(comm, template)
        comm.Set_attr(_keyval, reduction)
    _last = (comm, reduction)
    return reduction


def reduce_max(comm, send: np.ndarray, waiter, out: np.ndarray | None = None) -> np.ndarray:
    """The MAX over the ranks of ``comm`` of ``send`` (an agreement-layout int64 array):
    written into ``out`` (may be ``send`` itself) and returned, or, with ``out`` None, a buffer
    kept per communicator (read it before the next agreement on ``comm``). Collective; waited
    for as ``waiter`` waits now (None: blocking)."""
    reduction = _reduction(comm, send)
    if reduction is None or reduction.request is None:
        if out is None:
            out = reduction.received if reduction is not None else np.empty_like(send)
        args = (MPI.IN_PLACE, out) if out is send else (send, out)
        if waiter is None:
            comm.Allreduce(*args, MPI.MAX)
        else:
            waiter.collective(comm, "Allreduce", *args, MPI.MAX)
        return out
    reduction.send[:] = send
    request = reduction.request
    request.Start()
    if waiter is None:
        request.Wait()
    else:
        waiter.wait(request)  # Wait when it spins, its test loop when it yields
    if out is None:
        return reduction.received
    out[:] = reduction.received
    return out
