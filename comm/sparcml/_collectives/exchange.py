"""Moving vectors between ranks: the point-to-point and allgather steps the algorithms share.

Package-internal (the algorithms in :mod:`sparcml._collectives.algorithms` and :mod:`sparcml._collectives.gather_scatter`
use it; users call :func:`sparcml.allreduce`). Every function takes the call's context
(``ctx``: ``comm``, ``rank``, ``size``, ``waiter``) and its :class:`~sparcml._wire.codec.Codec`, and
counts what it sends in the call's :class:`~sparcml.TrafficStats`. Vectors travel as one byte
buffer each (``sparcml._wire.codec``), sizes learnt with ``Mprobe``; nothing is pickled. Receiving,
gathering, encoding and decoding go through ``ctx.ops`` (:mod:`sparcml._collectives.ops`).

A sender keeps computing with what it sent (decoded, when quantized), so that every rank holds
the same values. ``sent`` (a list, or None) collects the decoded parts of *this rank's own
input* where they leave the rank on their own (what error feedback must subtract).
"""

from __future__ import annotations

import functools

import numpy as np
from mpi4py import MPI

from .._runtime.context import TrafficStats
from .._runtime.tags import message_tags
from .._errors import InvalidVectorError
from .._vector import MAX_DIM, SparseVector
from .._wire.codec import Codec, Part
from .ops import MAX_COUNT
from .._lazy import lazy_module
pk = lazy_module("sparcml._wire.packed_kernels")
kernels = lazy_module("sparcml._kernels")

__all__ = ["as_vector", "as_sent", "encode_vector", "send_vector", "recv_vector",
           "exchange_vector", "allgather_bytes", "allgather_dense_blocks", "block_bounds",
           "split_parts", "split_reduce", "reduce_block", "native_split",
           "allgather_packed", "send_packed", "allgather_block_values"]

TAG_SPLIT = message_tags("sparcml.exchange", "split").split  # phase 1 of the split algorithms


def as_vector(part: Part, dim: int) -> SparseVector:
    """A decoded message spanning ``[0, dim)`` as a vector (no copy)."""
    if part.is_dense:
        return SparseVector.unchecked(dim, None, part.values)
    return SparseVector.unchecked(dim, part.indices, part.values)


def encode_vector(ctx, vec: SparseVector, codec: Codec, seed=None) -> tuple[np.ndarray, bool]:
    """One message of the whole vector; ``(buffer, went dense)``."""
    # vectors inside the algorithms are normalized, so a dense-backed one crosses the rule
    return ctx.ops.encode(codec, Part(0, vec.dim, vec.indices, vec.values),
                          known_dense=vec.is_dense, seed=seed)


def as_sent(ctx, vec: SparseVector, buf: np.ndarray, codec: Codec) -> SparseVector:
    """What the receiver of ``buf`` sees: ``vec`` itself, or its decoding when quantized."""
    return as_vector(ctx.ops.decode(buf), vec.dim) if codec.lossy else vec


def _note_sent(sent, vec: SparseVector) -> None:
    if sent is not None:
        sent.append(Part(0, vec.dim, vec.indices, vec.values))


def send_vector(ctx, vec, dest, tag, stats, codec, *, sent=None) -> SparseVector:
    """Send ``vec`` to ``dest``; returns it as sent (``sent``: see the module docstring)."""
    buf, dense = encode_vector(ctx, vec, codec)
    ctx.waiter.wait(ctx.comm.Isend([buf, MPI.BYTE], dest, tag))
    stats.add_message(buf.nbytes, dense)
    delivered = as_sent(ctx, vec, buf, codec)
    _note_sent(sent, delivered)
    return delivered


def recv_vector(ctx, source, tag, dim, stats=None) -> SparseVector:
    buf, _ = ctx.ops.recv_bytes(ctx, source, tag)
    if stats is not None:
        stats.bytes_received += buf.nbytes
    return as_vector(ctx.ops.decode(buf), dim)


def exchange_vector(ctx, vec, peer, tag, stats, codec, *, seed=None,
                    sent=None) -> tuple[SparseVector, SparseVector]:
    """Send ``vec`` to ``peer`` and receive its vector: ``(vec as sent, peer's vector)``."""
    buf, dense = encode_vector(ctx, vec, codec, seed)
    req = ctx.comm.Isend([buf, MPI.BYTE], peer, tag)
    try:
        rbuf, _ = ctx.ops.recv_bytes(ctx, peer, tag)
    finally:
        ctx.waiter.wait(req)
    stats.add_message(buf.nbytes, dense)
    stats.bytes_received += rbuf.nbytes
    delivered = as_sent(ctx, vec, buf, codec)
    _note_sent(sent, delivered)
    return delivered, as_vector(ctx.ops.decode(rbuf), vec.dim)


def allgather_bytes(ctx, buf, stats) -> list[np.ndarray]:
    """Allgatherv of byte buffers of different sizes; returns the P buffers in rank order."""
    sizes = np.empty(ctx.size, np.int64)
    ctx.waiter.collective(ctx.comm, "Allgather", np.array([buf.nbytes], np.int64), sizes)

    def write_mine(slot):
        slot[:] = buf

    return ctx.ops.allgather_in_place(ctx, sizes, write_mine, stats)


def allgather_packed(ctx, buf, stats) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`allgather_bytes` as one packed buffer: ``(buffer, displs, sizes)`` (int64)."""
    sizes = np.empty(ctx.size, np.int64)
    ctx.waiter.collective(ctx.comm, "Allgather", np.array([buf.nbytes], np.int64), sizes)

    def write_mine(slot):
        slot[:] = buf

    recv, displs = ctx.ops.allgather_packed(ctx, sizes, write_mine, stats)
    return recv, displs, sizes


def allgather_dense_blocks(ctx, block: Part, bounds: np.ndarray, codec: Codec,
                           stats: TrafficStats) -> list[np.ndarray]:
    """Allgatherv of every rank's dense block message (block j spans ``bounds[j:j+2]``).

    Every size is known from ``bounds``, so no sizes travel first, and this rank encodes
    straight into its slot of the receive buffer.
    """
    sizes = np.array([codec.dense_nbytes(int(bounds[j + 1] - bounds[j]), int(bounds[j]))
                      for j in range(ctx.size)], np.int64)

    def write_mine(slot):
        codec.encode_dense(block.values, block.offset, out=slot)

    return ctx.ops.allgather_in_place(ctx, sizes, write_mine, stats)


@functools.lru_cache(maxsize=64)
def _bounds(dim: int, size: int) -> np.ndarray:
    out = np.array([(j * dim) // size for j in range(size + 1)], np.int64)  # exact Python ints
    out.setflags(write=False)
    return out


def block_bounds(dim: int, size: int) -> np.ndarray:
    """Start of each rank's block of ``[0, dim)`` and ``dim`` at the end (``size + 1`` int64).

    Block j is ``[floor(j dim / size), floor((j+1) dim / size))``, computed exactly for every
    ``dim < 2**63`` (a product in int64 would overflow from ``dim * size >= 2**63``). The
    array is read-only (it is cached).
    """
    if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)) \
            or not 0 <= int(dim) <= MAX_DIM:
        raise InvalidVectorError(f"dim must be an integer in [0, 2**63), got {dim!r}")
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) \
            or int(size) < 1:
        raise InvalidVectorError(f"size must be an integer >= 1, got {size!r}")
    return _bounds(int(dim), int(size))


def split_parts(vec: SparseVector, bounds: np.ndarray) -> list[Part]:
    """``vec`` cut at ``bounds`` (``P + 1`` increasing): part j covers ``[bounds[j],
    bounds[j+1])``, views of ``vec``'s arrays (dense blocks or sparse slices)."""
    size = bounds.shape[0] - 1
    if vec.is_dense:
        return [Part(int(bounds[j]), int(bounds[j + 1] - bounds[j]), None,
                     vec.values[bounds[j]:bounds[j + 1]]) for j in range(size)]
    pos = kernels.split_positions(vec.indices, bounds)
    return [Part(int(bounds[j]), int(bounds[j + 1] - bounds[j]),
                 vec.indices[pos[j]:pos[j + 1]], vec.values[pos[j]:pos[j + 1]])
            for j in range(size)]


def native_split(ctx, bounds: np.ndarray, codec: Codec) -> bool:
    """Whether :func:`split_reduce` on ``ctx`` runs as one ``Alltoallv``: from the call's
    ``Options.native_min_ranks`` ranks (agreed; ``codec.options``), when MPI's int counts hold
    every message (a bound from ``bounds``, the same on every rank)."""
    if not codec.options.native(ctx.size):
        return False
    longest = int(np.max(np.diff(bounds))) if bounds.shape[0] > 1 else 0
    # a quantized message is no larger than the lossless bound plus its scales' slack
    return ctx.size * (2 * codec.message_bound(longest, longest) + 64) <= MAX_COUNT


def split_reduce(ctx, vec: SparseVector, stats: TrafficStats, bounds: np.ndarray,
                 codec: Codec, *, sent=None) -> list[Part]:
    """Phase 1 of the split algorithms: block j of every input goes to rank j.

    Returns the P parts of this rank's block, in source-rank order. From
    ``Options.native_min_ranks`` ranks (:func:`native_split`) the P - 1 messages travel in one
    ``Alltoall`` of their sizes and one ``Alltoallv`` (``ctx.ops.alltoallv_bytes``: the loop
    over peers runs in MPI, and the size exchange adds 4 bytes per peer each way to the
    counted traffic); below, as point-to-point messages (sizes learnt by ``Mprobe``). The
    same messages, and so the same bits, either way.
    """
    rank, size, ops = ctx.rank, ctx.size, ctx.ops
    mine = split_parts(vec, bounds)
    if size > 1 and native_split(ctx, bounds, codec):
        return _split_reduce_native(ctx, mine, stats, codec, sent)
    requests = []
    buffers = []
    received: list[Part | None] = [None] * size
    try:
        for step in range(1, size):  # staggered so that no rank is everybody's first target
            dest = (rank + step) % size
            buf, dense = ops.encode(codec, mine[dest])
            buffers.append(buf)
            requests.append(ctx.comm.Isend([buf, MPI.BYTE], dest, TAG_SPLIT))
            stats.add_message(buf.nbytes, dense)
            if sent is not None:
                sent.append(ops.decode(buf) if codec.lossy else mine[dest])
        # my own block goes through the same encoding, so its representation (and hence the
        # sum) is what every other rank would compute from it
        own, _ = ops.encode(codec, mine[rank])
        received[rank] = ops.decode(own)
        if sent is not None:
            sent.append(received[rank])
        status = MPI.Status()
        for _ in range(size - 1):
            buf, source = ops.recv_bytes(ctx, MPI.ANY_SOURCE, TAG_SPLIT, status)
            stats.bytes_received += buf.nbytes
            received[source] = ops.decode(buf)
    finally:
        ctx.waiter.waitall(requests)
    return received


def send_packed(ctx, vec: SparseVector, stats: TrafficStats, bounds: np.ndarray, codec: Codec,
                extra: np.ndarray | None = None):
    """:func:`split_reduce`'s messages packed (``ctx.ops.encode_split``, a lossless codec) and
    exchanged in one ``Alltoallv`` (``ctx.ops.alltoallv_packed``, ``extra`` beside the sizes),
    each counted as the point-to-point path counts its message. Returns
    ``(receive buffer, displs, sizes, extras)``."""
    rank, size, ops = ctx.rank, ctx.size, ctx.ops
    packed = ops.encode_split(codec, vec, bounds)
    sizes, dense = packed.table[:, pk.NBYTES], packed.table[:, pk.FMT]
    stats.bytes_sent += int(sizes.sum() - sizes[rank])
    stats.messages += size - 1
    stats.dense_messages += int(dense.sum() - dense[rank])
    return ops.alltoallv_packed(ctx, packed, stats, extra)


def allgather_block_values(ctx, block: Part, bounds: np.ndarray, out, stats) -> np.ndarray:
    """``ctx.ops.allgather_values`` of this rank's dense ``block`` (block j spans
    ``bounds[j:j+2]``) into ``out`` (fresh when None), counted as one message."""
    out = ctx.ops.allgather_values(ctx, block.values, bounds, out)
    moved = (int(bounds[-1]) - block.length) * block.values.dtype.itemsize
    stats.bytes_sent += moved
    stats.bytes_received += moved
    stats.messages += 1
    return out


def reduce_block(ctx, vec: SparseVector, stats: TrafficStats, bounds: np.ndarray,
                 codec: Codec, *, sent=None, force_dense: bool = False,
                 intermediate: bool = False) -> Part:
    """Phase 1 of the split algorithms and the owner's sum: :func:`split_reduce`, then
    ``ctx.ops.fold_parts`` of the P parts into this rank's block ``[bounds[rank],
    bounds[rank + 1])`` (``force_dense``, ``intermediate``: as there, with the context's
    workspace).

    Where the parts travel as one ``Alltoallv`` (:func:`native_split`) and the codec is
    lossless with no ``sent`` to collect, the P messages are encoded in one call into one
    send buffer (``ctx.ops.encode_split``) and summed in one call from the receive buffer
    (``ctx.ops.fold_packed``): the same bytes and bits, without P encodes and P decodes in
    Python (:mod:`sparcml._wire.packed`).
    """
    rank, size, ops = ctx.rank, ctx.size, ctx.ops
    lo, hi = int(bounds[rank]), int(bounds[rank + 1])
    if size > 1 and sent is None and not codec.lossy and native_split(ctx, bounds, codec):
        buf, displs, rsizes, _ = send_packed(ctx, vec, stats, bounds, codec)
        return ops.fold_packed(buf, displs, rsizes, lo, hi - lo, codec, force_dense,
                               workspace=ctx.workspace, intermediate=intermediate)
    parts = split_reduce(ctx, vec, stats, bounds, codec, sent=sent)
    return ops.fold_parts(parts, lo, hi - lo, codec, force_dense, workspace=ctx.workspace,
                          intermediate=intermediate)


def _split_reduce_native(ctx, mine: list[Part], stats: TrafficStats, codec: Codec,
                         sent) -> list[Part]:
    """:func:`split_reduce` through ``ctx.ops.alltoallv_bytes``."""
    rank, size, ops = ctx.rank, ctx.size, ctx.ops
    bufs: list = [None] * size
    for step in range(1, size):  # the order of the point-to-point path (``sent``'s order)
        dest = (rank + step) % size
        buf, dense = ops.encode(codec, mine[dest])
        bufs[dest] = buf
        stats.add_message(buf.nbytes, dense)
        if sent is not None:
            sent.append(ops.decode(buf) if codec.lossy else mine[dest])
    own, _ = ops.encode(codec, mine[rank])  # as in the point-to-point path
    bufs[rank] = own
    received = ops.alltoallv_bytes(ctx, bufs, stats)
    parts: list[Part] = []
    for source, buf in enumerate(received):
        parts.append(ops.decode(buf))
        if source == rank and sent is not None:
            sent.append(parts[-1])
    return parts
