"""Gradient compression in GRACE's split: compressor, quantizer, memory, communicator.

The compressors a GRACE or PowerSGD user reaches for, each over sparcml's collectives, in a
registry (:mod:`sparcml.compression._registry`): ``COMPRESSORS`` names them for
``--compressor``, :func:`build` makes one by name, :func:`register_compressor` adds one (a
:class:`CompressorSpec`: its name, parameters, how it is built; its cost is its class's
:meth:`Compressor.predicted_seconds`). The built-in ones are the modules of
``compression/compressors/``, one per name. ``DENSITY``, ``BITS``, ``MOMENTUM``, ``SEED`` and
``CHUNK`` are the :class:`Param` records of the apps' own flags that compressors share
(declaring ``BITS`` lets ``--bits`` add a QSGD quantizer).
"""

from ._objects import (Compression, Compressor, TopKCompressor, GlobalTopKCompressor,
                       NoneCompressor, Memory, ResidualMemory, NoneMemory, Reduced, assemble_parts)
from ._sparsifiers import (RandomKCompressor, ThresholdCompressor, DGCCompressor, DGCMemory,
                           key_seed)
from ._quantizers import (SignCompressor, EFSignCompressor, CastCompressor, terngrad, pack_signs,
                          unpack_signs, to_bf16, from_bf16)
from ._powersgd import (PowerSGDCompressor, matrix_shape, orthogonalize)
from ._registry import (BITS, CHUNK, COMPRESSORS, DENSITY, MOMENTUM, SEED, CompressorSpec,
                        Param, build, compressor_names, compressor_params, get_compressor,
                        register_compressor, unregister_compressor)
from . import compressors  # noqa: F401  the built-in ones register on import
from ._cost import predicted_seconds

__all__ = ["Compression", "Compressor", "TopKCompressor", "GlobalTopKCompressor", "NoneCompressor",
           "Memory", "ResidualMemory", "NoneMemory", "Reduced", "assemble_parts",
           "RandomKCompressor", "ThresholdCompressor", "DGCCompressor", "DGCMemory", "key_seed",
           "SignCompressor", "EFSignCompressor", "CastCompressor", "terngrad", "pack_signs",
           "unpack_signs", "to_bf16", "from_bf16", "PowerSGDCompressor", "matrix_shape",
           "orthogonalize", "COMPRESSORS", "build", "predicted_seconds", "CompressorSpec",
           "Param", "register_compressor", "unregister_compressor", "get_compressor",
           "compressor_names", "compressor_params", "DENSITY", "BITS", "MOMENTUM", "SEED",
           "CHUNK"]
