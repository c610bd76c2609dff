"""``signum``: signs of a local momentum, majority vote (Bernstein et al. 2018).

The class: :class:`sparcml.compression.SignCompressor` with a momentum
(``compression/_quantizers.py``), with its cost (an allgather of the packed signs).
"""

from __future__ import annotations

from .._objects import Compression, NoneMemory
from .signsgd import SignCompressor
from .._registry import MOMENTUM, CompressorSpec, register_compressor


def build(*, momentum, algorithm, error_feedback):
    return Compression(SignCompressor(momentum), None, NoneMemory(), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="signum", order=90, build=build, params=(MOMENTUM,), own_momentum=True,
    labels=(("lr", lambda lr: f"lr {lr:g}"),),
    summary="signs of a local --momentum (the SGD then runs without), majority vote"))
