"""``ssar_split_allgather``: large data, sparse result (DESIGN 3.4).

Phase 1: ``[0, N)`` is cut into P contiguous blocks; block j of every input goes to rank j,
which adds the P parts (in rank order). Phase 2: an allgather of the owned blocks, each in the
cheaper representation; the blocks are disjoint, so assembling them is concatenation.
"""

from __future__ import annotations

import math

from ..._model.costmodel import index_bytes, split_phase_one, union_size
from ..exchange import allgather_packed, reduce_block
from ..partition import SPARSE_KIND, note_received, split_bounds
from ..registry import Algorithm, register


def run(ctx, vec, *, stats, codec, out=None, sent=None):
    bounds = split_bounds(ctx, vec, SPARSE_KIND, codec)
    before = stats.bytes_received
    block = reduce_block(ctx, vec, stats, bounds, codec, sent=sent,
                         intermediate=True)  # encoded, then dropped
    note_received(ctx, vec.dim, SPARSE_KIND, stats.bytes_received - before, stats)
    buf, _ = ctx.ops.encode(codec, block, known_dense=block.is_dense)
    gathered, displs, sizes = allgather_packed(ctx, buf, stats)
    return ctx.ops.assemble_packed(gathered, displs, sizes, vec.dim, codec)


def cost(model, *, P, N, k, K, q, s_idx, s_val):
    c = s_idx + s_val
    gd, gm = model.gamma_dense, model.gamma_merge
    block_k = k / P
    block_K = union_size(block_k, P, N / P, q)
    dense_block = block_K * c >= (N / P) * s_val
    fold = gd * (N / P + k) if dense_block else gm * k * max(1.0, math.log2(P))
    gathered = P * (N / P * s_val if dense_block
                    else block_K * (index_bytes(block_K, N / P, s_idx) + s_val))
    assemble = 2 * gd * N if K >= N * s_val / c else gd * K * c / 4
    return (split_phase_one(model, P=P, N=N, k=k, s_idx=s_idx, s_val=s_val) + fold
            + model.allgather_alpha + model.allgather(gathered) + assemble)


ALGORITHM = register(Algorithm(
    name="ssar_split_allgather", run=run, cost=cost,
    summary="split into P blocks, reduce each on its owner, sparse allgather "
            "(large data, sparse result)"))
