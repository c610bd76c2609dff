"""A plan's steady fast path: lossless recursive doubling on preallocated buffers.

Package-internal (:mod:`sparcml._collectives.plan_core` runs it, for plans and for the plain
call's cached plans). It runs the one schedule of ``ssar_recursive_double``
(:func:`sparcml._collectives.algorithms.recursive_doubling.schedule`: the non-power-of-two
fold, the butterfly, the unfold; the algorithm's message tags) and adds with the same kernels
in the same order (the lower rank of the butterfly first, the switch rule of a lossless
:class:`~sparcml._wire.codec.Codec`), so its results are bitwise those of the algorithm. What
it saves is Python and memory work:

- messages are written into one preallocated send buffer and received into one preallocated
  receive buffer (no ``Mprobe``: a message never exceeds the dense vector, so the receive is
  posted with that size and the header says what arrived), in the wire format of
  :mod:`sparcml._wire.codec` (the short header, raw indices);
- sums alternate between two preallocated sets of buffers; nothing is allocated after the
  first calls but the result (none with ``out=``);
- the header's error flag (:data:`sparcml._wire.header.ERROR_FLAG`) carries "some rank's
  input was bad" along the schedule: a rank sets it when its own input was bad or when a
  message it received carried it, so after the unfold every rank knows.

Used for dims whose dense vector is at most :data:`MAX_DENSE_BYTES` and below 2**31 (int32
indices, the short header). The bound is memory: a plan keeps, per context, a send and a
receive buffer of the dense vector's size (zero pages until a message reaches them: a sparse
call touches only its bytes) and, once a sum goes dense, dense scratch of that size, for the
plan's life (the plain calls keep the latest 16 plans per communicator). 64 MiB (16M float32)
covers the benchmarks' N = 16M and a model's gradient buckets; beyond it the registry's
algorithm runs.
"""

from __future__ import annotations

import struct

import numpy as np
from mpi4py import MPI

from .._vector import SparseVector, index_dtype_for
from .._wire.codec import Part, decode
from .._wire.header import ERROR_FLAG, RAW, SHORT_HEADER_SIZE, SHORT_MAGIC, set_error_flag
from .algorithms.recursive_doubling import (FOLD_RECV, FOLD_SEND, ROUND, UNFOLD_RECV,
                                            UNFOLD_SEND, TAGS as _RD, schedule)
from .._lazy import lazy_module
kernels = lazy_module("sparcml._kernels")

__all__ = ["FastRecursiveDoubling", "MAX_DENSE_BYTES", "fits"]

MAX_DENSE_BYTES = 64 << 20  # dense vectors up to 64 MiB take the fast path (see above)
_DENSE = 1
_VALUES8 = 4
_OTHER_FORMS = 0x32  # 8-byte indices, an index code: forms the fast path does not write
_ROLES = (("d0", "i0", "v0"), ("d1", "i1", "v1"))  # the scratch buffers' names, per role
_WORDS = struct.Struct("=II")  # the short header's first two words (as the uint32 views)


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def fits(dim: int, dtype) -> bool:
    """Whether a lossless recursive doubling of ``dim`` values of ``dtype`` takes the fast
    path."""
    return 0 < dim < 2**31 and dim * np.dtype(dtype).itemsize <= MAX_DENSE_BYTES


class FastRecursiveDoubling:
    """The buffers and the schedule of one plan on one context (one thread at a time)."""

    __slots__ = ("dim", "dtype", "idx_dtype", "s_idx", "s_val", "item", "entry", "rank", "size",
                 "steps", "send", "recv", "send_w", "recv_w", "send_i",
                 "send_v", "recv_i", "recv_v", "bufs", "raised", "seen", "vflag", "comm",
                 "waiter", "copy_sends", "codec", "raw_counts", "recv_spec", "native", "walk")

    def __init__(self, ctx, dim: int, dtype):
        self.dim = dim
        self.dtype = np.dtype(dtype)
        self.idx_dtype = index_dtype_for(dim)
        self.s_idx, self.s_val = self.idx_dtype.itemsize, self.dtype.itemsize
        self.item, self.entry = self.s_idx + self.s_val, self.s_val  # a lossless codec's rule
        self.vflag = _VALUES8 if self.s_val == 8 else 0
        self.rank, self.size = ctx.rank, ctx.size
        self.comm, self.waiter = ctx.comm, ctx.waiter
        self.steps = schedule(self.rank, self.size)  # the algorithm's
        tags = {ROUND: _RD.round, FOLD_SEND: _RD.fold, FOLD_RECV: _RD.fold,
                UNFOLD_SEND: _RD.unfold, UNFOLD_RECV: _RD.unfold}
        # the steps as run() reads them: (kind, peer, message tag, scratch role, lower)
        self.walk = tuple((st.kind, st.peer, tags[st.kind], 1 if st.role == "rd1" else 0,
                           st.lower) for st in self.steps)
        # a message is at most the dense vector (a sparse one is below the rule: fewer bytes)
        cap = SHORT_HEADER_SIZE + _pad8(dim * self.s_val) + 16
        self.send = np.zeros(cap, np.uint8)
        self.recv = np.zeros(cap, np.uint8)
        self.send_w = self.send[:SHORT_HEADER_SIZE].view(np.uint32)
        self.recv_w = self.recv[:SHORT_HEADER_SIZE].view(np.uint32)
        self.send_w[2] = dim  # length and offset never change
        self.send_w[3] = 0
        body = cap - SHORT_HEADER_SIZE
        self.send_i = self.send[SHORT_HEADER_SIZE:].view(self.idx_dtype)
        self.send_v = self.send[SHORT_HEADER_SIZE:SHORT_HEADER_SIZE + body].view(self.dtype)
        self.recv_i = self.recv[SHORT_HEADER_SIZE:].view(self.idx_dtype)
        self.recv_v = self.recv[SHORT_HEADER_SIZE:SHORT_HEADER_SIZE + body].view(self.dtype)
        self.bufs: dict = {}
        self.raised = self.seen = False
        self.copy_sends = getattr(ctx.comm, "sparcml_ops", None) is not None  # simulated
        self.codec = None  # the running call's lossless Codec (its index coding): see run()
        self.raw_counts: dict = {}
        self.recv_spec = [self.recv, MPI.BYTE]  # every receive's (built once)
        self.native = isinstance(ctx.comm, MPI.Comm)  # MPI's (a simulated one has no Sendrecv)

    # ---- buffers -------------------------------------------------------------------------------
    def _buf(self, name: str, n: int, dtype) -> np.ndarray:
        """A scratch array of at least ``n`` items, kept (grown only) for later calls."""
        b = self.bufs.get(name)
        if b is None or b.shape[0] < n:
            b = self.bufs[name] = np.empty(max(n, 16), dtype)
        return b

    def dense_rule(self, nnz: int) -> bool:
        return nnz * self.item >= self.dim * self.entry

    # ---- messages ------------------------------------------------------------------------------
    def _encode(self, idx, val, n: int) -> int:
        """Write the stream (``idx`` None: dense; else ``idx`` and ``val`` hold exactly ``n``
        items) into the send buffer; its size in bytes."""
        flags = self.vflag | (ERROR_FLAG if (self.raised or self.seen) else 0)
        send = self.send
        if idx is None:
            _WORDS.pack_into(send, 0, SHORT_MAGIC | (flags | _DENSE) << 16, self.dim)
            self.send_v[:self.dim] = val
            end = SHORT_HEADER_SIZE + self.dim * self.s_val
        else:
            _WORDS.pack_into(send, 0, SHORT_MAGIC | flags << 16, n)
            self.send_i[:n] = idx
            used = n * self.s_idx
            at = (used + 7) & ~7  # _pad8
            if at != used:  # the codec's zero padding: the same bytes on every run
                send[SHORT_HEADER_SIZE + used:SHORT_HEADER_SIZE + at] = 0
            o = at // self.s_val
            self.send_v[o:o + n] = val
            end = SHORT_HEADER_SIZE + at + n * self.s_val
        total = (end + 7) & ~7  # as the codec pads a message (and counts it): _pad8
        if total != end:
            send[end:total] = 0
        return total

    def _decoded(self):
        """The received stream: ``(indices or None, values, n)``, views of the receive buffer."""
        w0, n = _WORDS.unpack_from(self.recv)
        flags = (w0 >> 16) & 0xFF
        if flags & ERROR_FLAG:
            self.seen = True
        if w0 & 0xFFFF != SHORT_MAGIC or flags & _OTHER_FORMS:
            # a message of the registry's algorithm (a rank whose call took the slow path):
            # coded indices, or a long header; the codec reads any form (and names a corrupt one)
            part = decode(self.recv)
            if part.indices is None:
                return None, part.values, self.dim
            return part.indices, part.values, part.indices.shape[0]
        if flags & _DENSE:
            return None, self.recv_v[:self.dim], self.dim
        o = ((n * self.s_idx + 7) & ~7) // self.s_val  # _pad8
        return self.recv_i[:n], self.recv_v[o:o + n], n

    def _raw(self, n: int) -> bool:
        """Whether the codec sends the indices of a sparse message of ``n`` items raw (then
        this path writes it; else the codec encodes it: the same bytes as the plain call)."""
        codec = self.codec
        key = (n, codec.code_indices, codec.link_costs)
        raw = self.raw_counts.get(key)
        if raw is None:
            raw = codec._layout(n, self.dim)[0] == RAW
            if len(self.raw_counts) < 4096:
                self.raw_counts[key] = raw
        return raw

    def _exchange(self, stream, peer: int, tag: int, stats, send: bool, receive: bool):
        """Send ``stream`` to and/or receive a stream from ``peer``; ``stats`` (None: not
        counted). On MPI's communicators a spinning waiter lets MPI block (one ``Sendrecv`` for
        a round); a yielding one (:class:`sparcml._runtime.progress.Waiter`) and a simulated
        communicator wait on non-blocking requests."""
        comm = self.comm
        spin = self.native and not self.waiter.yield_cpu
        rreq = comm.Irecv(self.recv_spec, peer, tag) if receive and not (spin and send) \
            else None
        if send:
            idx, val, n = stream
            codec = self.codec
            if idx is None or codec is None or self.raw_counts.get(
                    (n, codec.code_indices, codec.link_costs)) or self._raw(n):
                nbytes = self._encode(idx, val, n)
                # a simulated send is delivered without a copy: the next round would overwrite
                buf = self.send if self.copy_sends is False else self.send[:nbytes].copy()
            else:  # coded indices: the codec's message (flagged as the others)
                buf, _ = self.codec.encode(Part(0, self.dim, idx, val))
                if self.raised or self.seen:
                    set_error_flag(buf)
                nbytes = buf.nbytes
            if not spin:
                self.waiter.wait(comm.Isend([buf, nbytes, MPI.BYTE], peer, tag))
            elif receive:
                comm.Sendrecv([buf, nbytes, MPI.BYTE], peer, tag, self.recv_spec, peer, tag)
            else:
                comm.Send([buf, nbytes, MPI.BYTE], peer, tag)
            if stats is not None:
                stats.add_message(nbytes, idx is None)
        if receive:
            if rreq is not None:
                self.waiter.wait(rreq)
            elif not send:
                comm.Recv(self.recv_spec, peer, tag)
            got = self._decoded()
            if stats is not None:
                idx, val, n = got
                stats.bytes_received += _pad8(SHORT_HEADER_SIZE + (
                    n * self.s_val if idx is None else _pad8(n * self.s_idx) + n * self.s_val))
            return got
        return None

    # ---- sums ----------------------------------------------------------------------------------
    def _add(self, a, b, role: int):
        """``a + b`` as :func:`sparcml._collectives.arith.add` computes it, into the buffers
        of ``role`` (0 or 1): ``(indices or None, values, n)``."""
        a_idx, a_val, a_n = a
        b_idx, b_val, b_n = b
        dim = self.dim
        d_name, i_name, v_name = _ROLES[role]
        if a_idx is None and b_idx is None:
            out = self._buf(d_name, dim, self.dtype)[:dim]
            np.add(a_val, b_val, out=out)
            return None, out, dim
        if a_idx is None or b_idx is None:
            (d_val, s_idx, s_val) = (a_val, b_idx, b_val) if a_idx is None else \
                (b_val, a_idx, a_val)
            out = self._buf(d_name, dim, self.dtype)[:dim]
            np.copyto(out, d_val)
            kernels.scatter_add(out, s_idx, s_val, 0)
            return None, out, dim
        size = a_n + b_n
        bufs = self.bufs
        idx = bufs.get(i_name)
        val = bufs.get(v_name)
        if idx is None or val is None or idx.shape[0] < size or val.shape[0] < size:
            idx = self._buf(i_name, size, self.idx_dtype)
            val = self._buf(v_name, size, self.dtype)
        n = kernels.merge_add_into(a_idx, a_val, b_idx, b_val, idx, val)
        if n * self.item >= dim * self.entry:  # the switch rule (dense_rule)
            out = self._buf(d_name, dim, self.dtype)[:dim]
            out.fill(0)
            kernels.scatter_add(out, idx[:n], val[:n], 0)
            return None, out, dim
        return idx[:n], val[:n], n

    def _normalized(self, vec: SparseVector):
        """:func:`sparcml._collectives.arith.normalize` of the input, as a stream (a view of
        ``vec`` or of the input buffers)."""
        dim = self.dim
        if vec.indices is None:
            nz = kernels.count_nonzero(vec.values)
            if self.dense_rule(nz):
                return None, vec.values, dim
            idx = self._buf("in_i", nz, self.idx_dtype)
            val = self._buf("in_v", nz, self.dtype)
            n = kernels.dense_to_sparse_into(vec.values, 0, idx, val)
            return idx[:n], val[:n], n
        n = vec.indices.shape[0]
        if n * self.item >= dim * self.entry:  # (dense_rule) SparseVector.to_dense: zeros, then the values assigned
            out = self._buf("in_d", dim, self.dtype)[:dim]
            out.fill(0)
            out[vec.indices] = vec.values
            return None, out, dim
        return vec.indices, vec.values, n

    # ---- the schedule --------------------------------------------------------------------------
    def run(self, vec: SparseVector, stats, raised: bool, codec=None):
        """The sum of every rank's ``vec`` as a stream in this object's buffers (or ``vec``'s
        own arrays at P = 1); ``raised``: this rank's input was bad (``vec`` is a stand-in).
        ``codec``: the call's lossless :class:`~sparcml._wire.codec.Codec`, whose choice of
        index code the messages follow (None: raw indices always). Afterwards :attr:`seen`
        says whether any rank's was. The steps are the algorithm's
        (:func:`~sparcml._collectives.algorithms.recursive_doubling.schedule`); the sums of
        the rounds alternate between the buffers of two roles, as the algorithm's scratch."""
        self.raised, self.seen, self.codec = raised, False, codec
        cur = self._normalized(vec)
        exchange, add = self._exchange, self._add
        for kind, peer, tag, role, lower in self.walk:
            if kind == ROUND:
                other = exchange(cur, peer, tag, stats, True, True)
                cur = add(cur, other, role) if lower else add(other, cur, role)
            elif kind == FOLD_SEND or kind == UNFOLD_SEND:
                exchange(cur, peer, tag, stats, True, False)
            elif kind == FOLD_RECV:
                cur = add(exchange(None, peer, tag, stats, False, True), cur, role)
            else:
                cur = exchange(None, peer, tag, stats, False, True)
        self.seen = self.seen or self.raised
        return cur

    def result(self, cur, out: np.ndarray | None, fresh_from: SparseVector | None = None):
        """The user's result from the stream ``cur``: written densely into ``out``, else a
        vector of fresh arrays (``fresh_from``: the input, for P = 1's no-alias rule)."""
        idx, val, n = cur
        if out is not None:
            if idx is None:
                if val is not out:
                    np.copyto(out, val)
            else:
                out.fill(0)
                out[idx] = val
            return SparseVector.unchecked(self.dim, None, out)
        if idx is None:
            return SparseVector.unchecked(self.dim, None, val.copy())
        return SparseVector.unchecked(self.dim, idx.copy(), val.copy())
