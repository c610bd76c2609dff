"""SparCML sparse collectives on mpi4py with Numba kernels.

Importing ``sparcml`` never imports torch (the adapter lives in ``sparcml.torch``).
"""

from .abort import abort_on_error
from .algorithms import ALGORITHMS, allreduce, block_bounds, iallreduce
from .costmodel import CostModel, calibrate
from .collectives import allgather, bcast, reduce_scatter
from .nonblocking import Request
from .context import TrafficStats
from .errors import (CompressionError, IncompatibleOptionsError, InvalidOutputError,
                     InvalidVectorError, QuantizationError, RankMismatchError, SparcmlError, UnknownAlgorithmError,
                     UnsupportedDtypeError)
from .qsgd import QSGD
from .topk import TopK
from .vector import SparseVector, index_dtype_for, should_be_dense

__all__ = [
    "ALGORITHMS",
    "SparseVector",
    "TrafficStats",
    "allreduce",
    "calibrate",
    "CostModel",
    "iallreduce",
    "allgather",
    "reduce_scatter",
    "bcast",
    "Request",
    "abort_on_error",
    "block_bounds",
    "index_dtype_for",
    "should_be_dense",
    "SparcmlError",
    "InvalidVectorError",
    "InvalidOutputError",
    "RankMismatchError",
    "UnknownAlgorithmError",
    "UnsupportedDtypeError",
    "IncompatibleOptionsError",
    "CompressionError",
    "QuantizationError",
    "QSGD",
    "TopK",
]

__version__ = "0.1.0"
