"""Gradient compression in GRACE's split: compressor, quantizer, memory, communicator.

The compressors a GRACE or PowerSGD user reaches for, each over sparcml's collectives:
``COMPRESSORS`` names them for ``--compressor`` and :func:`build` makes one by name.
"""

from ._objects import (Compression, Compressor, TopKCompressor, GlobalTopKCompressor,
                       NoneCompressor, Memory, ResidualMemory, NoneMemory, Reduced, assemble_parts)
from ._sparsifiers import (RandomKCompressor, ThresholdCompressor, DGCCompressor, DGCMemory,
                           key_seed)
from ._quantizers import (SignCompressor, EFSignCompressor, CastCompressor, terngrad, pack_signs,
                          unpack_signs, to_bf16, from_bf16)
from ._powersgd import (PowerSGDCompressor, matrix_shape, orthogonalize)
from ._catalog import COMPRESSORS, build
from ._cost import predicted_seconds

__all__ = ["Compression", "Compressor", "TopKCompressor", "GlobalTopKCompressor", "NoneCompressor",
           "Memory", "ResidualMemory", "NoneMemory", "Reduced", "assemble_parts",
           "RandomKCompressor", "ThresholdCompressor", "DGCCompressor", "DGCMemory", "key_seed",
           "SignCompressor", "EFSignCompressor", "CastCompressor", "terngrad", "pack_signs",
           "unpack_signs", "to_bf16", "from_bf16", "PowerSGDCompressor", "matrix_shape",
           "orthogonalize", "COMPRESSORS", "build", "predicted_seconds"]
