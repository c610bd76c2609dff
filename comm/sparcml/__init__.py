"""SparCML sparse collectives on mpi4py with Numba kernels.

Importing ``sparcml`` never imports torch (the adapter lives in ``sparcml.torch``). The
algorithms are :class:`Algorithm` records of one registry; the built-in ones register
themselves when ``sparcml`` is imported, others with :func:`register` or as installed plugins
(:func:`load_plugins`). The public API is ``__all__`` here and in the public subpackages
``sparcml.compression``, ``sparcml.sim`` and ``sparcml.torch``; modules and names with a
leading underscore are internal.

Constants: ``AUTO`` (``"auto"``: the cost model's choice per call, where an algorithm name
is taken); ``DEFAULT_ALGORITHM`` and ``DENSE_BASELINE`` (names of the registry: the default
of :func:`allreduce`, the ``MPI_Allreduce`` baseline); ``TOPK_ALLREDUCE`` (the label
:func:`topk_allreduce` puts in :attr:`TrafficStats.algorithm`, and what
:meth:`CostModel.choose_topk_step` returns for it); ``AUTO_EXPLORING_CALLS`` (an upper bound on
the calls of one shape that ``algorithm="auto"`` spends measuring its contenders before it
settles).
"""

from . import _mpi  # noqa: F401 - first: a missing libmpi fails here, saying what to install
from ._runtime.abort import abort_on_error
from ._numba_cache import guard_numba_cache
from ._runtime.agreement import raise_everywhere
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
from ._collectives.hierarchical import node_sizes
from ._model.tuning import EXPLORING_CALLS as AUTO_EXPLORING_CALLS
from ._topk.topk_allreduce import NAME as TOPK_ALLREDUCE
from ._topk.topk_allreduce import TopKReduced
from ._topk.entry import calibrate_topk, itopk_allreduce, topk_allreduce
from ._runtime.nonblocking import Request
from ._quant.qsgd import QSGD
from ._registry import (ALGORITHMS, AUTO, Algorithm, check_algorithm_options, get_algorithm,
                        load_plugins, register)
from ._runtime.call_context import CallContext
from ._topk.local import TopK, select_topk
from ._collectives.plan import AllreducePlan, PlanInputError, PlanShapeError, plan
from ._topk.plan import TopKPlan, topk_plan
from ._vector import SparseVector, index_dtype_for, should_be_dense

__all__ = [
    "ALGORITHMS",
    "AUTO",
    "DEFAULT_ALGORITHM",
    "DENSE_BASELINE",
    "Algorithm",
    "CallContext",
    "register",
    "get_algorithm",
    "check_algorithm_options",
    "load_plugins",
    "SparseVector",
    "TrafficStats",
    "Options",
    "default_options",
    "allreduce",
    "calibrate",
    "calibrate_topk",
    "CostModel",
    "AUTO_EXPLORING_CALLS",
    "iallreduce",
    "plan",
    "AllreducePlan",
    "PlanInputError",
    "PlanShapeError",
    "topk_plan",
    "TopKPlan",
    "topk_allreduce",
    "itopk_allreduce",
    "TopKReduced",
    "TOPK_ALLREDUCE",
    "allgather",
    "reduce_scatter",
    "bcast",
    "Request",
    "abort_on_error",
    "guard_numba_cache",
    "raise_everywhere",
    "node_sizes",
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
    "select_topk",
]

__version__ = "0.1.0"
