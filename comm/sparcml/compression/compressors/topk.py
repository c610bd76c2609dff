"""``topk``: the ``--density`` largest magnitudes per bucket, error feedback (SparCML's own).

The class: :class:`sparcml.compression.TopKCompressor` (``compression/_objects.py``), its cost
the default (the sparse allreduce of k values).
"""

from __future__ import annotations

from .._objects import Compression, TopKCompressor
from .._registry import (BITS, CHUNK, DENSITY, CompressorSpec, bits_label, memory_of,
                         percent_label, quantizer_of, register_compressor)


def build(*, density, bits, chunk, algorithm, error_feedback):
    return Compression(TopKCompressor(density=density, chunk=chunk), quantizer_of(bits),
                       memory_of(error_feedback), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="topk", order=10, build=build, params=(DENSITY, BITS, CHUNK),
    labels=(("bits", bits_label), ("density", percent_label)),
    summary="the --density largest magnitudes per bucket (with --bits: QSGD values), "
            "error feedback"))
