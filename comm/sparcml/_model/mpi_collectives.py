"""Modeled times of MPI's collectives as MPICH implements them (pure arithmetic, no MPI).

One module for the simulator (:mod:`sparcml.sim._collective_cost`, which charges each MPI
collective as one event) and the cost model (:mod:`sparcml._model.costmodel`, the phases that
run as vector collectives from ``Options.native_min_ranks`` ranks). Parameters: ``alpha``
(seconds of link latency per message), ``beta`` (seconds per byte), ``o`` (the MPI library's
own software cost per message it posts inside the collective: a few hundred nanoseconds of C,
not the ~50-100 us of Python a message posted by sparcml costs, BENCHMARKS "Scaling
studies"). The algorithm choices follow MPICH 4's defaults (``MPIR_CVAR_*`` names below):

- ``Alltoall`` of ``n`` bytes per peer: Bruck (``ceil(log2 P)`` rounds of about ``P n / 2``
  bytes) when ``n <= 256`` (``ALLTOALL_SHORT_MSG_SIZE``) and ``P >= 8``, else the scattered
  algorithm (all sends and receives posted, at most 32 at a time,
  ``ALLTOALL_THROTTLE``): ``ceil((P-1)/32) alpha + (P-1) o + (P-1) n beta``;
- ``Alltoallv``: scattered, as above with the rank's larger of bytes sent and received
  (pairwise exchange, ``P - 1`` rounds of one ``Sendrecv``, only in place, which sparcml does
  not use);
- ``Allgather(v)`` of ``T`` bytes in all, ``own`` of them this rank's: recursive doubling
  (``ceil(log2 P)`` rounds) when ``T < 512 KiB`` (``ALLGATHER_LONG_MSG_SIZE``) and P is a power
  of two, Bruck (``ceil(log2 P)`` rounds) when ``T < 80 KiB`` (``ALLGATHER_SHORT_MSG_SIZE``),
  else the ring (``P - 1`` rounds); every rank receives the ``T - own`` bytes it lacks;
- ``Gather`` of ``n`` bytes per rank: binomial tree, ``ceil(log2 P) (alpha + o)`` plus the
  root's ``(P-1) n`` bytes;
- ``Gatherv``: linear (the root posts a receive from every rank):
  ``alpha + (P-1) o + (bytes the root receives) beta``.

Each round of a collective costs ``alpha + o`` plus its bytes; the bytes are charged at the
link's rate once (a rank's link carries what it sends and receives, full duplex).
"""

from __future__ import annotations

import math

__all__ = ["LIBRARY_MESSAGE_SECONDS", "ALLTOALL_SHORT", "ALLTOALL_THROTTLE",
           "ALLGATHER_SHORT", "ALLGATHER_LONG", "rounds_log2", "alltoall_time",
           "alltoallv_time", "allgatherv_time", "allgatherv_algorithm", "gather_time",
           "gatherv_time", "SIZE_BYTES"]

LIBRARY_MESSAGE_SECONDS = 0.5e-6  # MPI's software per message posted inside a collective
ALLTOALL_SHORT = 256        # MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE
ALLTOALL_THROTTLE = 32      # MPIR_CVAR_ALLTOALL_THROTTLE
ALLGATHER_SHORT = 81920     # MPIR_CVAR_ALLGATHER_SHORT_MSG_SIZE
ALLGATHER_LONG = 524288     # MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE
SIZE_BYTES = 4  # what the size exchange of a sparse Alltoallv sends per peer (one int32)


def rounds_log2(P: int) -> int:
    """``ceil(log2 P)`` (0 for P <= 1)."""
    return math.ceil(math.log2(P)) if P > 1 else 0


def alltoall_time(P: int, nbytes: float, alpha: float, beta: float,
                  o: float = LIBRARY_MESSAGE_SECONDS) -> float:
    """``Alltoall`` of ``nbytes`` per peer."""
    if P <= 1:
        return 0.0
    if nbytes <= ALLTOALL_SHORT and P >= 8:  # Bruck: log P rounds of half the table
        rounds = rounds_log2(P)
        return rounds * (alpha + o) + rounds * (P / 2) * nbytes * beta
    return alltoallv_time(P, (P - 1) * nbytes, (P - 1) * nbytes, alpha, beta, o)


def alltoallv_time(P: int, sent: float, received: float, alpha: float, beta: float,
                   o: float = LIBRARY_MESSAGE_SECONDS) -> float:
    """``Alltoallv`` (scattered) of a rank that sends ``sent`` and receives ``received`` bytes
    in all (its own block excluded)."""
    if P <= 1:
        return 0.0
    batches = math.ceil((P - 1) / ALLTOALL_THROTTLE)
    return batches * alpha + (P - 1) * o + max(sent, received) * beta


def allgatherv_algorithm(P: int, total: float) -> str:
    """The algorithm MPICH's ``Allgather(v)`` picks: ``"recursive doubling"``, ``"bruck"`` or
    ``"ring"``."""
    if total < ALLGATHER_LONG and P & (P - 1) == 0:
        return "recursive doubling"
    if total < ALLGATHER_SHORT:
        return "bruck"
    return "ring"


def allgatherv_time(P: int, total: float, own: float, alpha: float, beta: float,
                    o: float = LIBRARY_MESSAGE_SECONDS) -> float:
    """``Allgather(v)`` of ``total`` bytes, ``own`` of them this rank's."""
    if P <= 1:
        return 0.0
    rounds = P - 1 if allgatherv_algorithm(P, total) == "ring" else rounds_log2(P)
    return rounds * (alpha + o) + max(0.0, total - own) * beta


def gather_time(P: int, nbytes: float, alpha: float, beta: float,
                o: float = LIBRARY_MESSAGE_SECONDS) -> float:
    """``Gather`` of ``nbytes`` per rank (binomial tree; the root's time)."""
    if P <= 1:
        return 0.0
    return rounds_log2(P) * (alpha + o) + (P - 1) * nbytes * beta


def gatherv_time(P: int, received: float, alpha: float, beta: float,
                 o: float = LIBRARY_MESSAGE_SECONDS) -> float:
    """``Gatherv`` (linear) at a root that receives ``received`` bytes from the others."""
    if P <= 1:
        return 0.0
    return alpha + (P - 1) * o + received * beta
