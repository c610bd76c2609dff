"""``bf16``: the values as bfloat16, a 16-bit allreduce.

The class: :class:`sparcml.compression.CastCompressor` (``compression/_quantizers.py``), with
its cost (a dense allreduce of 2 bytes per value).
"""

from __future__ import annotations

from .._objects import Compression
from .fp16 import CastCompressor
from .._registry import CompressorSpec, memory_of, register_compressor


def build(*, algorithm, error_feedback):
    return Compression(CastCompressor("bf16"), None, memory_of(error_feedback), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="bf16", order=120, build=build,
    recommended={"source": "lossless up to rounding: the dense run's SGD"},
    summary="values as bfloat16, 16-bit allreduce"))
