"""``terngrad``: every value ternary ``{-s, 0, s}`` per bucket (Wen et al. 2017).

The class: :class:`sparcml.compression.NoneCompressor` with the quantizer
:func:`sparcml.compression.terngrad` (QSGD at 2 bits, max norm); its cost the default.
"""

from __future__ import annotations

from .._objects import Compression, NoneCompressor
from .._quantizers import terngrad
from .._registry import CompressorSpec, memory_of, register_compressor


def build(*, algorithm, error_feedback):
    return Compression(NoneCompressor(), terngrad(), memory_of(error_feedback), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="terngrad", order=70, build=build,
    summary="all values, ternary {-s, 0, s} per bucket (QSGD 2 bits, max norm)"))
