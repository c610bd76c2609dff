"""``randomk``: ``--density`` random positions per step, seeded; optionally the same on every rank.

The class: :class:`sparcml.compression.RandomKCompressor` (``compression/_sparsifiers.py``),
with its cost (shared indices: a dense allreduce of k values).
"""

from __future__ import annotations

from .._objects import Compression
from .._registry import (BITS, DENSITY, SEED, CompressorSpec, Param, bits_label, memory_of,
                         percent_label, quantizer_of, register_compressor)
from .._sparsifiers import RandomKCompressor

SHARED = Param("shared", "--shared-indices", "every rank draws the same positions (a dense "
               "allreduce of k values)", type=None, default=False, action="store_true")


def build(*, density, bits, seed, shared, algorithm, error_feedback):
    return Compression(RandomKCompressor(density=density, seed=seed, shared=shared),
                       quantizer_of(bits), memory_of(error_feedback), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="randomk", order=30, build=build, params=(DENSITY, BITS, SEED, SHARED),
    no_quantizer=lambda p: "with shared indices" if p["shared"] else None,
    labels=(("bits", bits_label), ("density", percent_label),
            ("shared_indices", lambda shared: "shared" if shared else None)),
    summary="--density random positions per step, seeded; --shared-indices: the same on "
            "every rank (a dense allreduce of k values)"))
