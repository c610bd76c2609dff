"""Measure a real network's parameters in the simulator's vocabulary (``--network`` spec).

:func:`probe_network` times, between two ranks on different nodes (and two ranks of one
node, where a node has several), the two things the simulator's link model takes:

- ``latency``: half the round trip of an 8-byte ping-pong (median of batches, after a warm-up
  that also opens the connection, which over TCP costs tens of ms the first time);
- the rate: ``nbytes`` exchanged both ways at once (``Sendrecv``, as the algorithms' rounds
  do, as ``Isend`` + ``Recv``), ``nbytes / (t - latency)`` per direction: per exchange the
  mean of the two ranks' times, then the fastest of ``reps`` (interference only adds time).
  An exchange rather than a one-way stream, so a link that is not full duplex shows its real
  per-direction rate.

The other ranks wait in a barrier. With 4 or more nodes the rate is then measured again with
every pair of node leaders exchanging at once (the slowest pair of each round, the fastest
round), and the lower of the two rates is the spec's: a collective keeps every link busy at
once, and where the nodes share something (a switch that is not full bisection; on an emulated
network, this machine's cores running every node's TCP stack) the links are slower together
than one alone. On a full-bisection network of separate hosts the two agree.

On a simulated communicator (:mod:`sparcml.sim`) it times with the virtual clock, so probing
a simulated network returns its spec (a test checks this). Nodes are MPI's shared-memory
groups (``Split_type(COMM_TYPE_SHARED)``); ``ppn`` is the largest node's size. The result describes
the nodes this job ran on: give it more nodes (``NODESx...``) to predict a larger job, which
assumes a full-bisection network (see :mod:`sparcml.sim`).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .._runtime.context import clock_of
from .._runtime.tags import message_tags
from .._errors import InvalidArgumentError
from ._network import NetworkSpec, parse_network

__all__ = ["probe_network", "format_rate", "format_time"]

_TAG = message_tags("sparcml.sim.probe", "probe").probe


def format_rate(bytes_per_s: float) -> str:
    """A rate in the spec's vocabulary, 3 significant digits: 1.17e8 B/s -> '936mbit'."""
    bits = bytes_per_s * 8
    for unit, scale in (("tbit", 1e12), ("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale:
            return f"{float(f'{bits / scale:.3g}'):g}{unit}"
    return f"{max(bits, 1.0):.3g}bit"


def format_time(seconds: float) -> str:
    """A time in the spec's vocabulary: 1.23e-5 -> '12.3us'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{float(f'{seconds / scale:.3g}'):g}{unit}"
    return f"{float(f'{max(seconds, 1e-9) / 1e-9:.3g}'):g}ns"


def _pingpong(comm, me: int, peer: int, reps: int) -> float:
    buf = np.zeros(8, np.uint8)
    clock = clock_of(comm)
    t0 = clock()
    for _ in range(reps):
        if me < peer:
            comm.Send(buf, peer, _TAG)
            comm.Recv(buf, peer, _TAG)
        else:
            comm.Recv(buf, peer, _TAG)
            comm.Send(buf, peer, _TAG)
    return (clock() - t0) / reps / 2


def _exchange(comm, peer: int, out: np.ndarray, into: np.ndarray) -> float:
    clock = clock_of(comm)
    t0 = clock()
    req = comm.Isend(out, peer, _TAG)
    comm.Recv(into, peer, _TAG)
    req.Wait()
    return clock() - t0


def _measure_pair(comm, a: int, b: int, nbytes: int, reps: int) -> tuple[float, float] | None:
    """On ranks a and b: (latency s, bytes/s per direction); None elsewhere. Collective."""
    rank = comm.Get_rank()
    result = None
    if rank in (a, b):
        peer = b if rank == a else a
        # Buffers made and touched once: a fresh 8 MiB buffer's page faults would be timed as
        # transfer (a quarter of the time at 50 Gbit).
        out, into = np.ones(nbytes, np.uint8), np.ones(nbytes, np.uint8)
        _pingpong(comm, rank, peer, 20)          # warm-up: connection set-up
        _exchange(comm, peer, out, into)
        latency = float(np.median([_pingpong(comm, rank, peer, 50) for _ in range(5)]))
        mine = np.array([_exchange(comm, peer, out, into) for _ in range(reps)])
        theirs = np.empty_like(mine)
        req = comm.Isend(mine, peer, _TAG)
        comm.Recv(theirs, peer, _TAG)
        req.Wait()
        # Per exchange, the mean of the two ranks' times: one that started late sees a short
        # exchange, its peer a long one. Then the fastest: interference (other jobs, this
        # machine's scheduler) only ever adds time, so the minimum estimates the link's rate.
        t = float(np.min((mine + theirs) / 2))
        result = (latency, nbytes / max(t - latency, 1e-9))
    comm.Barrier()
    return result


def _loaded_rate(comm, pairs, nbytes: int, reps: int, latency: float) -> float:
    """Bytes/s per direction while every pair of ``pairs`` exchanges ``nbytes`` at once: per
    round the slowest rank's time, then the fastest round. Collective."""
    rank = comm.Get_rank()
    peer = next((b if rank == a else a for a, b in pairs if rank in (a, b)), None)
    if peer is not None:
        out, into = np.ones(nbytes, np.uint8), np.ones(nbytes, np.uint8)
        _exchange(comm, peer, out, into)  # warm-up
    times = np.zeros(reps)
    for i in range(reps):
        comm.Barrier()
        if peer is not None:
            times[i] = _exchange(comm, peer, out, into)
    slowest = np.empty_like(times)
    comm.Allreduce(times, slowest, op=MPI.MAX)
    return nbytes / max(float(slowest.min()) - latency, 1e-9)


def probe_network(comm: MPI.Comm | None = None, *, nbytes: int = 8 << 20,
                  reps: int = 5) -> NetworkSpec:
    """Measure ``comm``'s network and return it as a :class:`NetworkSpec` (collective).

    Every rank must call it; every rank gets the same spec. Needs two ranks on two nodes for
    the inter-node link; with one node, the inter-node rate and latency are those of the
    intra-node pair (the spec says ``1x...``). ``nbytes``: the exchanged message (large
    enough that the rate, not the latency, decides its time: 8 MiB is 67 ms at 1 Gbit).
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    if int(nbytes) < 1024 or int(reps) < 1:
        raise InvalidArgumentError(f"probe_network: nbytes must be >= 1024 and reps >= 1, got "
                                   f"nbytes={nbytes!r}, reps={reps!r}")
    nbytes, reps = int(nbytes), int(reps)
    rank, size = comm.Get_rank(), comm.Get_size()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    try:
        leader, node_size = node.bcast(rank, root=0), node.Get_size()
    finally:
        node.Free()
    table = comm.allgather((leader, node_size))   # a node is named by its first rank
    leaders = sorted({lead for lead, _ in table})
    ppn = max(ns for _, ns in table)
    nodes = len(leaders)
    first_node = [r for r, (lead, _) in enumerate(table) if lead == leaders[0]]
    inter = intra = None
    if nodes > 1:
        inter = _measure_pair(comm, leaders[0], leaders[1], nbytes, reps)
    if len(first_node) > 1:
        intra = _measure_pair(comm, first_node[0], first_node[1], nbytes, reps)
    inter = comm.bcast(inter, root=leaders[0]) if nodes > 1 else None
    if nodes >= 4:  # every link busy at once, as in a collective: the lower rate holds
        pairs = [(leaders[2 * i], leaders[2 * i + 1]) for i in range(nodes // 2)]
        inter = (inter[0], min(inter[1], _loaded_rate(comm, pairs, nbytes, reps, inter[0])))
    intra = comm.bcast(intra, root=first_node[0]) if len(first_node) > 1 else None
    if inter is None and intra is None:
        raise InvalidArgumentError("probe_network needs at least 2 ranks (on 2 nodes for the "
                                   "network between nodes)")
    link = inter if inter is not None else intra
    parts = [f"{nodes}x{format_rate(link[1])}", f"ppn={ppn}", f"latency={format_time(link[0])}"]
    if intra is not None:
        parts += [f"intra={format_rate(intra[1])}", f"intra-latency={format_time(intra[0])}"]
    return parse_network(",".join(parts))
