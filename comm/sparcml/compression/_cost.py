"""Predicted communication seconds of one reduction of a bucket by a compression, at P ranks
of a modeled network (:func:`sparcml.sim.network_cost_model`'s analytic
:class:`~sparcml.CostModel`): what the table of compressors reports at P = 64 and 256.

Each compressor class states its own cost
(:meth:`~sparcml.compression.Compressor.predicted_seconds`, beside the class: the wire format
it uses, ``n`` values per bucket, ``k`` of them sent); the default, :func:`allreduce_seconds`,
is that of the compressors that go through the sparse allreduce:

- top-k, threshold, DGC, random-k without shared indices: the sparse allreduce
  (:meth:`~sparcml.CostModel.predict` of the algorithm; with QSGD, ``bits / 8`` bytes per
  value), the result's support from the model's union of P random selections;
- global top-k: :meth:`~sparcml.CostModel.predict_topk`;
- QSGD / TernGrad of everything: the sparse allreduce of n values, quantized;
- none: the dense ``MPI_Allreduce`` of n values.

The others override it: random-k with shared indices (one dense ``MPI_Allreduce`` of k
values), signSGD / signum (an ``Allgather`` of ``ceil(n / 8)`` bytes per rank; EF-signSGD:
plus a scale), FP16 / BF16 (a dense allreduce of 2 n bytes), PowerSGD (two dense allreduces,
of ``rows r`` values per matrix plus the tensors that travel whole, and of ``cols r`` per
matrix: per parameter with ``shapes``, else the bucket as one matrix).

``k`` for the threshold compressor is not known in advance: pass the measured ``sent``.
"""

from __future__ import annotations

from .._registry import AUTO, algorithm_names

__all__ = ["predicted_seconds", "allreduce_seconds"]


def predicted_seconds(compression, model, *, P: int, n: int, sent: float | None = None,
                      itemsize: int = 4, shapes=None) -> float:
    """Seconds of one reduction of a bucket of ``n`` values (``itemsize`` bytes each) by
    ``compression`` (a :class:`~sparcml.compression.Compression`) at ``P`` ranks under
    ``model``; ``sent``: values a rank sends (measured; default: what the compressor's options
    give); ``shapes``: the bucket's parameter shapes (PowerSGD compresses each matrix; None:
    the bucket as one matrix). The compressor's
    :meth:`~sparcml.compression.Compressor.predicted_seconds`; 0 at one rank."""
    if P <= 1:
        return 0.0
    return compression.compressor.predicted_seconds(
        model, P=P, n=n, sent=sent, itemsize=itemsize, quantizer=compression.quantizer,
        algorithm=compression.algorithm, shapes=shapes)


def allreduce_seconds(compressor, model, *, P: int, n: int, sent: float | None, itemsize: int,
                      quantizer, algorithm: str) -> float:
    """The default cost of a compressor (see the module docstring): the sparse allreduce of
    what it sends, the dense one for a lossless compressor without quantizer, the global top-k
    step when it keeps a global k."""
    if compressor.lossless and quantizer is None:
        return model.allreduce(n * itemsize)
    s_val = itemsize if quantizer is None else max(quantizer.bits / 8, 0.125)
    if sent is None:
        sent = compressor.num_sent(n)
    k = compressor.global_k(n)
    if k is not None:
        return model.predict_topk(P=P, N=n, k_local=sent, k=k)
    if algorithm == AUTO:
        return min(model.predict(name, P=P, N=n, k=sent, s_val=s_val)
                   for name in algorithm_names(in_auto_only=True))
    return model.predict(algorithm, P=P, N=n, k=sent, s_val=s_val)
