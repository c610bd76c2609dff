"""``global-topk``: the ``--density`` largest of the sum over ranks (``topk_allreduce``).

The class: :class:`sparcml.compression.GlobalTopKCompressor` (``compression/_objects.py``), its
cost the default (the global top-k step of the cost model).
"""

from __future__ import annotations

from .._objects import Compression, GlobalTopKCompressor
from .._registry import (DENSITY, CompressorSpec, bits_label, memory_of, percent_label,
                         register_compressor)


def build(*, density, algorithm, error_feedback):
    return Compression(GlobalTopKCompressor(density=density), None, memory_of(error_feedback),
                       algorithm)


SPEC = register_compressor(CompressorSpec(
    name="global-topk", order=20, build=build, params=(DENSITY,),
    recommended={"source": "Shi et al. 2019 (global top-k): "
                           "the dense run's SGD (learning rate, momentum)"},
    labels=(("bits", bits_label), ("density", percent_label)),
    summary="the --density largest of the sum over ranks (sparcml.topk_allreduce)"))
