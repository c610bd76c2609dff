"""``topk``: the ``--density`` largest magnitudes per bucket, error feedback (SparCML's own).

The class: :class:`sparcml.compression.TopKCompressor` (``compression/_objects.py``), its cost
the default (the sparse allreduce of k values). ``--topk-per-tensor``: the top ``--density`` of
each tensor of the bucket instead (DGC's and GRACE's selection; a layer of small gradients then
sends its share too); the default stays per bucket, SparCML's.
"""

from __future__ import annotations

from .._objects import Compression, TopKCompressor
from .._registry import (BITS, CHUNK, DENSITY, CompressorSpec, Param, bits_label, memory_of,
                         percent_label, quantizer_of, register_compressor)

PER_TENSOR = Param("per_tensor", "--topk-per-tensor", "select the top --density of each "
                   "tensor of a bucket (default: of the whole bucket)", type=None,
                   default=False, action="store_true")


def build(*, density, bits, chunk, per_tensor, algorithm, error_feedback):
    return Compression(TopKCompressor(density=density, chunk=chunk, per_tensor=per_tensor),
                       quantizer_of(bits), memory_of(error_feedback), algorithm)


SPEC = register_compressor(CompressorSpec(
    name="topk", order=10, build=build, params=(DENSITY, BITS, CHUNK, PER_TENSOR),
    labels=(("bits", bits_label), ("density", percent_label),
            ("topk_per_tensor", lambda on: "per tensor" if on else None)),
    recommended={"source": "SparCML (Renggli et al. 2019): the dense run's SGD (learning "
                           "rate, momentum 0.9), error feedback"},
    summary="the --density largest magnitudes per bucket (--topk-per-tensor: per tensor; with "
            "--bits: QSGD values), error feedback"))
