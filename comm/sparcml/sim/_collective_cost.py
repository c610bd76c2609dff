"""Modeled times of the MPI collectives the simulator runs as one step (pure arithmetic).

The simulator does not send a collective's internal messages one by one: it combines the
ranks' buffers directly (exact data) and charges every rank the time of the algorithm MPICH
would pick, from the moment the last rank entered (a collective synchronizes in this model):

- ``Barrier``: ``ceil(log2 P) alpha`` (dissemination);
- ``Allreduce`` of n bytes: recursive doubling ``ceil(log2 P) (alpha + n beta)`` up to 2 KiB,
  else Rabenseifner ``2 ceil(log2 P) alpha + 2 (P-1)/P n beta`` plus the local reductions
  ``(P-1)/P n gamma``;
- ``Allgather(v)`` of T bytes in all, n_r of them rank r's: ``ceil(log2 P) alpha + (T - n_r)
  beta`` (recursive doubling or ring: every rank receives what it does not hold);
- ``Bcast`` of n bytes: the cheaper of a binomial tree ``ceil(log2 P) (alpha + n beta)`` and
  scatter + allgather ``(log2 P + P - 1) alpha + 2 (P-1)/P n beta``.

``alpha`` and ``beta`` are the inter-node link's when the communicator spans nodes (the slow
link bounds the collective), else the intra-node link's.
"""

from __future__ import annotations

import math

__all__ = ["barrier_time", "allreduce_time", "allgather_time", "bcast_time"]

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
    if P <= 1:
        return 0.0
    return _log2(P) * alpha + (total - own) * beta


def bcast_time(P: int, nbytes: int, alpha: float, beta: float) -> float:
    if P <= 1:
        return 0.0
    tree = _log2(P) * (alpha + nbytes * beta)
    scatter_allgather = (math.log2(P) + P - 1) * alpha + 2 * (P - 1) / P * nbytes * beta
    return min(tree, scatter_allgather)
