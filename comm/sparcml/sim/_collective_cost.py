"""Modeled times of the MPI collectives the simulator runs as one step (pure arithmetic).

The simulator does not send a collective's internal messages one by one: it combines the
ranks' buffers directly (exact data) and charges every rank the time of the algorithm MPICH
would pick, from the moment the last rank entered (a collective synchronizes in this model).
The formulas of the vector collectives (``Alltoall``, ``Alltoallv``, ``Allgather(v)``,
``Gather``, ``Gatherv``) are :mod:`sparcml._model.mpi_collectives`', shared with the cost
model: a round costs the link's ``alpha`` plus MPI's own per-message cost
(:data:`~sparcml._model.mpi_collectives.LIBRARY_MESSAGE_SECONDS`), not sparcml's Python.
Besides:

- ``Barrier``: ``ceil(log2 P) alpha`` (dissemination);
- ``Allreduce`` of n bytes: recursive doubling ``ceil(log2 P) (alpha + n beta)`` up to 2 KiB,
  else Rabenseifner ``2 ceil(log2 P) alpha + 2 (P-1)/P n beta`` plus the local reductions
  ``(P-1)/P n gamma``;
- ``Bcast`` of n bytes: the cheaper of a binomial tree ``ceil(log2 P) (alpha + n beta)`` and
  scatter + allgather ``(log2 P + P - 1) alpha + 2 (P-1)/P n beta``.

``alpha`` and ``beta`` are the inter-node link's when the communicator spans nodes (the slow
link bounds the collective), else the intra-node link's.
"""

from __future__ import annotations

import math

from .._model.mpi_collectives import (SIZE_BYTES, alltoall_time, alltoallv_time,
                                      allgatherv_time, gather_time, gatherv_time)

__all__ = ["barrier_time", "allreduce_time", "allgather_time", "bcast_time", "alltoall_time",
           "alltoallv_time", "gather_time", "gatherv_time", "SIZE_BYTES"]

_SMALL_ALLREDUCE = 2048


def _log2(P: int) -> int:
    return max(0, math.ceil(math.log2(P))) if P > 1 else 0


def barrier_time(P: int, alpha: float) -> float:
    return _log2(P) * alpha


def allreduce_time(P: int, nbytes: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    if P <= 1:
        return 0.0
    if nbytes <= _SMALL_ALLREDUCE:
        return _log2(P) * (alpha + nbytes * beta)
    return 2 * _log2(P) * alpha + 2 * (P - 1) / P * nbytes * beta + (P - 1) / P * nbytes * gamma


def allgather_time(P: int, total: int, own: int, alpha: float, beta: float) -> float:
    """``Allgather(v)`` of ``total`` bytes, ``own`` of them this rank's
    (:func:`sparcml._model.mpi_collectives.allgatherv_time`)."""
    return allgatherv_time(P, total, own, alpha, beta)


def bcast_time(P: int, nbytes: int, alpha: float, beta: float) -> float:
    if P <= 1:
        return 0.0
    tree = _log2(P) * (alpha + nbytes * beta)
    scatter_allgather = (math.log2(P) + P - 1) * alpha + 2 * (P - 1) / P * nbytes * beta
    return min(tree, scatter_allgather)
