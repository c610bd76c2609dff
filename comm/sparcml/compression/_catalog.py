"""The compressors by name: what ``--compressor NAME`` selects in the deep apps, one line each,
and the :class:`~sparcml.compression.Compression` a name and its parameters build.

:func:`build` takes the apps' shared parameters (``density``, ``bits``, ``threshold``, ``rank``,
``momentum``, ``shared``, ``density_warmup_steps``, ``clip_norm``, ``error_feedback``); a
parameter that a compressor does not use is ignored (the record keeps them all).
"""

from __future__ import annotations

from .._collectives.algorithms import DEFAULT_ALGORITHM
from .._errors import CompressionError
from .._quant.qsgd import QSGD
from ._objects import (Compression, GlobalTopKCompressor, NoneCompressor, NoneMemory,
                       ResidualMemory, TopKCompressor)
from ._powersgd import PowerSGDCompressor
from ._quantizers import CastCompressor, EFSignCompressor, SignCompressor, terngrad
from ._sparsifiers import DGCCompressor, DGCMemory, RandomKCompressor, ThresholdCompressor

__all__ = ["COMPRESSORS", "build"]

#: name -> one line (the README's list, the CLI's help)
COMPRESSORS = {
    "topk": "the --density largest magnitudes per bucket (with --bits: QSGD values), "
            "error feedback",
    "global-topk": "the --density largest of the sum over ranks (sparcml.topk_allreduce)",
    "randomk": "--density random positions per step, seeded; --shared-indices: the same on "
               "every rank (a dense allreduce of k values)",
    "threshold": "every entry with |v| >= --threshold (variable k), error feedback",
    "dgc": "Deep Gradient Compression: --density top-k of the momentum-corrected gradient, "
           "momentum factor masking, --clip-norm, --density-warmup-steps (use --momentum 0 "
           "in the optimizer: the memory applies --compressor-momentum)",
    "qsgd": "all values, QSGD-quantized to --bits, through the sparse allreduce",
    "terngrad": "all values, ternary {-s, 0, s} per bucket (QSGD 2 bits, max norm)",
    "signsgd": "1-bit signs, bit-packed allgather, majority vote",
    "signum": "signs of a local momentum (--compressor-momentum), majority vote",
    "efsignsgd": "scaled signs |g|_1/n sign(g), 1 bit per value + one scale, error feedback",
    "fp16": "values as IEEE half floats, 16-bit allreduce",
    "bf16": "values as bfloat16, 16-bit allreduce",
    "powersgd": "rank --powersgd-rank PowerSGD of each parameter matrix (biases whole), warm "
                "start, error feedback (2 small dense allreduces per bucket)",
}


def build(name: str, *, density: float = 0.01, bits: int = 0, threshold: float | None = None,
          rank: int = 4, momentum: float = 0.9, shared: bool = False,
          density_warmup_steps: int = 0, clip_norm: float | None = None,
          error_feedback: bool = True, algorithm: str = DEFAULT_ALGORITHM,
          seed: int = 0, chunk: int | None = None) -> Compression:
    """The :class:`Compression` named ``name`` (a key of :data:`COMPRESSORS`) with these
    parameters; ``bits`` adds a QSGD quantizer to the sparsifiers that go through the sparse
    allreduce (topk, randomk without shared indices, threshold, dgc), and is refused elsewhere.
    Raises :class:`~sparcml.CompressionError` for an unknown name or a bad parameter."""
    if name not in COMPRESSORS:
        raise CompressionError(f"unknown compressor {name!r}; one of {', '.join(COMPRESSORS)}")
    quantizable = ("topk", "threshold", "dgc", "qsgd") + (() if shared else ("randomk",))
    if bits and name not in quantizable:
        raise CompressionError(f"the {name} compressor{' with shared indices' * shared} "
                               f"takes no quantizer (bits={bits}); bits go with "
                               f"{', '.join(quantizable)}")
    q = QSGD(bits) if bits else None
    ef = ResidualMemory() if error_feedback else NoneMemory()
    if name == "topk":
        return Compression(TopKCompressor(density=density, chunk=chunk), q, ef, algorithm)
    if name == "global-topk":
        return Compression(GlobalTopKCompressor(density=density), None, ef, algorithm)
    if name == "randomk":
        return Compression(RandomKCompressor(density=density, seed=seed, shared=shared),
                           q, ef, algorithm)
    if name == "threshold":
        if threshold is None:
            raise CompressionError("the threshold compressor needs a threshold (--threshold)")
        return Compression(ThresholdCompressor(threshold), q, ef, algorithm)
    if name == "dgc":
        memory = DGCMemory(momentum, clip_norm) if error_feedback else NoneMemory()
        return Compression(DGCCompressor(density, warmup_steps=density_warmup_steps), q,
                           memory, algorithm)
    if name == "qsgd":
        return Compression(NoneCompressor(), QSGD(bits or 4), ef, algorithm)
    if name == "terngrad":
        return Compression(NoneCompressor(), terngrad(), ef, algorithm)
    if name == "signsgd":
        return Compression(SignCompressor(0.0), None, NoneMemory(), algorithm)
    if name == "signum":
        return Compression(SignCompressor(momentum), None, NoneMemory(), algorithm)
    if name == "efsignsgd":
        return Compression(EFSignCompressor(), None, ResidualMemory(), algorithm)
    if name in ("fp16", "bf16"):
        return Compression(CastCompressor(name), None,
                           ResidualMemory() if error_feedback else NoneMemory(), algorithm)
    return Compression(PowerSGDCompressor(rank, seed=seed), None, ef, algorithm)
