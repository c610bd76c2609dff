"""``threshold``: every entry with ``|v| >= --threshold`` (a variable k), error feedback.

The class: :class:`sparcml.compression.ThresholdCompressor` (``compression/_sparsifiers.py``),
with its cost (the default, for the measured k).
"""

from __future__ import annotations

from ..._errors import CompressionError
from .._objects import Compression
from .._registry import (BITS, CompressorSpec, Param, bits_label, memory_of, quantizer_of,
                         register_compressor)
from .._sparsifiers import ThresholdCompressor

THRESHOLD = Param("threshold", "--threshold", "send entries with |v| >= this", type=float,
                  default=None)


def build(*, bits, threshold, algorithm, error_feedback):
    if threshold is None:
        raise CompressionError("the threshold compressor needs a threshold (--threshold)")
    return Compression(ThresholdCompressor(threshold), quantizer_of(bits),
                       memory_of(error_feedback), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="threshold", order=40, build=build, params=(BITS, THRESHOLD),
    labels=(("bits", bits_label), ("threshold", lambda t: f"abs >= {t}")),
    summary="every entry with |v| >= --threshold (variable k), error feedback"))
