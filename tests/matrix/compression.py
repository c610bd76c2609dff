"""sparcml.compression on P ranks, torch-free (profile ``full``): for every algorithm that takes
a quantizer (and the dense baseline without one), top-k / per-chunk top-k / no compressor, with
and without QSGD and error feedback, over a few steps:

- every rank gets the same result;
- the residual is exactly ``g - sent`` (``g`` = input + previous residual), so per rank
  ``sum of inputs == sum of sent + residual`` (up to the additions' rounding);
- ``sent`` holds values only where the compressor kept entries; unquantized it is ``g`` there,
  quantized it is within one QSGD level of ``g`` (or ``g`` itself, for the rank whose input
  travels only inside a sum);
- without a quantizer the result is the sum of what was sent; with one at P = 2 through the
  default algorithm (recursive doubling), exactly ``sent_0 + sent_1`` (quantized once).
"""

import numpy as np

import sparcml
from sparcml._registry import get_algorithm
from sparcml._runtime.context import context_for
from sparcml.compression._objects import (Compression, NoneCompressor, NoneMemory,
                                          ResidualMemory, TopKCompressor)

from . import Case

N = 203


def configs() -> list:
    """The bundles under test, built anew on each call (each rank its own objects)."""
    out = []
    for algorithm in sparcml.ALGORITHMS:
        quantizers = [None, sparcml.QSGD(4, bucket_size=8)]
        if not get_algorithm(algorithm).accepts_quantizer:
            quantizers = [None]
        for q in quantizers:
            out.append(Compression(TopKCompressor(density=0.05), q, ResidualMemory(), algorithm))
    out += [Compression(TopKCompressor(k=9, chunk=50), sparcml.QSGD(2, bucket_size=3)),
            Compression(TopKCompressor(density=0.1), sparcml.QSGD(8), NoneMemory()),
            Compression(NoneCompressor(), sparcml.QSGD(4, bucket_size=16), ResidualMemory(),
                        "auto")]
    return out


def steps(comm, check, ci):
    """Three steps of bundle ``ci`` of :func:`configs`."""
    rank, P = comm.Get_rank(), comm.Get_size()
    c = configs()[ci].fresh(seed=7)
    inputs = np.zeros(N)
    delivered = np.zeros(N)
    for step in range(3):
        x = np.random.default_rng([ci, step, rank]).standard_normal(N).astype(np.float32)
        old = c.memory.residual("b")
        g = x + old if old is not None else x.copy()
        r = c.allreduce_in(context_for(comm), x, key="b")
        what = f"step {step}"
        check.same(r.result.to_dense().tobytes(), what)
        sent = r.sent.to_dense()
        kept = np.zeros(N, bool)
        kept[c.compressor.compress(g).indices if not c.compressor.lossless else slice(None)] = 1
        check(not np.any(sent[~kept]), f"{what}: values sent outside the kept entries")
        if c.quantizer is None:
            check(np.array_equal(sent[kept], g[kept]), f"{what}: unquantized sent == g")
        else:
            bound = np.abs(g[kept]).max() / c.quantizer.levels * (1 + 1e-6)
            check(np.all(np.abs(sent[kept] - g[kept]) <= bound), f"{what}: within one level")
        if c.memory.error_feedback:
            check(np.array_equal(c.memory.residual("b"), g - sent),
                  f"{what}: residual = g - sent")
        sums = comm.allreduce(sent.astype(np.float64))
        if c.quantizer is None:
            check(np.allclose(r.result.to_dense(), sums, rtol=1e-5, atol=1e-5),
                  f"{what}: result = sum of sent")
        elif P == 2 and c.algorithm == sparcml.DEFAULT_ALGORITHM:
            both = comm.allgather(sent)
            check(np.array_equal(r.result.to_dense(), both[0] + both[1]),
                  f"{what}: P = 2, quantized once: result == sent_0 + sent_1 exactly")
        inputs += x
        delivered += sent
    if c.memory.error_feedback:
        check(np.allclose(inputs, delivered + c.memory.residual("b"), rtol=0, atol=1e-5),
              "sum of inputs == sum of sent + residual")


def blocking(comm, check):
    """The blocking call on a communicator, and the warm-up path (``full=True``)."""
    P = comm.Get_size()
    c = Compression(TopKCompressor(k=3), sparcml.QSGD(4)).fresh(seed=1)
    res = c.allreduce(np.full(N, comm.Get_rank() + 1.0, np.float32), key=0, comm=comm)
    check.same(res.to_dense().tobytes(), "Compression.allreduce")
    full = c.allreduce_in(context_for(comm), np.full(N, 1.0, np.float32), key=0, full=True)
    check(np.array_equal(full.result.to_dense(), np.full(N, P, np.float32)),
          "full: the exact sum")


def cases(profile: str, P: int, simulated: bool = False) -> list[Case]:
    if profile != "full":
        raise ValueError(f"unknown profile {profile!r}")
    out = [Case(f"{ci}: {c.describe()}", steps, dict(ci=ci)) for ci, c in enumerate(configs())]
    return out + [Case("blocking and warm-up", blocking)]
