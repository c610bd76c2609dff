"""``signsgd``: 1-bit signs, bit-packed allgather, majority vote (Bernstein et al. 2018).

The class: :class:`sparcml.compression.SignCompressor` (``compression/_quantizers.py``), with
its cost (an allgather of the packed signs).
"""

from __future__ import annotations

from .._objects import Compression, NoneMemory
from .._quantizers import SignCompressor
from .._registry import CompressorSpec, register_compressor


def build(*, algorithm, error_feedback):
    return Compression(SignCompressor(0.0), None, NoneMemory(), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="signsgd", order=80, build=build, labels=(("lr", lambda lr: f"lr {lr:g}"),),
    summary="1-bit signs, bit-packed allgather, majority vote"))
