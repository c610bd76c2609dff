"""``dsar_split_allgather``: large data, dense-ish result (DESIGN 3.4).

Phase 1 as ``ssar_split_allgather``, but each owner adds into a dense block of about N/P
values; phase 2 is a dense ``Allgatherv`` (in place, into the caller's ``out=`` when given).
With a quantizer the dense phase travels QSGD-encoded and every rank decodes every block.
"""

from __future__ import annotations

import numpy as np

from ..._model.costmodel import split_phase_one
from ..exchange import allgather_block_values, allgather_dense_blocks, reduce_block
from ..partition import DENSE_KIND, note_received, split_bounds
from ..._registry import Algorithm, register
from ..._vector import SparseVector


def run(ctx, vec, *, stats, codec, out=None, sent=None):
    bounds = split_bounds(ctx, vec, DENSE_KIND, codec)
    before = stats.bytes_received
    block = reduce_block(ctx, vec, stats, bounds, codec, sent=sent, force_dense=True,
                         intermediate=True)  # the send buffer of the allgather, then dropped
    note_received(ctx, vec.dim, DENSE_KIND, stats.bytes_received - before, stats,
                  codec)
    # a caller's buffer is (usually) already in memory: write around the caches into it; a fresh
    # one is not, and the kernel's zeroing of its pages then makes ordinary stores cheaper
    streaming = out is not None
    if codec.lossy:  # the dense phase in low precision: every rank decodes every block
        if out is None:
            out = np.empty(vec.dim, vec.dtype)
        for j, gathered in enumerate(allgather_dense_blocks(ctx, block, bounds, codec, stats)):
            ctx.ops.decode(gathered, out=out[bounds[j]:bounds[j + 1]], streaming=streaming)
        return SparseVector.unchecked(vec.dim, None, out)
    out = allgather_block_values(ctx, block, bounds, out, stats)
    return SparseVector.unchecked(vec.dim, None, out)


def cost(model, *, P, N, k, K, q, s_idx, s_val, options):
    return (split_phase_one(model, P=P, N=N, k=k, s_idx=s_idx, s_val=s_val, options=options)
            + model.gamma_dense * (N / P + k) + model.allgather(N * s_val))


ALGORITHM = register(Algorithm(
    name="dsar_split_allgather", run=run, cost=cost, writes_out=True, order=30,
    routes_through_ops=True,
    summary="split into P blocks, dense blocks on their owners, dense (optionally "
            "quantized) allgather (large data, dense-ish result)"))
