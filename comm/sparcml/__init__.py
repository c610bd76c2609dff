"""SparCML sparse collectives on mpi4py with Numba kernels.

Importing ``sparcml`` never imports torch (the adapter lives in ``sparcml.torch``). The
algorithms are records of :mod:`sparcml._collectives.registry`; the built-in ones live in
:mod:`sparcml._collectives.algorithms` and register themselves when ``sparcml`` is imported.
"""

from . import _mpi  # noqa: F401 - first: a missing libmpi fails here, saying what to install
from ._runtime.abort import abort_on_error
from ._collectives.algorithms import DEFAULT_ALGORITHM, DENSE_BASELINE
from ._collectives.gather_scatter import allgather, bcast, reduce_scatter
from ._runtime.context import TrafficStats
from ._model.costmodel import CostModel
from ._collectives.entry import allreduce, calibrate, iallreduce
from ._options import Options, default_options
from ._errors import (AgreementFieldError, CollectiveFailure, CompressionError,
                      IncompatibleOptionsError, InvalidArgumentError, InvalidOptionError,
                      InvalidOutputError, InvalidVectorError, QuantizationError,
                      RankMismatchError, SparcmlError, UnknownAlgorithmError,
                      UnsupportedDtypeError)
from ._collectives.exchange import block_bounds
from ._topk.topk_allreduce import TopKReduced, itopk_allreduce, topk_allreduce
from ._runtime.nonblocking import Request
from ._quant.qsgd import QSGD
from ._collectives.registry import ALGORITHMS, AUTO, Algorithm, register
from ._topk.local import TopK
from ._vector import SparseVector, index_dtype_for, should_be_dense

__all__ = [
    "ALGORITHMS",
    "AUTO",
    "DEFAULT_ALGORITHM",
    "DENSE_BASELINE",
    "Algorithm",
    "register",
    "SparseVector",
    "TrafficStats",
    "Options",
    "default_options",
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
    "InvalidOptionError",
    "AgreementFieldError",
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
