"""``ssar_split_allgather``: large data, sparse result (DESIGN 3.4).

Phase 1: ``[0, N)`` is cut into P contiguous blocks; block j of every input goes to rank j,
which adds the P parts (in rank order). Phase 2: an allgather of the owned blocks, each in the
cheaper representation; the blocks are disjoint, so assembling them is concatenation. When
every block went dense (known from the sizes every rank exchanges first, which carry each
block's representation and nonzeros) and the values are exact, the blocks are allgathered as
plain values straight into the result, as ``dsar_split_allgather`` does: no headers, and no
assembling pass over the N entries (the same bits).
"""

from __future__ import annotations

import math

import numpy as np

from ..._model.costmodel import index_bytes, split_phase_one, union_size
from ..._vector import SparseVector
from ..exchange import allgather_block_values, reduce_block
from ..partition import SPARSE_KIND, note_received, split_bounds
from ..._registry import Algorithm, register
from ..._lazy import lazy_module
kernels = lazy_module("sparcml._kernels")


def run(ctx, vec, *, stats, codec, out=None, sent=None):
    bounds = split_bounds(ctx, vec, SPARSE_KIND, codec)
    before = stats.bytes_received
    block = reduce_block(ctx, vec, stats, bounds, codec, sent=sent,
                         intermediate=True)  # encoded, then dropped
    note_received(ctx, vec.dim, SPARSE_KIND, stats.bytes_received - before, stats,
                  codec)
    buf, _ = ctx.ops.encode(codec, block, known_dense=block.is_dense)
    exact_dense = block.is_dense and not codec.lossy
    # every rank's (message bytes, whether its block is dense and exact, its nonzeros)
    mine = np.array([buf.nbytes, int(exact_dense),
                     kernels.count_nonzero(block.values) if exact_dense else 0], np.int64)
    every = np.empty((ctx.size, 3), np.int64)
    ctx.waiter.collective(ctx.comm, "Allgather", mine, every)
    if every[:, 1].all():
        return _dense_blocks(ctx, vec, block, bounds, int(every[:, 2].sum()), stats, codec)
    sizes = every[:, 0].copy()

    def write_mine(slot):
        slot[:] = buf

    gathered, displs = ctx.ops.allgather_packed(ctx, sizes, write_mine, stats)
    return ctx.ops.assemble_packed(gathered, displs, sizes, vec.dim, codec)


def _dense_blocks(ctx, vec, block, bounds, support, stats, codec):
    """Phase 2 when every block is dense: the values allgathered into the result."""
    out = allgather_block_values(ctx, block, bounds, None, stats)
    if codec.should_be_dense(support, vec.dim):
        return SparseVector.unchecked(vec.dim, None, out)
    # cancellations left too few nonzeros: the result is sparse, as assembling would make it
    idx, val = kernels.dense_to_sparse(out, 0, np.empty(0, codec.index_dtype))
    return SparseVector.unchecked(vec.dim, idx, val)


def cost(model, *, P, N, k, K, q, s_idx, s_val, options):
    c = s_idx + s_val
    gd, gm = model.gamma_dense, model.gamma_merge
    block_k = k / P
    block_K = union_size(block_k, P, N / P, q)
    dense_block = block_K * c >= (N / P) * s_val
    fold = gd * (N / P + k) if dense_block else gm * k * max(1.0, math.log2(P))
    gathered = P * (N / P * s_val if dense_block
                    else block_K * (index_bytes(block_K, N / P, s_idx, options.code_indices)
                                  + s_val))
    if dense_block:  # the values are allgathered into the result: nothing to assemble
        assemble = 0.0
    else:
        assemble = 2 * gd * N if K >= N * s_val / c else gd * K * c / 4
    return (split_phase_one(model, P=P, N=N, k=k, s_idx=s_idx, s_val=s_val, options=options)
            + fold
            + model.allgather_alpha + model.allgather(gathered) + assemble)


ALGORITHM = register(Algorithm(
    name="ssar_split_allgather", run=run, cost=cost, order=20, routes_through_ops=True,
    summary="split into P blocks, reduce each on its owner, sparse allgather "
            "(large data, sparse result)"))
