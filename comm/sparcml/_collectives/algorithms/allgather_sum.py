"""``allgather``: the baseline of Horovod, GRACE and torch/gloo for sparse tensors.

Every rank's indices and values are allgathered, then every rank sums the P vectors locally
(in rank order).
"""

from __future__ import annotations

import math

from .. import arith
from ..._model.costmodel import stream_bytes
from ..exchange import allgather_bytes, as_sent, as_vector, encode_vector
from ..._registry import Algorithm, register


def run(ctx, vec, *, stats, codec, out=None, sent=None):
    buf, _ = encode_vector(ctx, vec, codec)
    if sent is not None:
        sent.append(arith.as_part(as_sent(ctx, vec, buf, codec)))
    parts = [ctx.ops.decode(b) for b in allgather_bytes(ctx, buf, stats)]
    return as_vector(ctx.ops.fold_parts(parts, 0, vec.dim, codec, workspace=ctx.workspace),
                     vec.dim)


def cost(model, *, P, N, k, K, q, s_idx, s_val, options):
    c = s_idx + s_val
    threshold = N * s_val / c
    total = P * k
    # arith.fold_parts adds densely only when a part is dense (k past the switch rule); else
    # it merges the P streams, however many items they hold together (then densifies)
    fold = (model.gamma_dense * (N + total) if k >= threshold
            else model.gamma_merge * total * max(1.0, math.log2(P))
            + (model.gamma_dense * N if total >= threshold else 0.0))
    return (model.gamma_dense * k * c / 4 + model.allgather_alpha
            + model.allgather(P * stream_bytes(k, N, s_idx, s_val, options.code_indices))
            + fold)


ALGORITHM = register(Algorithm(
    name="allgather", run=run, cost=cost, baseline=True, order=50, routes_through_ops=True,
    summary="the allgather baseline of Horovod/GRACE/gloo: gather every rank's vector, sum "
            "locally"))
