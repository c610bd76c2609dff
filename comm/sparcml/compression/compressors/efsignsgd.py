"""``efsignsgd``: scaled signs with error feedback (Karimireddy et al. 2019, EF-signSGD).

The class: :class:`sparcml.compression.EFSignCompressor` (``compression/_quantizers.py``), with
its cost (an allgather of the packed signs and a scale).
"""

from __future__ import annotations

from .._objects import Compression, ResidualMemory
from .._quantizers import EFSignCompressor
from .._registry import CompressorSpec, register_compressor


def build(*, algorithm, error_feedback):
    return Compression(EFSignCompressor(), None, ResidualMemory(), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="efsignsgd", order=100, build=build,
    summary="scaled signs |g|_1/n sign(g), 1 bit per value + one scale, error feedback"))
