"""``dense``: the baseline of every comparison, the vector made dense and ``MPI_Allreduce``."""

from __future__ import annotations

from mpi4py import MPI

from .. import arith
from ..._registry import Algorithm, register
from ..._vector import SparseVector


def run(ctx, vec, *, stats, codec, out=None, sent=None):
    out = vec.to_dense() if out is None else arith.write_dense(vec, out)
    if sent is not None:
        sent.append(arith.as_part(vec))
    ctx.waiter.collective(ctx.comm, "Allreduce", MPI.IN_PLACE, out, MPI.SUM)
    size = ctx.size
    stats.bytes_sent += 2 * (size - 1) * out.nbytes // size
    stats.bytes_received += 2 * (size - 1) * out.nbytes // size
    stats.messages += 1
    stats.dense_messages += 1
    return SparseVector.unchecked(vec.dim, None, out)


def cost(model, *, P, N, k, K, q, s_idx, s_val, options):
    return model.gamma_dense * N + model.allreduce(N * s_val)


ALGORITHM = register(Algorithm(
    name="dense", run=run, cost=cost, writes_out=True, accepts_quantizer=False, baseline=True,
    order=40,
    summary="the dense baseline: MPI_Allreduce of the densified vector"))
