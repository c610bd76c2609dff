"""Gradient compression in GRACE's split: compressor, quantizer, memory, communicator.

The compressors a GRACE or PowerSGD user reaches for, each over sparcml's collectives, in a
registry (:mod:`sparcml.compression._registry`): ``COMPRESSORS`` names them for
``--compressor``, :func:`build` makes one by name, :func:`register_compressor` adds one (a
:class:`CompressorSpec`: its name, parameters, how it is built; its cost is its class's
:meth:`Compressor.predicted_seconds`). The built-in ones are the modules of
``compression/compressors/``, one per name. ``DENSITY``, ``BITS``, ``SEED`` and ``CHUNK``
are the :class:`Param` records of the apps' own flags that compressors share (declaring
``BITS`` lets ``--bits`` add a QSGD quantizer); ``MOMENTUM`` is ``--compressor-momentum``, the
momentum DGC and signum apply themselves. :func:`recommended_hyperparameters` gives a
compressor's paper's learning rate and (outer) momentum for the apps.
"""

from ._objects import (Compression, Compressor, TopKCompressor, GlobalTopKCompressor,
                       NoneCompressor, Memory, ResidualMemory, NoneMemory, Reduced, assemble_parts)
from ._common import key_seed, pack_signs, pack_ternary, unpack_signs, unpack_ternary
from ._registry import (BITS, CHUNK, COMPRESSORS, DENSITY, MOMENTUM, SEED, CompressorSpec,
                        Param, build, compressor_names, compressor_params, get_compressor,
                        recommended_hyperparameters, register_compressor,
                        unregister_compressor)
# the built-in compressors, one module each (importing the package registers them all)
from .compressors.randomk import RandomKCompressor
from .compressors.threshold import ThresholdCompressor
from .compressors.dgc import DGCCompressor, DGCMemory
from .compressors.signsgd import SignCompressor
from .compressors.efsignsgd import EFSignCompressor
from .compressors.fp16 import CastCompressor, to_bf16, from_bf16
from .compressors.terngrad import TernGradCompressor, terngrad
from .compressors.powersgd import PowerSGDCompressor, matrix_shape, orthogonalize
from ._cost import predicted_seconds

__all__ = ["Compression", "Compressor", "TopKCompressor", "GlobalTopKCompressor", "NoneCompressor",
           "Memory", "ResidualMemory", "NoneMemory", "Reduced", "assemble_parts",
           "RandomKCompressor", "ThresholdCompressor", "DGCCompressor", "DGCMemory", "key_seed",
           "SignCompressor", "EFSignCompressor", "CastCompressor", "terngrad",
           "TernGradCompressor", "pack_signs",
           "unpack_signs", "pack_ternary", "unpack_ternary", "to_bf16", "from_bf16",
           "PowerSGDCompressor", "matrix_shape",
           "orthogonalize", "COMPRESSORS", "build", "predicted_seconds", "CompressorSpec",
           "Param", "register_compressor", "unregister_compressor", "get_compressor",
           "compressor_names", "compressor_params", "DENSITY", "BITS", "MOMENTUM", "SEED",
           "CHUNK", "recommended_hyperparameters"]
