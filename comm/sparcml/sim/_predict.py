"""What the simulator would charge one allreduce call, without running it (``--model-only``).

Package-internal. ``sparc-bench --simulate --model-only ALGORITHM`` predicts the cells too
slow to simulate. It used to take the cost model of ``auto`` (:func:`sparcml.sim.network_cost_model`:
wall-clock kernel rates, residuals and scales fitted at P = 16, textbook byte formulas), which
gave 1.3-3.6x the simulated time and 35-40% fewer bytes (issue 33). This module instead
replays the structure of each built-in algorithm's call as the simulator charges it, step by
step, with the simulator's own parts:

- compute: the calibrated kernel rates of :mod:`sparcml.sim._rates` times the work
  :mod:`sparcml.sim._model_ops` counts (a fold's entries x ``log2`` of its streams, coded
  indices per index, the packed kernels' per-message rates, one ``op`` per kernel call), plus
  ``call`` per communicator call, all times ``compute_scale``;
- messages: their exact sizes by the wire format (:class:`sparcml._wire.codec.Codec`'s
  switch rule, headers, the index code it picks for the call's link costs, padding), at the
  expected sizes of the streams (the result's K known, the unions between from the overlap
  that explains it);
- time on the wire: the point-to-point model of :class:`~sparcml.sim._world.World` (a
  message arrives ``n beta + alpha`` after it is posted on free links) and the collective
  formulas of :mod:`sparcml.sim._collective_cost`.

Every rank is taken to be the average rank (random and overlapping supports spread evenly;
the balanced partitions even out the blocks), so the prediction is the average rank's time,
where the simulation reports the slowest rank's; bytes are the expected sizes' exact
encoding, so they equal the simulation's to the rounding of the expected sizes
(:class:`Prediction`'s ``bytes_bound`` says where they are only a bound: a result that
densifies within a round).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._registry import get_algorithm
from .._model.costmodel import overlap_from_result, union_size
from .._options import NATIVE_MIN_RANKS, CallOptions
from .._wire.codec import RAW, Codec, _pad8
from .._wire.header import header_size
from . import _collective_cost as cc

__all__ = ["Prediction", "predict", "AGREEMENT_BYTES", "predicted_algorithms"]

# the agreement check's Allreduce (sparcml._runtime.agreement: 2 x (2 + MAX_FIELDS) + MAX_MAXIMA
# int64)
AGREEMENT_BYTES = 8 * (2 * (2 + 14) + 4)

def _predicted() -> dict:
    """Algorithm name (from the registry's records) -> its charges below."""
    from .._collectives.algorithms import (allgather_sum, dense_allreduce, recursive_doubling,
                                           split_dense, split_sparse)

    return {dense_allreduce.ALGORITHM.name: _dense,
            recursive_doubling.ALGORITHM.name: _ssar_recursive_double,
            split_sparse.ALGORITHM.name: _ssar_split_allgather,
            split_dense.ALGORITHM.name: _dsar_split_allgather,
            allgather_sum.ALGORITHM.name: _allgather}


def predicted_algorithms() -> tuple[str, ...]:
    """The algorithms :func:`predict` knows (the built-in ones)."""
    return tuple(_predicted())


@dataclass(frozen=True)
class Prediction:
    """One call's modeled ``seconds`` (compute + communication of the average rank), the bytes
    it sends (``bytes``, per rank) and of which compute (``compute`` seconds, scaled)."""

    seconds: float
    bytes: int
    compute: float


class _Clock:
    """A rank's virtual clock: compute (unscaled, then scaled) and time on the wire."""

    def __init__(self, rates: dict, scale: float):
        self.r, self.scale = rates, scale
        self.t = 0.0
        self.compute = 0.0
        self.sent = 0

    def work(self, seconds: float) -> None:
        s = seconds * self.scale
        self.t += s
        self.compute += s

    def call(self) -> None:
        self.work(self.r["call"])

    def kernel(self, name: str, work: float, coded: float = 0.0, per_message: str | None = None,
               messages: int = 0) -> None:
        r = self.r
        s = r["op"] + r[name] * work + r["coded_index"] * coded
        if per_message is not None:
            s += r[per_message] * messages
        self.work(s)

    def wait(self, seconds: float) -> None:
        self.t += seconds


class _Wire:
    """Message sizes of the call's codec (index coding and link costs as the call's)."""

    def __init__(self, s_idx: int, s_val: int, coded: bool, link_costs):
        self.codec = Codec(np.dtype(f"i{s_idx}"), np.dtype(f"f{s_val}"),
                           options=CallOptions(code_indices=coded, link_costs=link_costs))
        self.s_val = s_val

    def dense(self, items: float, length: float) -> bool:
        return self.codec.should_be_dense(int(round(items)), int(round(length)))

    def message(self, items: float, length: float, offset: int = 0) -> tuple[int, int, bool]:
        """``(bytes, coded indices, dense)`` of a message of ``items`` over ``length``."""
        n, length = int(round(items)), int(round(length))
        if self.codec.should_be_dense(n, length):
            return self.codec.dense_nbytes(length, offset), 0, True
        code, used = self.codec._layout(n, length)
        nbytes = _pad8(header_size(False, n, length, offset) + _pad8(used) + n * self.s_val)
        return nbytes, (n if code != RAW else 0), False


def _levels(streams: float) -> float:
    return max(1.0, math.log2(max(streams, 1.0)))


def predict(algorithm: str, *, P: int, N: int, k: float, K: float, network, rates: dict,
            compute_scale: float = 1.0, s_idx: int = 4, s_val: int = 4, coded: bool = True,
            link_costs=None, native_min_ranks: int = NATIVE_MIN_RANKS,
            plan: bool = False) -> Prediction:
    """The simulator's charges for one call of ``algorithm`` (one of :func:`predicted_algorithms`) on P
    ranks of ``network`` (a :class:`~sparcml.sim.NetworkSpec`), inputs of ``k`` entries of N,
    a result of ``K``; ``rates`` the run's kernel rates; ``coded`` / ``link_costs`` the index
    coding of the call (:func:`sparcml._model.link_costs.index_coding_costs`);
    ``native_min_ranks`` the call's (:func:`sparcml.sim.predict` gives the process
    default; here the :class:`~sparcml.Options` default). ``plan``: a persistent plan's call
    (:func:`sparcml.plan`) instead of the plain one: its identity check in place of the
    agreement, and for an algorithm whose messages do not carry the error flag (the dense
    baseline's ``MPI_Allreduce``) the one-integer reduction beside it."""
    if algorithm not in _predicted():
        raise ValueError(f"no prediction for {algorithm!r} (only {', '.join(_predicted())})")
    clock = _Clock(rates, compute_scale)
    wire = _Wire(s_idx, s_val, coded, link_costs)
    alpha, beta = network.collective_link(range(P))
    native = native_min_ranks
    q = overlap_from_result(k, K, P, N)
    clock.call()  # the call's agreement check (an Allreduce, on one rank too)
    clock.wait(cc.allreduce_time(P, AGREEMENT_BYTES, alpha, beta))
    if P == 1:
        return Prediction(clock.t, 0, clock.compute)
    _predicted()[algorithm](clock, wire, P=P, N=N, k=k, K=K, q=q, network=network,
                              alpha=alpha, beta=beta, native=P >= native)
    if plan and not get_algorithm(algorithm).routes_through_ops:
        clock.call()  # the error flag's Iallreduce of one int32 (plan.py, _run)
        clock.wait(cc.allreduce_time(P, 4, alpha, beta))
    return Prediction(clock.t, int(clock.sent), clock.compute)


def _dense(clock, wire, *, P, N, k, K, q, network, alpha, beta, native):
    nbytes = N * wire.s_val
    clock.call()
    gamma = clock.r["dense_add"] * clock.scale
    clock.wait(cc.allreduce_time(P, nbytes, alpha, beta, gamma))
    clock.sent += 2 * (P - 1) * nbytes // P


def _allgather(clock, wire, *, P, N, k, K, q, network, alpha, beta, native):
    nbytes, coded, dense = wire.message(k, N)
    clock.kernel("encode", nbytes, coded)
    clock.call()  # Allgather of the sizes
    clock.wait(cc.allgather_time(P, 8 * P, 8, alpha, beta))
    clock.call()  # Allgatherv of the messages
    clock.wait(cc.allgather_time(P, P * nbytes, nbytes, alpha, beta))
    clock.sent += (P - 1) * nbytes
    for _ in range(P):
        clock.kernel("decode", nbytes, coded)
    out = N if wire.dense(K, N) else K
    read = P * (N if dense else k)
    clock.kernel("fold", read + out if dense else read * _levels(P) + out)


def _phase_one(clock, wire, *, P, N, k, alpha, beta, native):
    """The split algorithms' reduce-scatter: the P messages packed (one encode), one
    ``Alltoall`` of the sizes, one ``Alltoallv``; returns ``(bytes, coded, dense)`` of one
    message, and whether the messages travelled packed (the owner's read follows)."""
    nbytes, coded, dense = wire.message(k / P, N / P)
    if not native:  # P - 1 point-to-point messages, each encoded and decoded on its own
        for _ in range(P):
            clock.kernel("encode", nbytes, coded)
        for _ in range(P - 1):
            clock.call()  # Isend
        clock.wait(max(0.0, (P - 1) * nbytes * beta + alpha - (P - 1) * clock.r["call"]
                       * clock.scale))
        for _ in range(P - 1):
            clock.call()  # Mprobe
        for _ in range(P):
            clock.kernel("decode", nbytes, coded)
        clock.sent += (P - 1) * nbytes
        return nbytes, coded, dense, False
    clock.kernel("encode", P * nbytes, P * coded, per_message="encode_part", messages=P)
    clock.call()  # Alltoall of the sizes
    clock.wait(cc.alltoall_time(P, cc.SIZE_BYTES, alpha, beta))
    clock.call()  # Alltoallv
    moved = (P - 1) * nbytes
    clock.wait(cc.alltoallv_time(P, moved, moved, alpha, beta))
    clock.sent += moved + cc.SIZE_BYTES * (P - 1)
    return nbytes, coded, dense, True


def _read(clock, kernel, *, P, nbytes, coded, work, packed):
    if packed:
        clock.kernel(kernel, work, P * coded, per_message="decode_part", messages=P)
    else:
        clock.kernel(kernel, work)


def _ssar_split_allgather(clock, wire, *, P, N, k, K, q, network, alpha, beta, native):
    nbytes, coded, dense, packed = _phase_one(clock, wire, P=P, N=N, k=k, alpha=alpha,
                                              beta=beta, native=native)
    block_K = K / P
    block_dense = wire.dense(block_K, N / P)
    out = N / P if block_dense else block_K
    merge = not dense
    _read(clock, "fold", P=P, nbytes=nbytes, coded=coded, packed=packed,
          work=(k * _levels(P) if merge else P * N / P) + out)
    bbytes, bcoded, _ = wire.message(block_K, N / P)
    clock.kernel("encode", bbytes, bcoded)
    clock.call()  # Allgather of (bytes, dense, nonzeros)
    clock.wait(cc.allgather_time(P, 24 * P, 24, alpha, beta))
    clock.call()  # Allgatherv of the blocks
    if block_dense:  # the values straight into the result
        clock.wait(cc.allgather_time(P, N * wire.s_val, N * wire.s_val / P, alpha, beta))
        clock.sent += (P - 1) * N * wire.s_val // P
        return
    clock.wait(cc.allgather_time(P, P * bbytes, bbytes, alpha, beta))
    clock.sent += (P - 1) * bbytes
    result = N if wire.dense(K, N) else K
    _read(clock, "assemble", P=P, nbytes=bbytes, coded=bcoded, packed=True,
          work=P * block_K + result)


def _dsar_split_allgather(clock, wire, *, P, N, k, K, q, network, alpha, beta, native):
    nbytes, coded, dense, packed = _phase_one(clock, wire, P=P, N=N, k=k, alpha=alpha,
                                              beta=beta, native=native)
    _read(clock, "fold", P=P, nbytes=nbytes, coded=coded, packed=packed,
          work=(P * N / P if dense else k) + N / P)
    clock.call()  # Allgatherv of the dense blocks
    total = N * wire.s_val
    clock.wait(cc.allgather_time(P, total, total / P, alpha, beta))
    clock.sent += (P - 1) * total // P


def _ssar_recursive_double(clock, wire, *, P, N, k, K, q, network, alpha, beta, native):
    pof2 = 1 << (P.bit_length() - 1)
    rem = P - pof2
    if rem:  # the slowest ranks: an extra rank's partner, which receives and adds its input
        nbytes, coded, dense = wire.message(k, N)
        a, b = network.link(0, 1)
        clock.call()  # Mprobe: the extra rank encodes and sends meanwhile
        clock.wait(max(0.0, clock.r["op"] * clock.scale + nbytes * b + a))
        clock.kernel("decode", nbytes, coded)
        items = N if dense else k
        clock.kernel("add", 2 * items + (N if wire.dense(union_size(k, 2, N, q), N)
                                         else union_size(k, 2, N, q)))
    # the inputs a group of m butterfly ranks holds: 2 for the partner, the others 1 or 2
    # (the rem - 1 other partners among the pof2 - 1 others)
    def held(m):
        if not rem:
            return m
        return 2 + (m - 1) * (1 + (rem - 1) / max(pof2 - 1, 1))

    mask = 1
    while mask < pof2:
        cur = union_size(k, held(mask), N, q)
        nbytes, coded, dense = wire.message(cur, N)
        peer = mask if mask < P else P - 1
        a, b = network.link(0, peer)
        # off the node, the node's ranks all send this round through its one NIC
        sharing = 1 if network.node_of(peer) == network.node_of(0) else min(network.ppn, P)
        clock.kernel("encode", nbytes, coded)
        clock.call()  # Isend
        clock.sent += nbytes
        clock.call()  # Mprobe
        clock.wait(max(0.0, sharing * nbytes * b + a - clock.r["call"] * clock.scale))
        clock.kernel("decode", nbytes, coded)
        nxt = union_size(k, held(2 * mask), N, q) if mask * 2 < pof2 else K
        items = N if dense else cur
        clock.kernel("add", 2 * items + (N if wire.dense(nxt, N) else nxt))
        mask <<= 1
    if rem:  # the result back to the extra rank
        nbytes, coded, _ = wire.message(K, N)
        clock.kernel("encode", nbytes, coded)
        clock.call()
        clock.sent += nbytes
