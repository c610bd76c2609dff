"""Predicted communication seconds of one reduction of a bucket by a compression, at P ranks
of a modeled network (:func:`sparcml.sim.network_cost_model`'s analytic
:class:`~sparcml.CostModel`): what the table of compressors reports at P = 64 and 256.

Per compressor, the wire format it uses (``n`` values per bucket, ``k`` of them sent):

- top-k, threshold, DGC, random-k without shared indices: the sparse allreduce
  (:meth:`~sparcml.CostModel.predict` of the algorithm; with QSGD, ``bits / 8`` bytes per
  value), the result's support from the model's union of P random selections;
- global top-k: :meth:`~sparcml.CostModel.predict_topk`;
- random-k with shared indices: one dense ``MPI_Allreduce`` of k values;
- QSGD / TernGrad of everything: the sparse allreduce of n values, quantized;
- signSGD / signum: an ``Allgather`` of ``ceil(n / 8)`` bytes per rank; EF-signSGD: plus a
  scale;
- FP16 / BF16: a dense allreduce of 2 n bytes;
- PowerSGD: two dense allreduces, of ``rows r`` values per matrix plus the tensors that travel
  whole, and of ``cols r`` per matrix (per parameter with ``shapes``, else the bucket as one
  matrix);
- none: the dense ``MPI_Allreduce`` of n values.

``k`` for the threshold compressor is not known in advance: pass the measured ``sent``.
"""

from __future__ import annotations

import math

from .._topk.local import TopK
from ._objects import Compression, GlobalTopKCompressor, NoneCompressor
from ._powersgd import PowerSGDCompressor
from ._quantizers import CastCompressor, EFSignCompressor, SignCompressor
from ._sparsifiers import DGCCompressor, RandomKCompressor, ThresholdCompressor

__all__ = ["predicted_seconds"]


def predicted_seconds(compression: Compression, model, *, P: int, n: int,
                      sent: float | None = None, itemsize: int = 4, shapes=None) -> float:
    """Seconds of one reduction of a bucket of ``n`` values (``itemsize`` bytes each) by
    ``compression`` at ``P`` ranks under ``model``; ``sent``: values a rank sends (measured;
    default: what the compressor's options give); ``shapes``: the bucket's parameter shapes
    (PowerSGD compresses each matrix; None: the bucket as one matrix)."""
    c, q = compression.compressor, compression.quantizer
    s_val = itemsize if q is None else max(q.bits / 8, 0.125)
    if P <= 1:
        return 0.0
    if isinstance(c, PowerSGDCompressor):
        first, second = c.allreduce_values(n, shapes)
        if not second:
            return model.allreduce(n * itemsize)
        return model.allreduce(first * itemsize) + model.allreduce(second * itemsize)
    if isinstance(c, SignCompressor):
        return model.allgather(P * math.ceil(n / 8))
    if isinstance(c, EFSignCompressor):
        return model.allgather(P * (math.ceil(n / 8) + itemsize))
    if isinstance(c, CastCompressor):
        return model.allreduce(2 * n)
    if isinstance(c, NoneCompressor) and q is None:
        return model.allreduce(n * itemsize)
    if isinstance(c, RandomKCompressor) and c.shared:
        return model.allreduce(c.num_sent(n) * itemsize)
    if sent is None:
        if isinstance(c, ThresholdCompressor):
            raise ValueError("the threshold compressor's k is measured: pass sent=")
        if isinstance(c, DGCCompressor):
            sent = TopK(density=c.density, error_feedback=False).num_kept(n)
        else:
            sent = c.num_sent(n)
    if isinstance(c, GlobalTopKCompressor):
        return model.predict_topk(P=P, N=n, k_local=sent, k=c.global_k(n))
    algorithm = compression.algorithm
    if algorithm == "auto":
        return min(model.predict(name, P=P, N=n, k=sent, s_val=s_val)
                   for name in _auto_names())
    return model.predict(algorithm, P=P, N=n, k=sent, s_val=s_val)


def _auto_names():
    from .._collectives.registry import algorithm_names

    return algorithm_names(in_auto_only=True)
