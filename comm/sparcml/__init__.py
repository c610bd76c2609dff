"""SparCML sparse collectives on mpi4py with Numba kernels.

Importing ``sparcml`` never imports torch (the adapter lives in ``sparcml.torch``). The
algorithms are records of :mod:`sparcml.registry`; the built-in ones live in
:mod:`sparcml.algorithms` and register themselves when ``sparcml`` is imported.
"""

from . import _mpi  # noqa: F401 - first: a missing libmpi fails here, saying what to install
from .abort import abort_on_error
from .algorithms import DEFAULT_ALGORITHM, DENSE_BASELINE
from .collectives import allgather, bcast, reduce_scatter
from .context import TrafficStats
from .costmodel import CostModel
from .entry import allreduce, calibrate, iallreduce
from .errors import (CollectiveFailure, CompressionError, IncompatibleOptionsError,
                     InvalidArgumentError, InvalidOutputError, InvalidVectorError,
                     QuantizationError, RankMismatchError, SparcmlError, UnknownAlgorithmError,
                     UnsupportedDtypeError)
from .exchange import block_bounds
from .global_topk import TopKReduced, itopk_allreduce, topk_allreduce
from .nonblocking import Request
from .qsgd import QSGD
from .registry import ALGORITHMS, AUTO, Algorithm, register
from .topk import TopK
from .vector import SparseVector, index_dtype_for, should_be_dense

__all__ = [
    "ALGORITHMS",
    "AUTO",
    "DEFAULT_ALGORITHM",
    "DENSE_BASELINE",
    "Algorithm",
    "register",
    "SparseVector",
    "TrafficStats",
    "allreduce",
    "calibrate",
    "CostModel",
    "iallreduce",
    "topk_allreduce",
    "itopk_allreduce",
    "TopKReduced",
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
    "InvalidArgumentError",
    "CollectiveFailure",
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
