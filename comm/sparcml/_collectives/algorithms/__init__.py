"""The built-in sparse-allreduce algorithms, one module each, registered on import.

Each module builds one :class:`sparcml._collectives.registry.Algorithm` (its name, its ``run`` function, its
cost function and options) and registers it. A new algorithm is a new module here (or in
another package) that does the same; nothing else needs to change. Registration order is the
order of :data:`sparcml.ALGORITHMS`.
"""

from __future__ import annotations

from . import recursive_doubling, split_sparse, split_dense, dense_allreduce, allgather_sum

__all__ = ["DEFAULT_ALGORITHM", "DENSE_BASELINE", "ALLGATHER_BASELINE"]

DEFAULT_ALGORITHM = recursive_doubling.ALGORITHM.name
DENSE_BASELINE = dense_allreduce.ALGORITHM.name
ALLGATHER_BASELINE = allgather_sum.ALGORITHM.name
_ = (split_sparse, split_dense)  # registered by being imported
