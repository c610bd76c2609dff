"""The other sparse collectives: allgather, reduce_scatter and bcast of SparseVectors.

Same conventions as :func:`sparcml.allreduce`: collective over ``comm`` (default
``MPI.COMM_WORLD``), buffers on the wire (never pickled), arguments that must agree checked
collectively so that bad input raises the same error on every rank.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import algorithms as _ar
from . import kernels
from .agreement import agree
from .context import TrafficStats, context_for
from .errors import InvalidVectorError, SparcmlError
from .vector import SparseVector
from .wire import Codec, Part, decode

__all__ = ["allgather", "reduce_scatter", "bcast"]

_DESCRIBE = {"value dtype": {4: "float32", 8: "float64"}}


def _checked(ctx, vec, check, quantizer):
    """Coerce ``vec`` and run the collective agreement check on dim, dtype and quantizer."""
    local_error = None
    fields = {"dim": -1, "value dtype": -1, "quantizer": 0}
    try:
        if quantizer is not None:
            fields["quantizer"] = _ar._quantizer_code(quantizer)
        vec = _ar._coerce(vec)
        fields["dim"] = vec.dim
        fields["value dtype"] = vec.dtype.itemsize
    except SparcmlError as exc:
        local_error = exc
    if check:
        agree(ctx.comm, fields, local_error, _DESCRIBE, waiter=ctx.waiter)
    elif local_error is not None:
        raise local_error
    return vec


def allgather(vec, comm: MPI.Comm | None = None, *, quantizer=None,
              stats: TrafficStats | None = None, check: bool = True) -> list[SparseVector]:
    """Every rank's vector, in rank order, on every rank.

    Each vector travels in the cheaper representation (switch rule) and comes back in it.
    With a ``quantizer`` (QSGD) all values travel quantized, and every rank (the sender
    included) gets the decoded values.
    """
    ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
    stats = TrafficStats() if stats is None else stats
    vec = _checked(ctx, vec, check, quantizer)
    stats.calls += 1
    codec = Codec(vec.index_dtype, vec.dtype, quantizer, quantize_sparse=True)
    mine = _ar._normalize(vec, codec)
    buf, _ = _ar._encode_vector(mine, codec)
    if ctx.size == 1:
        return [_ar._as_vector(decode(buf.copy()), vec.dim)]
    return [_ar._as_vector(decode(b), vec.dim) for b in _ar._allgather_bytes(ctx, buf, stats)]


def reduce_scatter(vec, comm: MPI.Comm | None = None, *, quantizer=None,
                   quantize_sparse: bool = False, stats: TrafficStats | None = None,
                   check: bool = True) -> SparseVector:
    """This rank's block of the sum, with global indices.

    Rank r owns ``[b[r], b[r+1])`` with ``b = sparcml.block_bounds(dim, P)``. Returns a sparse
    vector of dimension ``dim`` whose indices all lie in that block (a block that went dense
    during the reduction comes back as its nonzeros). Phase 1 of the split algorithms;
    ``quantizer`` and ``quantize_sparse`` as for :func:`sparcml.allreduce`.
    """
    ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
    stats = TrafficStats() if stats is None else stats
    vec = _checked(ctx, vec, check, quantizer)
    stats.calls += 1
    bounds = _ar.block_bounds(vec.dim, ctx.size)
    lo, hi = int(bounds[ctx.rank]), int(bounds[ctx.rank + 1])
    codec = Codec(vec.index_dtype, vec.dtype, quantizer, quantize_sparse)
    vec = _ar._normalize(vec, codec)
    if ctx.size == 1:
        parts = [Part(0, vec.dim, vec.indices, vec.values)]
    else:
        parts = _ar._split_reduce(ctx, vec, stats, bounds, codec)
    block = _ar._fold_parts(parts, lo, hi - lo, codec)
    if block.is_dense:
        idx, val = kernels.dense_to_sparse(block.values, block.offset,
                                           np.empty(0, vec.index_dtype))
        return SparseVector._trusted(vec.dim, idx, val)
    return SparseVector._trusted(vec.dim, block.indices.copy(), block.values.copy())


def bcast(vec, root: int = 0, comm: MPI.Comm | None = None, *, quantizer=None,
          stats: TrafficStats | None = None) -> SparseVector:
    """``root``'s vector on every rank (other ranks pass ``None`` or anything: it is ignored).

    An invalid vector on ``root`` raises the same error on every rank. With a ``quantizer``
    (QSGD; every rank passes the same configuration) the values travel quantized and every
    rank, the root included, gets the decoded values.
    """
    ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
    stats = TrafficStats() if stats is None else stats
    if not 0 <= root < ctx.size:
        raise InvalidVectorError(f"root {root} is not a rank of a communicator of size "
                                 f"{ctx.size}")
    local_error = None
    buf = np.empty(0, np.uint8)
    code = 0
    try:
        if quantizer is not None:
            code = _ar._quantizer_code(quantizer)
        if ctx.rank == root:
            mine = _ar._coerce(vec)
            codec = Codec(mine.index_dtype, mine.dtype, quantizer, quantize_sparse=True)
            buf, dense = _ar._encode_vector(_ar._normalize(mine, codec), codec)
    except SparcmlError as exc:
        local_error = exc
    agree(ctx.comm, {"root": root, "quantizer": code}, local_error, waiter=ctx.waiter)
    stats.calls += 1
    size = np.array([buf.nbytes], np.int64)
    ctx.waiter.collective(ctx.comm, "Bcast", size, root)
    if ctx.rank != root:
        buf = np.empty(int(size[0]), np.uint8)
    else:
        buf = buf.copy()  # the result must not alias the root's input
        stats.add_message(buf.nbytes * (ctx.size - 1), dense)
    ctx.waiter.collective(ctx.comm, "Bcast", [buf, MPI.BYTE], root)
    header = decode(buf)
    return _ar._as_vector(header, int(header.offset + header.length))
