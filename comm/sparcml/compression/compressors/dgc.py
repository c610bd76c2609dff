"""``dgc``: Deep Gradient Compression (Lin et al. 2018): momentum correction, masking, clipping.

The classes: :class:`sparcml.compression.DGCCompressor` and
:class:`~sparcml.compression.DGCMemory` (``compression/_sparsifiers.py``); its cost the
default (the sparse allreduce of the top ``--density``).
"""

from __future__ import annotations

from .._objects import Compression, NoneMemory
from .._registry import (BITS, DENSITY, MOMENTUM, CompressorSpec, Param, bits_label,
                         nonnegative_int, percent_label, quantizer_of, register_compressor)
from .._sparsifiers import DGCCompressor, DGCMemory

WARMUP = Param("density_warmup_steps", "--density-warmup-steps",
               "steps of the exponential density warm-up from 25%% down to --density",
               type=nonnegative_int, default=0)
CLIP = Param("clip_norm", "--clip-norm", "clip each rank's bucket to this L2 norm", type=float,
             default=None)


def build(*, density, bits, momentum, density_warmup_steps, clip_norm, algorithm,
          error_feedback):
    memory = DGCMemory(momentum, clip_norm) if error_feedback else NoneMemory()
    return Compression(DGCCompressor(density, warmup_steps=density_warmup_steps),
                       quantizer_of(bits), memory, algorithm)


SPEC = register_compressor(CompressorSpec(
    name="dgc", order=50, build=build, params=(DENSITY, BITS, MOMENTUM, WARMUP, CLIP),
    own_momentum=True, labels=(("bits", bits_label), ("density", percent_label)),
    summary="Deep Gradient Compression: --density top-k of the momentum-corrected gradient, "
            "momentum factor masking, --clip-norm, --density-warmup-steps (use --momentum 0 "
            "in the optimizer: the memory applies --compressor-momentum)"))
