"""A plan's operations: the context's own, with the wire header's error flag carried.

Package-internal (:mod:`sparcml._collectives.plan` and :mod:`sparcml._topk.plan` use it). Like
:class:`~sparcml._collectives.ops.Ops`, an operations object: it calls the wrapped
operations' methods (the simulator's sharing ones included) and touches only the headers.
"""

from __future__ import annotations

from .._wire.header import has_error_flag, set_error_flag
from .._wire.packed import Packed
from .ops import Ops
from .._lazy import lazy_module
pk = lazy_module("sparcml._wire.packed_kernels")

__all__ = ["FlagOps"]


class FlagOps(Ops):
    """The context's operations, with the error flag set on every message this rank sends
    once it is raised or seen, and noted on every message it decodes (see the module
    docstring). ``reset(raised)`` starts a call."""

    __slots__ = ("inner", "raised", "seen")

    def __init__(self, inner: Ops):
        self.inner = inner
        self.raised = self.seen = False

    def reset(self, raised: bool) -> None:
        self.raised, self.seen = raised, False

    @property
    def flagged(self) -> bool:
        return self.raised or self.seen

    def recv_bytes(self, ctx, source, tag, status=None):
        return self.inner.recv_bytes(ctx, source, tag, status)

    def allgather_in_place(self, ctx, sizes, write_mine, stats):
        def write(slot):
            write_mine(slot)
            if self.flagged:
                set_error_flag(slot)

        return self.inner.allgather_in_place(ctx, sizes, write, stats)

    def allgather_packed(self, ctx, sizes, write_mine, stats):
        def write(slot):
            write_mine(slot)
            if self.flagged:
                set_error_flag(slot)

        return self.inner.allgather_packed(ctx, sizes, write, stats)

    def allgather_values(self, ctx, block, bounds, out):
        return self.inner.allgather_values(ctx, block, bounds, out)

    # the native collectives carry encoded buffers (flagged by encode, noted by decode)
    def alltoallv_bytes(self, ctx, bufs, stats):
        return self.inner.alltoallv_bytes(ctx, bufs, stats)

    def alltoallv_packed(self, ctx, packed, stats, extra=None):
        return self.inner.alltoallv_packed(ctx, packed, stats, extra)

    def gather_bytes(self, ctx, buf, stats, root=0):
        return self.inner.gather_bytes(ctx, buf, stats, root)

    def bcast_bytes(self, ctx, data, nbytes, root=0, out=None):
        return self.inner.bcast_bytes(ctx, data, nbytes, root, out)

    def encode(self, codec, part, *, known_dense=False, seed=None):
        buf, dense = self.inner.encode(codec, part, known_dense=known_dense, seed=seed)
        if self.flagged:
            buf = buf.copy()  # the simulator may share the encoded buffer
            set_error_flag(buf)
        return buf, dense

    def decode(self, buf, out=None, *, streaming=False, check=False):
        if has_error_flag(buf):
            self.seen = True
        return self.inner.decode(buf, out, streaming=streaming, check=check)

    def encode_split(self, codec, vec, bounds):
        packed = self.inner.encode_split(codec, vec, bounds)
        if self.flagged:
            packed = Packed(packed.buf.copy(), packed.table)
            pk.set_error_flags(packed.buf, packed.table)
        return packed

    def _note_flags(self, buf, displs, sizes):
        if pk.any_error_flag(buf, displs.astype("int64", copy=False),
                             sizes.astype("int64", copy=False)):
            self.seen = True

    def fold_packed(self, buf, displs, sizes, offset, length, codec, force_dense=False,
                    **kwargs):
        self._note_flags(buf, displs, sizes)
        return self.inner.fold_packed(buf, displs, sizes, offset, length, codec, force_dense,
                                      **kwargs)

    def assemble_packed(self, buf, displs, sizes, dim, codec):
        self._note_flags(buf, displs, sizes)
        return self.inner.assemble_packed(buf, displs, sizes, dim, codec)

    def add(self, a, b, codec, **kwargs):
        return self.inner.add(a, b, codec, **kwargs)

    def fold_parts(self, parts, offset, length, codec, force_dense=False, **kwargs):
        return self.inner.fold_parts(parts, offset, length, codec, force_dense, **kwargs)

    def assemble(self, blocks, dim, codec):
        return self.inner.assemble(blocks, dim, codec)
