"""The operations an algorithm shares with the simulator, reached through ``ctx.ops``.

Package-internal. Every algorithm (and the node-aware path, the global top-k, the one-node
window, gather / scatter) receives, gathers, broadcasts, encodes, decodes and adds through the
:class:`Ops` of its context, never by calling :mod:`sparcml._collectives.exchange`'s
transport, :meth:`sparcml._wire.codec.Codec.encode`, :func:`sparcml._wire.codec.decode` or
:mod:`sparcml._collectives.arith` directly. A real run's contexts hold :data:`PLAIN` (these
methods do exactly that and nothing else); a simulated communicator's contexts hold the
simulator's subclass (:mod:`sparcml.sim._sharing`), which lets ranks that hold identical data
share it instead of copying it P times. So nothing is swapped at run time, and a new algorithm
that calls ``ctx.ops`` is shared in a simulation without any list to update.

Every method returns bitwise what the plain one does (the simulator's tests compare).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import arith
from .._model.mpi_collectives import SIZE_BYTES
from .._runtime.context import use_plain_operations
from .._vector import SparseVector
from .._wire.codec import Codec, Part, decode
from .._wire.packed import Packed, encode_split
from .._lazy import lazy_module
pk = lazy_module("sparcml._wire.packed_kernels")

__all__ = ["Ops", "PLAIN", "ops_of", "MAX_COUNT", "exchange_sizes"]

MAX_COUNT = 2**31 - 1  # MPI's int counts and displacements: the most bytes a vector call moves


def _displs(counts: np.ndarray) -> np.ndarray:
    displs = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=displs[1:])
    return displs


def exchange_sizes(ctx, scounts: np.ndarray, extra: np.ndarray | None):
    """The ``Alltoall`` of a vector collective's sizes (``scounts``, intc, one per peer) with
    ``extra`` (int64, the same to every peer) beside them: ``(received sizes as intc,
    received extras (P x E, this rank's own in its row) or None, bytes per peer)``."""
    size = scounts.shape[0]
    if extra is None:
        rcounts = np.empty(size, np.intc)
        ctx.waiter.collective(ctx.comm, "Alltoall", [scounts, MPI.INT], [rcounts, MPI.INT])
        return rcounts, None, SIZE_BYTES
    extra = np.asarray(extra, np.int64)
    send = np.empty((size, 1 + extra.shape[0]), np.int64)
    send[:, 0] = scounts
    send[:, 1:] = extra
    got = np.empty_like(send)
    ctx.waiter.collective(ctx.comm, "Alltoall", [send, MPI.INT64_T], [got, MPI.INT64_T])
    got[ctx.rank, 1:] = extra
    return got[:, 0].astype(np.intc), got[:, 1:], send.shape[1] * 8


class Ops:
    """The plain operations (see the module docstring). Subclasses may share results between
    the ranks of one process; they must return the same bytes and count the same traffic."""

    # ---- moving bytes --------------------------------------------------------------------------
    def recv_bytes(self, ctx, source, tag, status=None) -> tuple[np.ndarray, int]:
        """Receive one byte message (its size probed first); ``(buffer, source rank)``."""
        status = MPI.Status() if status is None else status
        msg = ctx.waiter.mprobe(ctx.comm, source, tag, status)
        buf = np.empty(status.Get_count(MPI.BYTE), np.uint8)
        ctx.waiter.wait(msg.Irecv([buf, MPI.BYTE]))
        return buf, status.Get_source()

    def allgather_in_place(self, ctx, sizes: np.ndarray, write_mine, stats) -> list[np.ndarray]:
        """Allgatherv of byte messages whose ``sizes`` (one per rank, int64) every rank knows:
        ``write_mine(slot)`` fills this rank's slot of the receive buffer, which then travels
        in place. Returns the P messages in rank order (views of one buffer)."""
        recv, displs = self.allgather_packed(ctx, sizes, write_mine, stats)
        return [recv[d:d + n] for d, n in zip(displs, sizes)]

    def allgather_packed(self, ctx, sizes: np.ndarray, write_mine,
                         stats) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`allgather_in_place`, returning the receive buffer itself and the messages'
        displacements (int64): ``(packed buffer, displs)``."""
        displs = np.zeros_like(sizes)
        np.cumsum(sizes[:-1], out=displs[1:])
        recv = np.empty(int(sizes.sum()), np.uint8)
        write_mine(recv[int(displs[ctx.rank]):int(displs[ctx.rank] + sizes[ctx.rank])])
        ctx.waiter.collective(ctx.comm, "Allgatherv", MPI.IN_PLACE,
                              [recv, sizes, displs, MPI.BYTE])
        stats.bytes_sent += int(sizes.sum() - sizes[ctx.rank])
        stats.bytes_received += int(sizes.sum() - sizes[ctx.rank])
        stats.messages += 1
        return recv, displs

    def alltoallv_bytes(self, ctx, bufs: list, stats) -> list[np.ndarray]:
        """Byte buffer ``bufs[j]`` to rank j, for every j, in one MPI collective: an
        ``Alltoall`` of the sizes (one int32 per peer), then one ``Alltoallv`` of the bytes.
        This rank's own buffer is not sent; it comes back as it is. Returns the P buffers
        received, in source-rank order (views of one receive buffer). Counts the size
        exchange (:data:`~sparcml._model.mpi_collectives.SIZE_BYTES` per peer, each way) and
        the bytes received; the caller counts the buffers it sent (one message each). The
        caller makes sure every rank sends and receives fewer than :data:`MAX_COUNT` bytes."""
        rank, size = ctx.rank, ctx.size
        scounts = np.array([0 if j == rank else b.nbytes for j, b in enumerate(bufs)], np.intc)
        rcounts = np.empty(size, np.intc)
        ctx.waiter.collective(ctx.comm, "Alltoall", [scounts, MPI.INT], [rcounts, MPI.INT])
        sdispls, rdispls = _displs(scounts), _displs(rcounts)
        send = np.empty(int(scounts.sum()), np.uint8)
        for j, b in enumerate(bufs):
            if j != rank:
                send[int(sdispls[j]):int(sdispls[j] + scounts[j])] = b
        recv = np.empty(int(rcounts.sum()), np.uint8)
        ctx.waiter.collective(ctx.comm, "Alltoallv", [send, (scounts, sdispls), MPI.BYTE],
                              [recv, (rcounts, rdispls), MPI.BYTE])
        stats.bytes_sent += SIZE_BYTES * (size - 1)
        stats.bytes_received += SIZE_BYTES * (size - 1) + recv.nbytes
        out = [recv[int(d):int(d + n)] for d, n in zip(rdispls, rcounts)]
        out[rank] = bufs[rank]
        return out

    def alltoallv_packed(self, ctx, packed: Packed, stats, extra: np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """:meth:`alltoallv_bytes` of packed messages (message j of ``packed`` to rank j) with
        no copy on the way out: ``packed.buf`` is the send buffer. Returns ``(receive buffer,
        displs, sizes, extras)`` (int64): message j of the result came from rank j, this rank's
        own copied into its place. ``extra`` (int64, E values, the same to every peer) rides
        in the size exchange (then one int64 per size, and E more per peer each way);
        ``extras[j]`` is what rank j sent (None without ``extra``). Counts as
        :meth:`alltoallv_bytes`, the extra values included."""
        rank, size = ctx.rank, ctx.size
        sizes = packed.table[:, pk.NBYTES]
        scounts = sizes.astype(np.intc)
        scounts[rank] = 0
        sdispls = packed.table[:, pk.START].astype(np.intc)
        rcounts, extras, header = exchange_sizes(ctx, scounts, extra)
        own = int(sizes[rank])
        rsizes = rcounts.astype(np.int64)
        rsizes[rank] = own
        rdispls = _displs(rsizes)
        recv = np.empty(int(rsizes.sum()), np.uint8)
        at = int(rdispls[rank])
        recv[at:at + own] = packed.message(rank)
        ctx.waiter.collective(ctx.comm, "Alltoallv", [packed.buf, (scounts, sdispls), MPI.BYTE],
                              [recv, (rcounts, rdispls.astype(np.intc)), MPI.BYTE])
        stats.bytes_sent += header * (size - 1)
        stats.bytes_received += header * (size - 1) + recv.nbytes - own
        return recv, rdispls, rsizes, extras

    def gather_bytes(self, ctx, buf: np.ndarray, stats, root: int = 0) -> list | None:
        """Every rank's byte buffer on ``root``, in rank order (the root's own as it is, the
        others views of one receive buffer): a ``Gather`` of the sizes (one int32 each), then
        a ``Gatherv`` of the bytes; None on the other ranks. Counts the size exchange (on the
        root, also the bytes received); the caller counts the buffer it sent."""
        size = np.array([buf.nbytes], np.intc)
        sizes = np.empty(ctx.size, np.intc) if ctx.rank == root else None
        ctx.waiter.collective(ctx.comm, "Gather", [size, MPI.INT],
                              None if sizes is None else [sizes, MPI.INT], root)
        if ctx.rank != root:
            ctx.waiter.collective(ctx.comm, "Gatherv", [buf, MPI.BYTE], None, root)
            stats.bytes_sent += SIZE_BYTES
            return None
        sizes[root] = 0  # the root's own buffer does not travel
        displs = _displs(sizes)
        recv = np.empty(int(sizes.sum()), np.uint8)
        ctx.waiter.collective(ctx.comm, "Gatherv", [np.empty(0, np.uint8), MPI.BYTE],
                              [recv, (sizes, displs), MPI.BYTE], root)
        stats.bytes_received += SIZE_BYTES * (ctx.size - 1) + recv.nbytes
        out = [recv[int(d):int(d + n)] for d, n in zip(displs, sizes)]
        out[root] = buf
        return out

    def allgather_values(self, ctx, block: np.ndarray, bounds: np.ndarray,
                         out: np.ndarray | None) -> np.ndarray:
        """Allgatherv of dense value blocks (rank j's spans ``bounds[j:j+2]``) into ``out``
        (a fresh array of ``bounds[-1]`` values when None); returns the filled array. Counts
        nothing (the caller does)."""
        if out is None:
            out = np.empty(int(bounds[-1]), block.dtype)
        mpi_type = MPI._typedict[block.dtype.char]
        ctx.waiter.collective(ctx.comm, "Allgatherv", [block, mpi_type],
                              [out, np.diff(bounds), bounds[:-1], mpi_type])
        return out

    def bcast_bytes(self, ctx, data: np.ndarray | None, nbytes: int, root: int = 0,
                    out: np.ndarray | None = None) -> np.ndarray:
        """``root``'s ``data`` (bytes, uint8) on every rank: the root gets ``data`` itself, the
        others ``out`` (``nbytes`` uint8, e.g. a byte view of a caller's buffer) or a fresh
        buffer, filled. Every rank knows ``nbytes``. Counts nothing (the caller does)."""
        if ctx.rank == root:
            ctx.waiter.collective(ctx.comm, "Bcast", [data, MPI.BYTE], root)
            return data
        buf = np.empty(nbytes, np.uint8) if out is None else out
        ctx.waiter.collective(ctx.comm, "Bcast", [buf, MPI.BYTE], root)
        return buf

    # ---- messages ------------------------------------------------------------------------------
    def encode(self, codec: Codec, part: Part, *, known_dense: bool = False,
               seed: int | None = None) -> tuple[np.ndarray, bool]:
        """:meth:`Codec.encode`: ``(buffer, went dense)``."""
        return codec.encode(part, known_dense=known_dense, seed=seed)

    def decode(self, buf: np.ndarray, out: np.ndarray | None = None, *,
               streaming: bool = False, check: bool = False) -> Part:
        """:func:`sparcml._wire.codec.decode`."""
        return decode(buf, out, streaming=streaming, check=check)

    def encode_split(self, codec: Codec, vec: SparseVector, bounds: np.ndarray) -> Packed:
        """:func:`sparcml._wire.packed.encode_split` (lossless codecs)."""
        return encode_split(codec, vec, bounds)

    # ---- local sums ----------------------------------------------------------------------------
    def add(self, a: SparseVector, b: SparseVector, codec: Codec, *, workspace=None,
            intermediate: bool = False, role: str = "add") -> SparseVector:
        """:func:`sparcml._collectives.arith.add`."""
        return arith.add(a, b, codec, workspace=workspace, intermediate=intermediate, role=role)

    def fold_parts(self, parts: list[Part], offset: int, length: int, codec: Codec,
                   force_dense: bool = False, *, workspace=None, intermediate: bool = False,
                   role: str = "fold") -> Part:
        """:func:`sparcml._collectives.arith.fold_parts`."""
        return arith.fold_parts(parts, offset, length, codec, force_dense, workspace=workspace,
                                intermediate=intermediate, role=role)

    def fold_packed(self, buf: np.ndarray, displs: np.ndarray, sizes: np.ndarray, offset: int,
                    length: int, codec: Codec, force_dense: bool = False, *, workspace=None,
                    intermediate: bool = False, role: str = "fold") -> Part:
        """:func:`sparcml._collectives.arith.fold_packed`."""
        return arith.fold_packed(buf, displs, sizes, offset, length, codec, force_dense,
                                 workspace=workspace, intermediate=intermediate, role=role)

    def assemble(self, blocks: list[Part], dim: int, codec: Codec) -> SparseVector:
        """:func:`sparcml._collectives.arith.assemble`."""
        return arith.assemble(blocks, dim, codec)

    def assemble_packed(self, buf: np.ndarray, displs: np.ndarray, sizes: np.ndarray, dim: int,
                        codec: Codec) -> SparseVector:
        """:func:`sparcml._collectives.arith.assemble_packed`."""
        return arith.assemble_packed(buf, displs, sizes, dim, codec)


PLAIN = Ops()
use_plain_operations(PLAIN)  # what sparcml's contexts on real communicators use


def ops_of(comm) -> Ops:
    """The operations for calls on ``comm``: a simulated communicator's own (its
    ``sparcml_ops``, :mod:`sparcml.sim`), else :data:`PLAIN`."""
    ops = getattr(comm, "sparcml_ops", None)
    return PLAIN if ops is None else ops
