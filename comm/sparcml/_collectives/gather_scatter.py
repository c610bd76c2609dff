"""The other sparse collectives: allgather, reduce_scatter and bcast of SparseVectors.

Same conventions as :func:`sparcml.allreduce`: collective over ``comm`` (default
``MPI.COMM_WORLD``), buffers on the wire (never pickled), arguments validated on each rank and
agreed on collectively, so that bad input on any rank raises the same error on every rank and
leaves the communicator usable; a rank that fails during the exchange aborts the job. The
options are resolved after the agreement, on every rank (:func:`call_options`), into the
codec: ``index_coding="auto"`` weighs the links' costs here as in the allreduce.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import arith
from .._model.link_costs import call_options
from .._options import Options
from .._runtime.agreement import VALUE_DTYPE_NAMES, agreed_call
from .._runtime.context import TrafficStats, context_for
from .fail_stop import fail_stop
from .exchange import allgather_bytes, as_vector, block_bounds, encode_vector, reduce_block
from .validation import check_quantizable, check_root, check_stats, coerce_vector, quantizer_code
from .._vector import SparseVector
from .._wire.codec import Codec, Part
from .._lazy import lazy_module
kernels = lazy_module("sparcml._kernels")

__all__ = ["allgather", "reduce_scatter", "bcast"]

_DESCRIBE = {"value dtype": VALUE_DTYPE_NAMES}


def _checked(ctx, vec, check, quantizer, stats, options, *, quantized_values: bool):
    """Validate on this rank, then agree on dim, dtype, quantizer and the options;
    ``(vec, stats, options)``."""
    fields = {"dim": -1, "value dtype": -1, "quantizer": 0}
    with agreed_call(ctx, options, fields, _DESCRIBE) as call:
        fields["quantizer"] = quantizer_code(quantizer)
        stats = check_stats(stats)
        vec = coerce_vector(vec, check=check)
        fields["dim"] = vec.dim
        fields["value dtype"] = vec.dtype.itemsize
        if quantizer is not None and quantized_values:
            check_quantizable(vec)
    return vec, stats, call.options


def allgather(vec, comm: MPI.Comm | None = None, *, quantizer=None,
              stats: TrafficStats | None = None, check: bool = True,
              options: Options | None = None) -> list[SparseVector]:
    """Every rank's vector, in rank order, on every rank.

    Each vector travels in the cheaper representation (switch rule) and comes back in it.
    With a ``quantizer`` (QSGD) all values travel quantized, and every rank (the sender
    included) gets the decoded values. ``check`` and ``options`` (its ``index_coding`` and
    ``wait`` apply) as for :func:`sparcml.allreduce`.
    """
    ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
    vec, stats, opts = _checked(ctx, vec, check, quantizer, stats, options,
                                quantized_values=True)
    stats.calls += 1
    codec = Codec(vec.index_dtype, vec.dtype, quantizer, quantize_sparse=True,
                  options=call_options(ctx, opts))
    mine = arith.normalize(vec, codec)
    buf, _ = encode_vector(ctx, mine, codec)
    if ctx.size == 1:
        return [as_vector(ctx.ops.decode(buf.copy()), vec.dim)]
    with fail_stop(ctx.comm, "sparcml.allgather()"):
        gathered = allgather_bytes(ctx, buf, stats)
    return [as_vector(ctx.ops.decode(b), vec.dim) for b in gathered]


def reduce_scatter(vec, comm: MPI.Comm | None = None, *, quantizer=None,
                   quantize_sparse: bool = False, stats: TrafficStats | None = None,
                   check: bool = True, options: Options | None = None) -> SparseVector:
    """This rank's block of the sum, with global indices.

    Rank r owns ``[b[r], b[r+1])`` with ``b = sparcml.block_bounds(dim, P)``. Returns a sparse
    vector of dimension ``dim`` whose indices all lie in that block (a block that went dense
    during the reduction comes back as its nonzeros). Phase 1 of the split algorithms;
    ``quantizer``, ``quantize_sparse`` and ``options`` (its ``index_coding`` and ``wait``
    apply: the blocks are always equal) as for :func:`sparcml.allreduce`.
    """
    ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
    vec, stats, opts = _checked(ctx, vec, check, quantizer, stats, options,
                                quantized_values=True)
    stats.calls += 1
    bounds = block_bounds(vec.dim, ctx.size)
    lo, hi = int(bounds[ctx.rank]), int(bounds[ctx.rank + 1])
    codec = Codec(vec.index_dtype, vec.dtype, quantizer, quantize_sparse,
                  options=call_options(ctx, opts))
    vec = arith.normalize(vec, codec)
    if ctx.size == 1:
        block = ctx.ops.fold_parts([Part(0, vec.dim, vec.indices, vec.values)], lo, hi - lo,
                                   codec, workspace=ctx.workspace)
    else:
        with fail_stop(ctx.comm, "reduce_scatter"):
            block = reduce_block(ctx, vec, stats, bounds, codec)
    if block.is_dense:
        idx, val = kernels.dense_to_sparse(block.values, block.offset,
                                           np.empty(0, vec.index_dtype))
        return SparseVector.unchecked(vec.dim, idx, val)
    return SparseVector.unchecked(vec.dim, block.indices.copy(), block.values.copy())


def bcast(vec, root: int = 0, comm: MPI.Comm | None = None, *, quantizer=None,
          stats: TrafficStats | None = None, options: Options | None = None) -> SparseVector:
    """``root``'s vector on every rank (other ranks pass ``None`` or anything: it is ignored).

    ``root`` must be the same valid rank everywhere; an invalid vector on ``root`` or a bad
    ``root`` on any rank raises the same error on every rank. With a ``quantizer`` (QSGD;
    every rank passes the same configuration) the values travel quantized and every rank, the
    root included, gets the decoded values. ``options`` as for :func:`sparcml.allreduce`
    (its ``index_coding`` and ``wait`` apply).
    """
    ctx = context_for(MPI.COMM_WORLD if comm is None else comm)
    buf = np.empty(0, np.uint8)
    dense = False
    fields = {"root": -1, "quantizer": 0}
    with agreed_call(ctx, options, fields) as call:
        fields["quantizer"] = quantizer_code(quantizer)
        fields["root"] = root = check_root(root, ctx.size)
        stats = check_stats(stats)
        if ctx.rank == root:
            mine = coerce_vector(vec)
            if quantizer is not None:
                check_quantizable(mine)
    stats.calls += 1
    resolved = call_options(ctx, call.options)  # on every rank: it may be collective
    with fail_stop(ctx.comm, "bcast"):
        if ctx.rank == root:
            codec = Codec(mine.index_dtype, mine.dtype, quantizer, quantize_sparse=True,
                          options=resolved)
            buf, dense = encode_vector(ctx, arith.normalize(mine, codec), codec)
        size = np.array([buf.nbytes], np.int64)
        ctx.waiter.collective(ctx.comm, "Bcast", size, root)
        if ctx.rank != root:
            buf = np.empty(int(size[0]), np.uint8)
            stats.bytes_received += buf.nbytes
        else:
            buf = buf.copy()  # the result must not alias the root's input
            stats.add_message(buf.nbytes * (ctx.size - 1), dense)
        ctx.waiter.collective(ctx.comm, "Bcast", [buf, MPI.BYTE], root)
    header = ctx.ops.decode(buf)
    return as_vector(header, int(header.offset + header.length))
