"""The dense baseline's ``MPI_Allreduce`` as the simulator charges it, without running it.

For a P N too large to hold (nothing of a dense allreduce can be shared between the simulated
ranks): ``sparc-bench --simulate`` records such rows as modeled only.
"""

from __future__ import annotations

import numpy as np

from .._errors import InvalidArgumentError
from ._collective_cost import allreduce_time
from ._network import parse_network
from ._world import add_rate

__all__ = ["dense_allreduce_model"]


def dense_allreduce_model(network, P: int, nbytes: int) -> tuple[float, int]:
    """Modeled seconds and bytes sent per rank of an ``MPI_Allreduce`` of ``nbytes`` on ``P``
    simulated ranks of ``network`` (a :class:`NetworkSpec` or its text), as
    :func:`sparcml.sim.run` charges one: MPICH's algorithm for that size on the slowest link the
    ranks span, its local additions at this machine's measured rate (``np.add`` of float32);
    bytes ``2 (P - 1) nbytes / P`` (Rabenseifner's reduce-scatter and allgather)."""
    net = parse_network(network)
    for name, value, low in (("P", P, 1), ("nbytes", nbytes, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise InvalidArgumentError(f"{name} must be an integer >= {low}, got {value!r}")
    alpha, beta = net.collective_link(range(P))
    return allreduce_time(P, nbytes, alpha, beta, add_rate()), 2 * (P - 1) * nbytes // P
