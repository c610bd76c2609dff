"""A toy compressor registered through the compressor registry alone (imported by the tests).

``toy-stride``: every ``--toy-stride``-th value of a bucket (the same positions on every
rank), error feedback. Nothing else in the code base knows it: this one file holds the class,
its cost (:meth:`ToyStrideCompressor.predicted_seconds`), its CLI name, its parameter (the
``--toy-stride`` flag the deep apps then take), its table label and its recommended
hyperparameters. Written with public names only (``tests/test_public_api.py`` checks): what a
compressor author needs is :class:`sparcml.compression.Compressor`,
:class:`~sparcml.compression.CompressorSpec`, :class:`~sparcml.compression.Param` and
:func:`~sparcml.compression.register_compressor`.
"""

import math

import numpy as np

from sparcml import SparseVector
from sparcml.compression import (COMPRESSORS, Compression, Compressor, CompressorSpec,
                                 NoneMemory, Param, ResidualMemory, register_compressor)

NAME = "toy-stride"


class ToyStrideCompressor(Compressor):
    """Every ``stride``-th value, from the first."""

    def __init__(self, stride: int = 2):
        self.stride = int(stride)

    def compress(self, x: np.ndarray) -> SparseVector:
        idx = np.arange(0, x.shape[0], self.stride, dtype=np.int64)
        return SparseVector.unchecked(x.shape[0], idx, x[idx])

    def num_sent(self, n: int) -> int:
        return math.ceil(n / self.stride)

    def predicted_seconds(self, model, *, P, n, sent, itemsize, quantizer, algorithm,
                          shapes=None) -> float:
        """Every rank sends the same positions: as a dense allreduce of k values."""
        return model.allreduce(self.num_sent(n) * itemsize)

    def __repr__(self) -> str:
        return f"ToyStrideCompressor(stride={self.stride})"


STRIDE = Param("stride", "--toy-stride", "send every this many-th value", type=int, default=2)


def build(*, stride, algorithm, error_feedback):
    memory = ResidualMemory() if error_feedback else NoneMemory()
    return Compression(ToyStrideCompressor(stride), None, memory, algorithm)


if NAME not in COMPRESSORS:
    register_compressor(CompressorSpec(
        name=NAME, build=build, params=(STRIDE,), summary="toy: every --toy-stride-th value",
        labels=(("toy_stride", lambda s: f"every {s}"),), recommended={"lr_scale": 1.0}))
