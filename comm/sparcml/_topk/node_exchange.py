"""Exchanges among ranks that share one node, through a shared-memory window.

When every rank of a communicator is on one node, :func:`sparcml.topk_allreduce` moves its
reduce-scatter and its allgather through a :class:`~sparcml._runtime.shm_window.SharedWindow` instead of
MPI messages: each rank writes the very buffers it would send (the same encoding, so the same
bytes are counted and every reader decodes the same bits) into its own slot, one barrier, and
each reader decodes the others' slots in place. With more ranks than cores this matters: an MPI
message of a few hundred KiB crosses shared memory in chunks that both processes must poll, so
an all-to-all step waits for every pair of processes to be scheduled together, where a window
waits for one barrier.

A slot holds two regions, written at different steps of a call: the split region (a table of
``(offset, length)`` per destination, then the P messages) and the gather region (the length,
then one message for every rank). Sizes come from agreed quantities (:func:`split_region_bytes`,
:func:`gather_region_bytes`). Which ranks call: every rank of the node, at the same step.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .._runtime.context import TrafficStats
from .._errors import SparcmlError
from .._collectives.exchange import split_parts
from .._collectives.hierarchical import layout_for
from .._wire.codec import Codec, Part

__all__ = ["one_node_layout", "split_region_bytes", "gather_region_bytes",
           "split_reduce_shared", "allgather_shared"]

def _align8(n: int) -> int:
    return (n + 7) & ~7


def one_node_layout(ctx, ranks_per_node: int, shm: int):
    """The node layout (:func:`sparcml._collectives.hierarchical.layout_for`) when every rank of ``ctx`` is
    on one node and a window can be used, else None. ``ranks_per_node`` (a forced grouping, 0
    if none) and ``shm`` (``Options.node_shm``) are agreed values:
    a forced grouping of fewer ranks than the communicator emulates several nodes, and
    ``shm = 0`` asks for messages. Collective on the first call (the layout is cached)."""
    if not shm or ctx.size == 1 or not isinstance(ctx.comm, MPI.Intracomm):
        return None  # the simulator's communicators are not MPI's: they keep the messages
    if ranks_per_node and ranks_per_node < ctx.size:
        return None
    layout = layout_for(ctx, 0)
    if layout.nodes != 1 or layout.slots is None or layout.node.rank != ctx.rank:
        return None
    return layout


def split_region_bytes(size: int, items: int, dim: int, codec: Codec) -> int:
    """Bytes that hold ``size`` messages splitting one input of at most ``items`` entries of
    ``[0, dim)``, with the table: the entries' bound once (per message the encoder sends the
    smaller of the sparse and dense forms), the other messages' header and padding."""
    return 16 * size + (size - 1) * codec.message_bound(0, 0) + codec.message_bound(items, dim)


def gather_region_bytes(items: int, dim: int, codec: Codec) -> int:
    """Bytes that hold one message of at most ``items`` entries of ``[0, dim)``."""
    return 8 + codec.message_bound(items, dim)


def _put(slot: np.ndarray, at: int, buf: np.ndarray, end: int) -> int:
    if at + buf.nbytes > end:  # the sizes above bound every encoding: a bug, not user input
        raise SparcmlError(f"internal error: a {buf.nbytes}-byte message overflows its "
                           f"shared-memory region ({end - at} bytes left)")
    slot[at:at + buf.nbytes] = buf
    return at + _align8(buf.nbytes)


def split_reduce_shared(ctx, layout, vec, stats: TrafficStats, bounds: np.ndarray,
                        codec: Codec, split_bytes: int) -> list[Part]:
    """:func:`sparcml._collectives.exchange.split_reduce` through the window (lossless codecs): the P parts
    of this rank's block ``[bounds[rank], bounds[rank+1])``, in source-rank order, as views of
    the window (valid until the sources write their split regions again: the next call)."""
    rank, size = ctx.rank, ctx.size
    window = layout.slots
    slot = window.views[rank]
    table = slot[:16 * size].view(np.int64).reshape(size, 2)
    at = 16 * size
    for dest, part in enumerate(split_parts(vec, bounds)):
        buf, dense = ctx.ops.encode(codec, part)
        table[dest] = (at, buf.nbytes)
        at = _put(slot, at, buf, split_bytes)
        if dest != rank:
            stats.add_message(buf.nbytes, dense)
    window.barrier(layout.node)
    received = []
    for source in range(size):
        start, nbytes = (int(x) for x in window.views[source][16 * rank:16 * rank + 16]
                         .view(np.int64))
        if source != rank:
            stats.bytes_received += nbytes
        received.append(ctx.ops.decode(window.views[source][start:start + nbytes]))
    return received


def allgather_shared(ctx, layout, buf: np.ndarray, stats: TrafficStats, region: int,
                     region_bytes: int) -> list[np.ndarray]:
    """Every rank's byte buffer, in rank order (views of the window, this rank's ``buf``
    itself), through the gather region that starts at ``region`` in each slot. Counted as the
    point-to-point allgather counts it (``buf`` sent to each other rank)."""
    window = layout.slots
    slot = window.views[ctx.rank]
    slot[region:region + 8].view(np.int64)[0] = buf.nbytes
    _put(slot, region + 8, buf, region + region_bytes)
    for _ in range(ctx.size - 1):
        stats.add_message(buf.nbytes, False)
    window.barrier(layout.node)
    out = []
    for source in range(ctx.size):
        if source == ctx.rank:
            out.append(buf)
            continue
        view = window.views[source]
        nbytes = int(view[region:region + 8].view(np.int64)[0])
        out.append(view[region + 8:region + 8 + nbytes])
    return out
