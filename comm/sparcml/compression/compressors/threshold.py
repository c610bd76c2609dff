"""``threshold``: every entry with ``|v| >= --threshold`` (a variable k), error feedback.

:class:`ThresholdCompressor`; its cost is the default's for the measured k (not known in
advance: :func:`sparcml.compression.predicted_seconds` needs ``sent=``).
"""

from __future__ import annotations

import numpy as np

from ..._errors import CompressionError
from ..._vector import SparseVector
from .._common import _check_finite
from .._objects import Compression, Compressor
from .._registry import (BITS, CompressorSpec, Param, bits_label, memory_of, quantizer_of,
                         register_compressor)


class ThresholdCompressor(Compressor):
    """Every entry with ``|v| >= threshold`` (> 0): a variable number per call and rank.
    Raises :class:`~sparcml.CompressionError` for NaN or Inf."""

    def __init__(self, threshold: float):
        if isinstance(threshold, (bool, np.bool_)) or not isinstance(
                threshold, (int, float, np.integer, np.floating)) or not 0 < threshold < np.inf:
            raise CompressionError(f"threshold must be a finite number > 0, got {threshold!r}")
        self.threshold = float(threshold)

    def compress(self, x: np.ndarray) -> SparseVector:
        _check_finite(x, "ThresholdCompressor")
        idx = np.flatnonzero(np.abs(x) >= self.threshold).astype(np.int64)
        return SparseVector.unchecked(x.shape[0], idx, x[idx])

    def num_sent(self, n: int) -> int:  # not known in advance: at most n
        return n

    def predicted_seconds(self, model, *, P, n, sent, itemsize, quantizer, algorithm,
                          shapes=None) -> float:
        """The default, for the measured ``sent`` (k is not known in advance)."""
        if sent is None:
            raise ValueError("the threshold compressor's k is measured: pass sent=")
        return super().predicted_seconds(model, P=P, n=n, sent=sent, itemsize=itemsize,
                                         quantizer=quantizer, algorithm=algorithm)

    def __repr__(self) -> str:
        return f"ThresholdCompressor(threshold={self.threshold})"

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.threshold == self.threshold

    def __hash__(self) -> int:
        return hash((type(self), self.threshold))


THRESHOLD = Param("threshold", "--threshold", "send entries with |v| >= this", type=float,
                  default=None)


def build(*, bits, threshold, algorithm, error_feedback):
    if threshold is None:
        raise CompressionError("the threshold compressor needs a threshold (--threshold)")
    return Compression(ThresholdCompressor(threshold), quantizer_of(bits),
                       memory_of(error_feedback), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="threshold", order=40, build=build, params=(BITS, THRESHOLD),
    recommended={"source": "Strom 2015 / Dryden et al. 2016: "
                           "the dense run's SGD (learning rate, momentum)"},
    labels=(("bits", bits_label), ("threshold", lambda t: f"abs >= {t}")),
    summary="every entry with |v| >= --threshold (variable k), error feedback"))
